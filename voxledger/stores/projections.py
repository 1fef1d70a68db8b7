"""Typed catalog rows derived from receipt documents, one projector per receipt kind.

Projectors are pure functions of the receipt document, so ``catalog rebuild`` reproduces every
typed row from the store alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Rows = dict[str, list[dict[str, Any]]]
BlobLoader = Callable[[str], bytes]
Projector = Callable[..., Rows]

PROJECTORS: dict[str, Projector] = {}

GENERATION_COLUMNS = ("candidate", "prompt_id", "seed", "valid", "audio_sha256", "duration_s", "wall_s", "rtf", "peak_rss_mb", "error")
INTERVAL_COLUMNS = ("mean", "low", "high", "n", "method", "units")
RULE_COLUMNS = ("metric", "statistic", "op", "threshold", "value", "passed")
SCORE_COLUMNS = ("criterion", "task", "candidate", "ratings", "raters", "mean", "ci_low", "ci_high")


def projector(kind: str) -> Callable[[Projector], Projector]:
    """Register the projector of one receipt kind."""

    def register(fn: Projector) -> Projector:
        PROJECTORS[kind] = fn
        return fn

    return register


def project(receipt_sha256: str, doc: dict[str, Any], load: BlobLoader | None = None) -> Rows:
    """Typed rows for one receipt (empty for kinds without a projector).

    ``load`` reads (verified) blobs for kinds whose rows live in a subject blob rather than in
    the receipt itself (e.g. evaluation observations); the rows are still a pure function of
    content-addressed bytes, so a rebuild reproduces them.
    """
    fn = PROJECTORS.get(doc["kind"])
    if fn is None:
        return {}
    return fn(receipt_sha256, doc, load) if getattr(fn, "needs_blobs", False) else fn(receipt_sha256, doc)


def _pick(doc: dict[str, Any], columns: tuple[str, ...]) -> dict[str, Any]:
    return {k: doc[k] for k in columns}


@projector("audit")
def _audit(rid: str, doc: dict[str, Any]) -> Rows:
    findings = [
        {
            "receipt_sha256": rid,
            "seq": i,
            "code": f["code"],
            "severity": f["severity"],
            "utterance_ids": list(f["utterance_ids"]),
            "message": f["message"],
            "value": f["value"],
            "bound": f["bound"],
            "file": f["file"],
            "line": f["line"],
        }
        for i, f in enumerate(doc["result"]["findings"])
    ]
    summary = [
        {
            "receipt_sha256": rid,
            "corpus_name": doc["parameters"]["corpus_name"],
            "verdict": doc["result"]["verdict"],
            "manifest_sha256": doc["parameters"]["manifest_sha256"],
        }
    ]
    stats = doc["result"]["stats"]
    speakers = [
        {"receipt_sha256": rid, "speaker": spk, "utterances": n, "hours": stats["speaker_hours"].get(spk, 0.0)}
        for spk, n in stats["speaker_utterances"].items()
    ]
    speaker_splits = [
        {"receipt_sha256": rid, "speaker": spk, "split": split, "utterances": n}
        for spk, per_split in stats.get("speaker_split_utterances", {}).items()
        for split, n in per_split.items()
    ]
    return {"audit_findings": findings, "audits": summary, "audit_speakers": speakers, "audit_speaker_splits": speaker_splits}


@projector("equivalence")
def _equivalence(rid: str, doc: dict[str, Any]) -> Rows:
    p = doc["parameters"]
    return {
        "equivalence_stages": [
            {
                "receipt_sha256": rid,
                "stage": s["stage"],
                "kind": s["kind"],
                "band": s["band"],
                "rel": s.get("rel"),
                "max_abs_err": s.get("max_abs_err"),
                "mean_abs_err": s.get("mean_abs_err"),
                "reference_runtime": p["reference"]["name"],
                "candidate_runtime": p["candidate"]["name"],
            }
            for s in doc["report"]["stages"]
        ]
    }


@projector("training_run")
def _training_run(rid: str, doc: dict[str, Any]) -> Rows:
    p, r = doc["parameters"], doc["result"]
    return {
        "training_epochs": [
            {
                "receipt_sha256": rid,
                "run_key": p["run_key"],
                "plan_sha256": p["bound"]["plan_sha256"],
                "backend": p["backend"],
                "mode": p["mode"],
                "is_best": e["epoch"] == r["best_epoch"],
                **e,
            }
            for e in r["epochs"]
        ]
    }


@projector("checkpoint")
def _checkpoint(rid: str, doc: dict[str, Any]) -> Rows:
    p = doc["parameters"]
    tree = next(a["sha256"] for a in doc["subjects"] if a["role"] == "checkpoint")
    return {
        "checkpoints": [{"receipt_sha256": rid, "run_key": p["run_key"], "epoch": p["epoch"], "cv_loss": p["cv_loss"], "tree_sha256": tree}]
    }


def _json_blob(load: BlobLoader | None, doc: dict[str, Any], role: str) -> Any:
    if load is None:
        raise ValueError(f"{doc['kind']} rows need the store to read their {role} blob")
    sha = next(a["sha256"] for a in doc["subjects"] if a["role"] == role)
    return json.loads(load(sha))


def _evaluation(rid: str, doc: dict[str, Any], load: BlobLoader | None) -> Rows:
    plan = doc["parameters"]["plan_sha256"]
    gens = [{"receipt_sha256": rid, **_pick(g, GENERATION_COLUMNS)} for g in _json_blob(load, doc, "generations")]
    obs = [{"receipt_sha256": rid, "plan_sha256": plan, **o} for o in _json_blob(load, doc, "observations")]
    summaries = []
    for s in doc["result"]["summaries"]:
        for cat, metrics in [("all", s["overall"]), *s["by_category"].items()]:
            for metric, iv in metrics.items():
                summaries.append(
                    {
                        "receipt_sha256": rid,
                        "plan_name": doc["parameters"]["plan_name"],
                        "candidate": s["candidate"],
                        "category": cat,
                        "metric": metric,
                        **_pick(iv, INTERVAL_COLUMNS),
                    }
                )
    comps = [
        {
            "receipt_sha256": rid,
            "candidate": c["candidate"],
            "baseline": c["baseline"],
            "metric": c["metric"],
            "delta": c["delta"]["mean"],
            "low": c["delta"]["low"],
            "high": c["delta"]["high"],
            "p_value": c["test"]["p_value"],
            "interval_method": c["delta"]["method"],
            "test_method": c["test"]["method"],
            "units": c["test"]["units"],
            "n_pairs": c["n_pairs"],
            "lower_is_better": c["lower_is_better"],
        }
        for c in doc["result"]["comparisons"]
    ]
    p = doc["parameters"]
    extractors = [
        {"receipt_sha256": rid, "extractor": k, "extractor_sha256": p["extractors"][k], "spec": json.dumps(v, sort_keys=True)}
        for k, v in p["extractor_specs"].items()
    ]
    return {
        "generations": gens,
        "observations": obs,
        "evaluation_summaries": summaries,
        "evaluation_comparisons": comps,
        "evaluation_extractors": extractors,
    }


_evaluation.needs_blobs = True  # type: ignore[attr-defined]
PROJECTORS["evaluation"] = _evaluation


def _promotion(rid: str, doc: dict[str, Any], load: BlobLoader | None) -> Rows:
    """Rule rows always (they are evidence); alias moves only when the receipt agrees with itself and its policy
    (`consistency`): a forged promotion, recorded or pulled, moves no alias."""
    from voxledger.schemas.promotion import PromotionReceipt
    from voxledger.stores.consistency import inconsistencies, promotion_line

    receipt = PromotionReceipt.model_validate(doc)
    consistent = not inconsistencies(receipt, load)
    line = promotion_line(receipt, load)
    moves = [
        {
            "receipt_sha256": rid,
            "line": line,
            "alias": m["alias"],
            "target_sha256": m["target_sha256"],
            "previous_sha256": m["previous_sha256"],
            "moved_at": doc["finished_at"],
            "reason": m["reason"],
            "base_sha256": m["base_sha256"],
        }
        for m in doc["result"]["moves"]
        if consistent
    ]
    rules = [
        {"receipt_sha256": rid, "challenger": c["name"], **_pick(r, RULE_COLUMNS)} for c in doc["result"]["challengers"] for r in c["rules"]
    ]
    return {"alias_history": moves, "promotion_rules": rules}


_promotion.needs_blobs = True  # type: ignore[attr-defined]
PROJECTORS["promotion"] = _promotion


def _aggregate(rid: str, doc: dict[str, Any], load: BlobLoader | None) -> Rows:
    ratings = [
        {"receipt_sha256": rid, "seq": i, "rater": r["rater_id"], **{k: v for k, v in r.items() if k != "rater_id"}}
        for i, r in enumerate(_json_blob(load, doc, "ratings"))
    ]
    scores = [{"receipt_sha256": rid, **_pick(s, SCORE_COLUMNS)} for s in doc["result"]["scores"]]
    return {"ratings": ratings, "listening_scores": scores}


_aggregate.needs_blobs = True  # type: ignore[attr-defined]
PROJECTORS["aggregate"] = _aggregate


@projector("pipeline_run")
def _pipeline(rid: str, doc: dict[str, Any]) -> Rows:
    return {
        "pipeline_stages": [
            {
                "receipt_sha256": rid,
                "run_status": doc["status"],
                "finished_at": doc["finished_at"],
                "seq": i,
                "stage": s["stage"],
                "stage_receipt": s["receipt_id"],
                "cached": s["cached"],
                "wall_s": s["wall_s"],
                "status": s["status"],
                "detail": s["detail"],
            }
            for i, s in enumerate(doc["stages"])
        ]
    }


@projector("package")
def _package(rid: str, doc: dict[str, Any]) -> Rows:
    p, r = doc["parameters"], doc["result"]
    base = next((i["sha256"] for i in doc["inputs"] if i["role"] == "base_model"), None)
    return {
        "packages": [
            {
                "receipt_sha256": rid,
                "status": doc["status"],
                "package_sha256": r["package_sha256"],
                "size_bytes": r["size_bytes"],
                "backend": p["backend"],
                "training_run": p["training_run"],
                "checkpoint_tree_sha256": p["checkpoint_tree_sha256"],
                "base_sha256": base,
                "merged_tree_sha256": r["merged_tree_sha256"],
                "reload_bitwise_equal": r["reload"]["bitwise_equal"],
                "reload_max_abs_err": r["reload"]["max_abs_err"],
                "equivalence_band": r["equivalence_band"],
                "equivalence_receipt": r["equivalence_receipt"],
                "published_name": (r["published"] or {}).get("name"),
                "finished_at": doc["finished_at"],
            }
        ]
    }
