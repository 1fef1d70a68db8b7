"""Typed catalog rows derived from receipt documents, one projector per receipt kind.

Projectors are pure functions of the receipt document, so ``catalog rebuild`` reproduces every
typed row from the store alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Rows = dict[str, list[dict[str, Any]]]
Projector = Callable[[str, dict[str, Any]], Rows]

PROJECTORS: dict[str, Projector] = {}


def projector(kind: str) -> Callable[[Projector], Projector]:
    """Register the projector of one receipt kind."""

    def register(fn: Projector) -> Projector:
        PROJECTORS[kind] = fn
        return fn

    return register


def project(receipt_sha256: str, doc: dict[str, Any]) -> Rows:
    """Typed rows for one receipt (empty for kinds without a projector)."""
    fn = PROJECTORS.get(doc["kind"])
    return fn(receipt_sha256, doc) if fn else {}


@projector("audit")
def _audit(rid: str, doc: dict[str, Any]) -> Rows:
    findings = [
        {"receipt_sha256": rid, "seq": i, "code": f["code"], "severity": f["severity"],
         "utterance_ids": list(f["utterance_ids"]), "message": f["message"], "value": f["value"],
         "bound": f["bound"], "file": f["file"], "line": f["line"]}  # fmt: skip
        for i, f in enumerate(doc["result"]["findings"])
    ]
    summary = [{"receipt_sha256": rid, "corpus_name": doc["parameters"]["corpus_name"],
                "verdict": doc["result"]["verdict"], "manifest_sha256": doc["parameters"]["manifest_sha256"]}]  # fmt: skip
    return {"audit_findings": findings, "audits": summary}


@projector("equivalence")
def _equivalence(rid: str, doc: dict[str, Any]) -> Rows:
    p = doc["parameters"]
    return {
        "equivalence_stages": [
            {"receipt_sha256": rid, "stage": s["stage"], "kind": s["kind"], "band": s["band"], "rel": s.get("rel"),
             "max_abs_err": s.get("max_abs_err"), "mean_abs_err": s.get("mean_abs_err"),
             "reference_runtime": p["reference"]["name"], "candidate_runtime": p["candidate"]["name"]}  # fmt: skip
            for s in doc["report"]["stages"]
        ]
    }


@projector("training_run")
def _training_run(rid: str, doc: dict[str, Any]) -> Rows:
    p, r = doc["parameters"], doc["result"]
    return {
        "training_epochs": [
            {"receipt_sha256": rid, "run_key": p["run_key"], "plan_sha256": p["bound"]["plan_sha256"], "backend": p["backend"],
             "mode": p["mode"], "is_best": e["epoch"] == r["best_epoch"], **e}  # fmt: skip
            for e in r["epochs"]
        ]
    }


@projector("checkpoint")
def _checkpoint(rid: str, doc: dict[str, Any]) -> Rows:
    p = doc["parameters"]
    tree = next(a["sha256"] for a in doc["subjects"] if a["role"] == "checkpoint")
    return {"checkpoints": [{"receipt_sha256": rid, "run_key": p["run_key"], "epoch": p["epoch"], "cv_loss": p["cv_loss"], "tree_sha256": tree}]}
