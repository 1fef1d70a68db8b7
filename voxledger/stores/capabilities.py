"""The capability matrix: which backend x stage x runtime has been exercised, derived from receipts.

Nothing here is hand-edited: every cell is a pure function of the catalog (the ``receipts`` and
``edges`` tables and the ``packages`` / ``training_epochs`` projections), so it is rebuilt
exactly by ``catalog rebuild`` and changes only when a receipt is recorded.

Rows. Backends are the closed registry ``BackendName``; ``-`` stands for "any backend". Stages:
``audit`` (backend-independent), ``train_full``, ``train_lora``, ``promote``, ``evaluate``,
``package``, ``equivalence``, ``listening``. ``evaluate`` has one row per synthesising
``Runtime`` (base, adapter, merged, merged_export) per backend, plus ``- / evaluate /
recordings`` (ground truth belongs to no backend). ``equivalence`` has one row per candidate
runtime of the same four; the reference runtime is named in the evidence. Other stages have
runtime ``-``.

Attribution. A receipt's backend comes from the receipt itself (training_run, package), from
its training_run parent (promotion, equivalence), or, for a stored model tree (an evaluation
candidate, an equivalence input), from the receipt that produced it (training_run, checkpoint via
its run's epochs, package's merged export) or else from a training_run that read it as its
``base_model`` (an imported pretrained model). Listening tests take the backends of the
non-recordings candidates of the evaluation their packets were cut from. A receipt that cannot
be placed is listed in ``unattributed`` with the reason, never dropped silently.

States of one cell, judged per receipt and then folded (the best state present wins; the
evidence is the newest receipt in that state; every receipt is counted):

- ``validated``: a ``succeeded`` receipt that passed its stage's bar on a non-trivial run:
  audit: verdict pass over >= ``MIN_AUDIT_UTTERANCES`` utterances;
  train_full / train_lora: >= ``MIN_TRAIN_STEPS`` optimiser steps, >= 2 epochs, and best CV
  loss below the first epoch's CV loss;
  evaluate: the candidate has >= ``MIN_VALID_ROWS`` valid rows and a content-gate pass rate
  >= ``MIN_CONTENT_GATE_PASS``;
  promote: a challenger was promoted and its gate evaluation meets the evaluate bar;
  package: the fresh-process reload was bitwise equal and the merged-export band GREEN;
  equivalence: overall band GREEN;
  listening: an aggregate with >= ``MIN_RATERS`` raters kept after screening.
- ``smoke_tested``: ``succeeded`` but below that bar (a tiny run, a YELLOW band, packets exported
  but not yet rated); ``why`` says which condition was missed.
- ``failed``: only ``failed`` receipts (a RED comparison, a failed reload, no challenger passing
  its gates, a failing audit): the stage has never succeeded there.
- ``never_run``: no receipt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args

import duckdb

from voxledger.schemas.evaluation import Runtime
from voxledger.schemas.training import BackendName

State = Literal["validated", "smoke_tested", "failed", "never_run"]
ANY = "-"
BACKENDS: tuple[str, ...] = get_args(BackendName)
MODEL_RUNTIMES: tuple[str, ...] = tuple(r for r in get_args(Runtime) if r != "recordings")
STAGES = ("audit", "train_full", "train_lora", "promote", "evaluate", "package", "equivalence", "listening")
RANK: dict[str, int] = {"validated": 3, "smoke_tested": 2, "failed": 1, "never_run": 0}
MIN_AUDIT_UTTERANCES = 100
MIN_TRAIN_STEPS = 100
MIN_VALID_ROWS = 50
MIN_CONTENT_GATE_PASS = 0.5
MIN_RATERS = 10


def grid() -> list[tuple[str, str, str]]:
    """Every (backend, stage, runtime) row of the matrix, in display order."""
    rows = [(ANY, "audit", ANY), (ANY, "evaluate", "recordings")]
    for b in BACKENDS:
        for stage in STAGES[1:]:
            runtimes = MODEL_RUNTIMES if stage in ("evaluate", "equivalence") else (ANY,)
            rows += [(b, stage, rt) for rt in runtimes]
    return rows


@dataclass(frozen=True)
class Evidence:
    """One receipt judged for one cell."""

    backend: str
    stage: str
    runtime: str
    receipt_sha256: str
    finished_at: datetime
    state: State
    why: str


@dataclass(frozen=True)
class Cell:
    """One row of the matrix: its state, the newest receipt in that state, and receipt counts."""

    backend: str
    stage: str
    runtime: str
    state: State
    receipt_sha256: str | None
    finished_at: datetime | None
    why: str
    counts: dict[str, int]


@dataclass(frozen=True)
class CapabilityMatrix:
    """All cells of ``grid()`` plus the receipts that could not be placed on it."""

    cells: tuple[Cell, ...]
    unattributed: tuple[dict[str, str], ...] = field(default=())

    def cell(self, backend: str, stage: str, runtime: str = ANY) -> Cell:
        """The cell of one row; KeyError names the row when it is not on the grid."""
        for c in self.cells:
            if (c.backend, c.stage, c.runtime) == (backend, stage, runtime):
                return c
        raise KeyError(f"({backend}, {stage}, {runtime}) is not a row of the capability matrix")

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (times as ISO 8601)."""
        cells = [asdict(c) | {"finished_at": c.finished_at.isoformat() if c.finished_at else None} for c in self.cells]
        return {"cells": cells, "unattributed": list(self.unattributed)}


