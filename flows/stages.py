"""Flows of the individual stages: thin Prefect wrappers over the plain stage functions.

Each task passes digests and receipt ids, never audio or weights, and returns a small summary.
Stage caching is voxledger's own (content digests, verified on a hit), so Prefect's result
caching is off (``cache_policy=NONE``) and a stage served from cache still reports its receipt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE
from voxledger.flows.progress import report
from voxledger.schemas.errors import AuditFailedError, GateFailedError
from voxledger.schemas.evaluation import EvaluationPlan
from voxledger.schemas.promotion import PromotionPolicy
from voxledger.schemas.training import TrainingPlan
from voxledger.stores.home import Home
from voxledger.tasks.plans import load_plan

RETRIES = {"retries": 1, "retry_delay_seconds": 2, "cache_policy": NONE}


def plan_path(name: str, plans_dir: str) -> Path:
    """A plan file by name inside the plans folder (or a path as given)."""
    p = Path(name)
    return p if p.is_absolute() or p.exists() else Path(plans_dir) / name


@task(name="audit_corpus", **RETRIES)
def audit_task(home: str, corpus: str, policy_file: str) -> dict[str, Any]:
    """Audit the corpus; the summary carries the receipt id and verdict."""
    from voxledger.schemas.audit import AuditPolicy
    from voxledger.tasks.audit.run import audit_corpus_fn

    out = audit_corpus_fn(Home(home), Path(corpus), load_plan(Path(policy_file), AuditPolicy), policy_name=Path(policy_file).name)
    return {"receipt_id": out.receipt_id, "cached": out.cached, "verdict": out.receipt.result.verdict,
            "counts": out.receipt.result.counts_by_code}  # fmt: skip


@task(name="train_adapter", **RETRIES)
def train_task(home: str, corpus: str, audit_rid: str, plan_file: str, base_sha: str | None) -> dict[str, Any]:
    """Train (or resume, or serve from cache) under a training plan."""
    from voxledger.tasks.training.run import train_adapter_fn

    plan = load_plan(Path(plan_file), TrainingPlan)
    out = train_adapter_fn(Home(home), Path(corpus), audit_rid, plan, plan_name=Path(plan_file).name, base_sha=base_sha, progress=report)
    r = out.receipt
    return {"receipt_id": out.receipt_id, "cached": out.cached, "best": r.subject("best").sha256, "last": r.subject("last").sha256,
            "best_epoch": r.result.best_epoch, "epochs": len(r.result.epochs), "stop_reason": r.result.stop_reason}  # fmt: skip


@task(name="promote_adapter", **RETRIES)
def promote_task(home: str, corpus: str, run_rid: str, policy_file: str) -> dict[str, Any]:
    """Gate the run's checkpoints against the champion; aliases move in the receipt."""
    from voxledger.tasks.promotion.run import promote_adapter_fn

    policy = load_plan(Path(policy_file), PromotionPolicy)
    out = promote_adapter_fn(Home(home), run_rid, policy, policy_name=Path(policy_file).name, corpus=Path(corpus), progress=report)
    r = out.receipt
    promoted = next((c for c in r.result.challengers if c.name == r.result.promoted), None)
    return {"receipt_id": out.receipt_id, "cached": out.cached, "promoted": r.result.promoted, "error": r.error,
            "tree": promoted.tree_sha256 if promoted else None, "checkpoint": promoted.checkpoint_receipt if promoted else None}  # fmt: skip


@task(name="evaluate_plan", **RETRIES)
def evaluate_task(home: str, corpus: str, plan_file: str, bindings: dict[str, str]) -> dict[str, Any]:
    """Run a frozen evaluation plan with artifacts bound by digest."""
    from voxledger.tasks.evaluation.run import evaluate_plan_fn

    plan = load_plan(Path(plan_file), EvaluationPlan)
    out = evaluate_plan_fn(Home(home), plan, plan_name=Path(plan_file).name, corpus=Path(corpus), bindings=bindings, progress=report)
    return {"receipt_id": out.receipt_id, "cached": out.cached}


@flow(name="audit_corpus_flow")
def audit_flow(home: str, corpus: str, policy_file: str) -> dict[str, Any]:
    """Audit a corpus; a failing verdict fails the run (no flag turns leakage off)."""
    out = audit_task(home, corpus, policy_file)
    if out["verdict"] != "pass":
        raise AuditFailedError(f"audit failed: {out['counts']}; receipt {out['receipt_id']}")
    return out


@flow(name="train_adapter")
def train_flow(home: str, corpus: str, audit_rid: str, plan_file: str, base_sha: str | None = None) -> dict[str, Any]:
    """Train under a plan from a passing audit."""
    return train_task(home, corpus, audit_rid, plan_file, base_sha)


@flow(name="promote_adapter")
def promote_flow(home: str, corpus: str, run_rid: str, policy_file: str) -> dict[str, Any]:
    """Promote through gates; failing gates fail the run after the receipt is written."""
    out = promote_task(home, corpus, run_rid, policy_file)
    if out["promoted"] is None:
        raise GateFailedError(f"{out['error']}; receipt {out['receipt_id']}")
    return out


@flow(name="evaluate_plan")
def evaluate_flow(home: str, corpus: str, plan_file: str, bindings: dict[str, str]) -> dict[str, Any]:
    """Evaluate candidates on a frozen plan."""
    return evaluate_task(home, corpus, plan_file, bindings)
