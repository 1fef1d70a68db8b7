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


def packages_with_speaker(
    con: duckdb.DuckDBPyConnection, speaker: str, walked: list[tuple[str, str, str, str]] | None = None
) -> list[dict[str, Any]]:
    """Packages trained on ``speaker``'s recordings: their adapter's or base model's training runs
    read utterances of that speaker from their train splits.

    Per package: ``trained_utterances`` (in the runs' train splits), ``cv_utterances`` (in their
    CV splits: chose the checkpoint, never a gradient) and ``held_out_utterances`` (every other
    split of the audited corpus, e.g. test). A package is listed when the speaker's recordings were
    trained on or chose its checkpoint; one whose recordings sit only in held-out splits is not. An audit recorded before per-split counts existed contributes its speaker's
    total under ``unsplit_utterances`` and is listed, since nothing proves it was not trained on.
    The lineage edges walked are appended to ``walked`` (to be checked against the receipts).
    """
    out = []
    for pkg_rid, pkg_sha in con.execute("SELECT receipt_sha256, package_sha256 FROM packages ORDER BY finished_at").fetchall():
        up = walk(con, pkg_rid, "up", 40)
        if walked is not None:
            walked.extend((e.src, e.dst, e.role, e.direction) for e in up)
        ancestors = sorted({e.src for e in up} | {pkg_rid})
        runs = con.execute(
            """
            SELECT r.receipt_sha256, e.src AS audit,
                   r.doc->'$.parameters.effective_config.plan.train_splits' AS train,
                   r.doc->'$.parameters.effective_config.plan.cv_splits' AS cv
            FROM receipts r JOIN edges e ON e.dst = r.receipt_sha256 AND e.role = 'audit' AND e.direction = 'input'
            WHERE r.kind = 'training_run' AND r.status = 'succeeded'
              AND (r.receipt_sha256 IN (SELECT unnest($anc))
                   -- a base tree's lineage reaches the checkpoint receipt that wrote it; its run lists it
                   OR EXISTS (SELECT 1 FROM edges c WHERE c.dst = r.receipt_sha256 AND c.direction = 'input'
                              AND starts_with(c.role, 'checkpoint:') AND c.src IN (SELECT unnest($anc))))
            ORDER BY r.finished_at""",
            {"anc": ancestors},
        ).fetchall()
        # one audited corpus may feed several runs (base and adapter): classify each split once, by
        # the union of the runs' train splits, then of their CV splits
        by_audit: dict[str, tuple[set[str], set[str]]] = {}
        for _run, audit_rid, train_json, cv_json in runs:
            train, cv = by_audit.setdefault(str(audit_rid), (set(), set()))
            train.update(json.loads(train_json or "[]"))
            cv.update(json.loads(cv_json or "[]"))
        counts = {"trained_utterances": 0, "cv_utterances": 0, "held_out_utterances": 0, "unsplit_utterances": 0}
        audits: set[str] = set()
        for audit_rid, (train, cv) in by_audit.items():
            split_rows = con.execute(
                "SELECT split, utterances FROM audit_speaker_splits WHERE receipt_sha256 = ? AND speaker = ?", [audit_rid, speaker]
            ).fetchall()
            for split, n in split_rows:
                key = "trained_utterances" if split in train else "cv_utterances" if split in cv else "held_out_utterances"
                counts[key] += int(n)
            if not split_rows:
                recorded = con.execute("SELECT count(*) FROM audit_speaker_splits WHERE receipt_sha256 = ?", [audit_rid]).fetchone()
                total = con.execute(
                    "SELECT utterances FROM audit_speakers WHERE receipt_sha256 = ? AND speaker = ?", [audit_rid, speaker]
                ).fetchone()
                if total is None or (recorded and recorded[0]):
                    continue  # the speaker is not in this corpus
                counts["unsplit_utterances"] += int(total[0])
            audits.add(audit_rid)
        if counts["trained_utterances"] or counts["cv_utterances"] or counts["unsplit_utterances"]:
            out.append({"package_receipt": pkg_rid, "package_sha256": pkg_sha, "audits": sorted(audits), **counts})
    return out


def champion_at(con: duckdb.DuckDBPyConnection, alias: str, when: str, line: str | None = None) -> list[dict[str, Any]]:
    """The move of ``alias`` in force at ``when`` (ISO time) in each line (or in ``line`` only),
    with its line, reason and receipt; empty when none was. ``sweep_member`` names the sweep member
    whose run the move came from when the moving receipt is a sweep's decision (its input
    ``sweep_member:<name>`` is the run it judged), else None."""
    one_line = " AND line = ?" if line else ""
    member = (
        "(SELECT min(replace(e.role, 'sweep_member:', '')) FROM edges e JOIN receipts r ON r.receipt_sha256 = h.receipt_sha256"
        " WHERE e.dst = h.receipt_sha256 AND e.role LIKE 'sweep_member:%' AND e.src = r.doc->>'$.parameters.training_run')"
    )
    rows = con.execute(
        f"SELECT line, target_sha256, base_sha256, moved_at, reason, receipt_sha256, {member} FROM alias_history h"
        f" WHERE alias = ? AND moved_at <= ?::TIMESTAMPTZ{one_line}"
        " QUALIFY row_number() OVER (PARTITION BY line ORDER BY moved_at DESC) = 1 ORDER BY line",
        [alias, when, *([line] if line else [])],
    ).fetchall()
    cols = ("line", "target_sha256", "base_sha256", "moved_at", "reason", "receipt", "sweep_member")
    return [dict(zip(cols, r, strict=True)) for r in rows]


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