class _Judge:
    """Reads the catalog once and turns receipts into ``Evidence`` rows."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.docs: dict[str, dict[str, Any]] = {}
        self.when: dict[str, datetime] = {}
        self.kind: dict[str, str] = {}
        for rid, kind, when, doc in con.execute(
            "SELECT receipt_sha256, kind, finished_at, doc FROM receipts WHERE kind IN"
            " ('audit', 'training_run', 'promotion', 'evaluation', 'package', 'equivalence',"
            " 'packet_set', 'aggregate') ORDER BY finished_at"
        ).fetchall():
            self.docs[rid], self.when[rid], self.kind[rid] = json.loads(doc), when, kind
        self.unattributed: list[dict[str, str]] = []
        self._tree_cache: dict[str, set[str]] = {}

    def evidence(self) -> Iterator[Evidence]:
        for rid, doc in self.docs.items():
            yield from getattr(self, f"_{self.kind[rid]}")(rid, doc)

    def _ev(self, rid: str, backend: str, stage: str, runtime: str, state: State, why: str) -> Evidence:
        return Evidence(backend, stage, runtime, rid, self.when[rid], state, why)

    def _skip(self, rid: str, reason: str) -> None:
        self.unattributed.append({"receipt_sha256": rid, "kind": self.kind[rid], "reason": reason})

    def _judged(self, doc: dict[str, Any], problems: list[str]) -> tuple[State, str]:
        if doc["status"] == "failed":
            return "failed", (doc.get("error") or "receipt status failed")[:200]
        return ("smoke_tested", "; ".join(problems)) if problems else ("validated", "passed the stage bar")

    def tree_backends(self, sha: str) -> set[str]:
        """Backends of a stored model tree: from its producer, else from a run that used it as base."""
        if sha not in self._tree_cache:
            found: set[str] = set()
            for kind, doc in self.con.execute(
                "SELECT r.kind, r.doc FROM edges e JOIN receipts r ON r.receipt_sha256 = e.src WHERE e.dst = ? AND e.direction = 'output'",
                [sha],
            ).fetchall():
                d = json.loads(doc)
                if kind in ("training_run", "package"):
                    found.add(d["parameters"]["backend"])
                elif kind == "checkpoint":
                    found |= {
                        r[0]
                        for r in self.con.execute(
                            "SELECT DISTINCT backend FROM training_epochs WHERE run_key = ?", [d["parameters"]["run_key"]]
                        ).fetchall()
                    }
            if not found:
                found = {
                    r[0]
                    for r in self.con.execute(
                        "SELECT DISTINCT r.doc->>'$.parameters.backend' FROM edges e JOIN receipts r ON r.receipt_sha256 = e.dst"
                        " WHERE e.src = ? AND e.direction = 'input' AND e.role = 'base_model' AND r.kind = 'training_run'",
                        [sha],
                    ).fetchall()
                }
            self._tree_cache[sha] = found
        return set(self._tree_cache[sha])

    def _run_backend(self, run_rid: str) -> str | None:
        run = self.docs.get(run_rid)
        return run["parameters"]["backend"] if run is not None and self.kind[run_rid] == "training_run" else None

    def _audit(self, rid: str, doc: dict[str, Any]) -> Iterator[Evidence]:
        r = doc["result"]
        problems = [f"verdict {r['verdict']}"] if r["verdict"] != "pass" else []
        if r["n_utterances"] < MIN_AUDIT_UTTERANCES:
            problems.append(f"{r['n_utterances']} utterances < {MIN_AUDIT_UTTERANCES}")
        yield self._ev(rid, ANY, "audit", ANY, *self._judged(doc, problems))

    def _training_run(self, rid: str, doc: dict[str, Any]) -> Iterator[Evidence]:
        p, r = doc["parameters"], doc["result"]
        problems = []
        if r["total_steps"] < MIN_TRAIN_STEPS:
            problems.append(f"{r['total_steps']} steps < {MIN_TRAIN_STEPS}")
        if len(r["epochs"]) < 2 or not r["best_cv_loss"] < r["epochs"][0]["cv_loss"]:
            problems.append("CV loss never fell below the first epoch's")
        yield self._ev(rid, p["backend"], f"train_{p['mode']}", ANY, *self._judged(doc, problems))

    def eval_problems(self, doc: dict[str, Any], candidate: str) -> list[str]:
        """Why one candidate of an evaluation misses the evaluate bar (empty: it meets it)."""
        s = next((s for s in doc["result"]["summaries"] if s["candidate"] == candidate), None)
        if s is None:
            return [f"no summary for candidate {candidate}"]
        valid, passing = round(s["n_rows"] * (1 - s["invalid_rate"])), 1 - s["content_gate_fail_rate"]
        problems = [f"{valid} valid rows < {MIN_VALID_ROWS}"] if valid < MIN_VALID_ROWS else []
        if passing < MIN_CONTENT_GATE_PASS:
            problems.append(f"content-gate pass rate {passing:.2f} < {MIN_CONTENT_GATE_PASS}")
        return problems

    def _evaluation(self, rid: str, doc: dict[str, Any]) -> Iterator[Evidence]:
        for c in doc["parameters"]["candidates"]:
            state, why = self._judged(doc, self.eval_problems(doc, c["name"]))
            if c["runtime"] == "recordings":
                yield self._ev(rid, ANY, "evaluate", "recordings", state, why)
                continue
            backends = self.tree_backends(c["artifact_sha256"]) if c["artifact_sha256"] else set()
            if len(backends) != 1:
                self._skip(rid, f"candidate {c['name']}: artifact traces to backends {sorted(backends)}, need exactly one")
                continue
            yield self._ev(rid, backends.pop(), "evaluate", c["runtime"], state, f"{c['name']}: {why}")

    def _promotion(self, rid: str, doc: dict[str, Any]) -> Iterator[Evidence]:
        p, promoted = doc["parameters"], doc["result"]["promoted"]
        backend = self._run_backend(p["training_run"])
        if backend is None:
            self._skip(rid, f"training run {p['training_run'][:12]} is not in the catalog")
            return
        gate = self.docs.get(p["evaluation"])
        if promoted is None:
            problems = ["no challenger promoted"]
        elif gate is None:
            problems = [f"gate evaluation {p['evaluation'][:12]} is not in the catalog"]
        else:
            missed = self.eval_problems(gate, promoted)
            problems = [f"gate evaluation of {promoted}: " + "; ".join(missed)] if missed else []
        yield self._ev(rid, backend, "promote", ANY, *self._judged(doc, problems))

    def _package(self, rid: str, doc: dict[str, Any]) -> Iterator[Evidence]:
        row = self.con.execute(
            "SELECT backend, reload_bitwise_equal, equivalence_band FROM packages WHERE receipt_sha256 = ?", [rid]
        ).fetchone()
        if row is None:
            self._skip(rid, "no row in the packages table: run catalog rebuild")
            return
        problems = [] if row[1] else ["reload was not bitwise equal"]
        if row[2] != "GREEN":
            problems.append(f"merged-export band {row[2]}")
        yield self._ev(rid, row[0], "package", ANY, *self._judged(doc, problems))

    def _equivalence(self, rid: str, doc: dict[str, Any]) -> Iterator[Evidence]:
        p, band = doc["parameters"], doc["report"]["band"]
        backends: set[str] = set()
        for i in doc["inputs"]:
            if i["ref"] == "receipt" and i["role"] == "training_run":
                backends |= {b for b in [self._run_backend(i["sha256"])] if b}
            elif i["ref"] == "artifact":
                backends |= self.tree_backends(i["sha256"])
        runtime = p["candidate"]["name"]
        if len(backends) != 1 or runtime not in MODEL_RUNTIMES:
            self._skip(
                rid, f"backends {sorted(backends)} (need exactly one), candidate runtime {runtime!r} (need one of {list(MODEL_RUNTIMES)})"
            )
            return
        state, why = self._judged(doc, [] if band == "GREEN" else [f"band {band}"])
        yield self._ev(rid, backends.pop(), "equivalence", runtime, state, f"vs {p['reference']['name']}: {why}")

    def listening_backends(self, packet_set_rid: str) -> set[str]:
        """Backends of the synthesising candidates a packet set was built from."""
        ps = self.docs.get(packet_set_rid)
        if ps is None:
            return set()
        names, plan = set(ps["parameters"]["candidates"]), ps["parameters"]["evaluation_plan_sha256"]
        found: set[str] = set()
        for rid, doc in self.docs.items():
            if self.kind[rid] == "evaluation" and doc["parameters"]["plan_sha256"] == plan:
                for c in doc["parameters"]["candidates"]:
                    if c["name"] in names and c["artifact_sha256"]:
                        found |= self.tree_backends(c["artifact_sha256"])
        return found

    def _listening(self, rid: str, doc: dict[str, Any], packet_set: str, problems: list[str]) -> Iterator[Evidence]:
        backends = self.listening_backends(packet_set)
        if not backends:
            self._skip(rid, f"packet set {packet_set[:12]}: no candidate traces to a backend")
        for b in sorted(backends):
            yield self._ev(rid, b, "listening", ANY, *self._judged(doc, problems))

    def _packet_set(self, rid: str, doc: dict[str, Any]) -> Iterator[Evidence]:
        yield from self._listening(rid, doc, rid, ["packets exported, no ratings aggregated"])

    def _aggregate(self, rid: str, doc: dict[str, Any]) -> Iterator[Evidence]:
        kept = sum(1 for s in doc["result"]["screening"] if s["included"])
        problems = [f"{kept} raters kept after screening < {MIN_RATERS}"] if kept < MIN_RATERS else []
        yield from self._listening(rid, doc, doc["parameters"]["packet_set_receipt_sha256"], problems)


def capability_matrix(con: duckdb.DuckDBPyConnection) -> CapabilityMatrix:
    """Judge every relevant receipt of the catalog and fold the evidence into ``grid()`` cells."""
    judge = _Judge(con)
    by_cell: dict[tuple[str, str, str], list[Evidence]] = {row: [] for row in grid()}
    for ev in judge.evidence():
        by_cell[(ev.backend, ev.stage, ev.runtime)].append(ev)
    cells = []
    for (backend, stage, runtime), evs in by_cell.items():
        counts = {s: sum(1 for e in evs if e.state == s) for s in ("validated", "smoke_tested", "failed")}
        if not evs:
            cells.append(Cell(backend, stage, runtime, "never_run", None, None, "no receipt", counts))
            continue
        best = max(evs, key=lambda e: (RANK[e.state], e.finished_at))
        cells.append(Cell(backend, stage, runtime, best.state, best.receipt_sha256, best.finished_at, best.why, counts))
    return CapabilityMatrix(tuple(cells), tuple(judge.unattributed))
