"""Provenance questions answered from the catalog alone (documented in docs/provenance.md)."""

from __future__ import annotations

import json
from typing import Any

import duckdb

from voxledger.stores.lineage import walk


def downstream(con: duckdb.DuckDBPyConnection, node: str, depth: int = 30) -> list[dict[str, Any]]:
    """Every receipt reachable downstream of ``node`` (a corpus manifest, audit, artifact...)."""
    ids = sorted({e.dst for e in walk(con, node, "down", depth)} | {e.src for e in walk(con, node, "down", depth)})
    rows = con.execute(
        "SELECT receipt_sha256, kind, task, status, finished_at FROM receipts WHERE receipt_sha256 IN (SELECT unnest(?)) ORDER BY finished_at",
        [ids],
    ).fetchall()
    return [dict(zip(("receipt", "kind", "task", "status", "finished_at"), r, strict=True)) for r in rows]


def packages_with_speaker(con: duckdb.DuckDBPyConnection, speaker: str) -> list[dict[str, Any]]:
    """Packages whose lineage (adapter data and the base model's data) includes ``speaker``."""
    out = []
    for pkg_rid, pkg_sha in con.execute("SELECT receipt_sha256, package_sha256 FROM packages ORDER BY finished_at").fetchall():
        ancestors = sorted({e.src for e in walk(con, pkg_rid, "up", 40)})
        rows = con.execute(
            "SELECT s.receipt_sha256, s.utterances FROM audit_speakers s WHERE s.speaker = ? AND s.receipt_sha256 IN (SELECT unnest(?))",
            [speaker, ancestors],
        ).fetchall()
        if rows:
            out.append(
                {
                    "package_receipt": pkg_rid,
                    "package_sha256": pkg_sha,
                    "audits": [r[0] for r in rows],
                    "utterances": sum(r[1] for r in rows),
                }
            )
    return out


def champion_at(con: duckdb.DuckDBPyConnection, alias: str, when: str) -> dict[str, Any] | None:
    """The alias move in force at ``when`` (ISO time), with its reason and receipt."""
    row = con.execute(
        "SELECT target_sha256, base_sha256, moved_at, reason, receipt_sha256 FROM alias_history WHERE alias = ? AND moved_at <= ?::TIMESTAMPTZ"
        " ORDER BY moved_at DESC LIMIT 1",
        [alias, when],
    ).fetchone()
    return dict(zip(("target_sha256", "base_sha256", "moved_at", "reason", "receipt"), row, strict=True)) if row else None


def evaluations_with_normaliser(con: duckdb.DuckDBPyConnection, version: str) -> list[dict[str, Any]]:
    """Evaluations whose text metrics used normaliser version ``version``."""
    rows = con.execute(
        "SELECT e.receipt_sha256, e.extractor, r.finished_at FROM evaluation_extractors e JOIN receipts r USING (receipt_sha256)"
        " WHERE e.spec->>'$.normaliser_version' = ? ORDER BY r.finished_at",
        [version],
    ).fetchall()
    return [dict(zip(("evaluation", "extractor", "finished_at"), r, strict=True)) for r in rows]


VOLATILE = ("started_at", "finished_at", "wall_s", "frames_per_s", "utterances_per_s", "checkpoint_overhead_s", "peak_rss_mb", "rtf")


def reproductions(con: duckdb.DuckDBPyConnection, original: str | None = None) -> list[dict[str, Any]]:
    """Every reproduction (of ``original`` only, when given), newest first: verdict, stage, re-run wall time."""
    rows = con.execute(
        "SELECT receipt_sha256, finished_at, doc->>'$.parameters.original' AS original, doc->>'$.parameters.original_kind' AS kind,"
        " doc->>'$.parameters.stage' AS stage, doc->>'$.result.verdict' AS verdict, doc->>'$.parameters.code_drift_allowed' AS drift,"
        " CAST(doc->>'$.result.rerun_wall_s' AS DOUBLE) AS wall_s FROM receipts WHERE kind = 'reproduction'"
        " AND (? IS NULL OR doc->>'$.parameters.original' = ?) ORDER BY finished_at DESC",
        [original, original],
    ).fetchall()
    keys = ("reproduction", "finished_at", "original", "original_kind", "stage", "verdict", "code_drift_allowed", "rerun_wall_s")
    return [dict(zip(keys, (*r[:1], str(r[1]), *r[2:6], r[6] == "true", r[7]), strict=True)) for r in rows]


def diff_receipts(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Field-by-field differences of two receipt documents, timings set apart as volatile."""
    out: list[dict[str, Any]] = []

    def rec(x: Any, y: Any, path: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                rec(x.get(k), y.get(k), f"{path}.{k}" if path else k)
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                rec(u, v, f"{path}[{i}]")
        elif x != y:
            leaf = path.rsplit(".", 1)[-1].split("[")[0]
            out.append({"path": path, "a": json.dumps(x)[:200], "b": json.dumps(y)[:200], "volatile": leaf in VOLATILE})

    rec(a, b, "")
    return out
