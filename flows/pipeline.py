"""Flow ``pipeline``: audit -> train base -> train adapter -> promote -> package -> evaluate -> packets.

Every stage is content-cached: re-running an unchanged pipeline re-verifies each stage's stored
receipt and blobs and skips the work, returning the same receipt ids (so lineage is identical
whether a stage ran or not). A failing stage (audit leakage, gates) stops the run; the pipeline
receipt records every stage so far and the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import flow, task
from voxledger.flows.progress import report
from voxledger.flows.stages import (
    RETRIES,
    audit_task,
    evaluate_task,
    plan_path,
    promote_task,
    train_task,
)
from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.errors import AuditFailedError, GateFailedError, VoxledgerError
from voxledger.schemas.pipeline import (
    PipelineParameters,
    PipelinePlan,
    PipelineRunReceipt,
    StageRecord,
)
from voxledger.stores.home import Home
from voxledger.tasks.plans import load_plan, register_plan
from voxledger.tasks.receipting import build_receipt


@task(name="package_adapter", **RETRIES)
def package_task(home: str, run_rid: str, tree_sha: str, promotion_rid: str, eval_rids: list[str]) -> dict[str, Any]:
    """Build the reproducible package of the promoted checkpoint."""
    from voxledger.tasks.packaging.run import package_adapter_fn

    out = package_adapter_fn(Home(home), run_rid, tree_sha, promotion_rid=promotion_rid, evaluation_rids=tuple(eval_rids))
    return {"receipt_id": out.receipt_id, "cached": out.cached}


@task(name="export_packets", **RETRIES)
def packets_task(home: str, evaluation_rid: str, protocol_file: str, out_dir: str) -> dict[str, Any]:
    """Export blind per-rater listening packets from an evaluation's audio."""
    from voxledger.tasks.listening.from_evaluation import export_packets_for_evaluation

    return export_packets_for_evaluation(Home(home), evaluation_rid, Path(protocol_file), Path(out_dir))


class _Run:
    """Collects stage records and writes the pipeline receipt (also when a stage fails)."""

    def __init__(self, home: Home, plan: PipelinePlan, plan_sha: str, plan_rid: str, corpus: Path) -> None:
        self.home, self.plan, self.plan_sha, self.plan_rid, self.corpus = home, plan, plan_sha, plan_rid, corpus
        self.stages: list[StageRecord] = []
        self.stage_plans: dict[str, str] = {}
        self.started = utc_now()

    def stage(self, name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        t0 = time.perf_counter()
        report(f"stage {name}: running")
        out = fn()
        self.stages.append(StageRecord(stage=name, receipt_id=out.get("receipt_id"), cached=bool(out.get("cached")),  # type: ignore[arg-type]
                                       wall_s=time.perf_counter() - t0, status="succeeded"))  # fmt: skip
        report(f"stage {name}: {'cached' if out.get('cached') else 'done'} in {time.perf_counter() - t0:.1f} s")
        return out

    def fail(self, name: str, reason: str, receipt_id: str | None, wall_s: float) -> None:
        if self.stages and self.stages[-1].stage == name:  # the stage ran; its verdict stopped the run
            self.stages[-1] = self.stages[-1].model_copy(update={"status": "failed", "detail": reason[:2000]})
            return
        self.stages.append(StageRecord(stage=name, receipt_id=receipt_id, cached=False, wall_s=wall_s, status="failed", detail=reason[:2000]))  # type: ignore[arg-type]

    def record(self, error: str | None = None) -> str:
        inputs = [InputRef(role="pipeline_plan", sha256=self.plan_rid, ref="receipt")]
        inputs += [InputRef(role=f"stage:{s.stage}", sha256=s.receipt_id, ref="receipt") for s in self.stages if s.receipt_id]
        receipt = build_receipt(
            PipelineRunReceipt, flow="pipeline", task="pipeline", started_at=self.started, inputs=inputs,
            status="failed" if error else "succeeded", error=error,
            parameters=PipelineParameters(plan_sha256=self.plan_sha, corpus_name=self.corpus.name, stage_plans=self.stage_plans),
            stages=tuple(self.stages),
        )  # fmt: skip
        return self.home.record(receipt)


@flow(name="pipeline")
def pipeline(home: str, corpus: str, plan_file: str, plans_dir: str, packets_dir: str | None = None) -> dict[str, Any]:
    """Run every stage of a pipeline plan; returns stage summaries and the pipeline receipt id."""
    h = Home(home)
    plan = load_plan(Path(plan_file), PipelinePlan)
    plan_rid, plan_sha = register_plan(h, plan, source_name=Path(plan_file).name, flow="pipeline")
    run = _Run(h, plan, plan_sha, plan_rid, Path(corpus))
    for key in ("audit_policy", "base_training", "adapter_training", "promotion_policy", "evaluation", "listening_protocol"):
        name = getattr(plan, key)
        if name:
            run.stage_plans[key] = _file_digest(plan_path(name, plans_dir))
    t0 = time.perf_counter()
    summary: dict[str, Any] = {}
    try:
        audit = run.stage("audit", lambda: audit_task(home, corpus, str(plan_path(plan.audit_policy, plans_dir))))
        if audit["verdict"] != "pass":
            raise AuditFailedError(f"audit failed: {audit['counts']} (receipt {audit['receipt_id']})")
        base = None
        if plan.base_training:
            b = run.stage("train_base", lambda: train_task(home, corpus, audit["receipt_id"], str(plan_path(plan.base_training or "", plans_dir)), None))
            base = b["best"]
            summary["base"] = b
        adapter = run.stage("train_adapter", lambda: train_task(home, corpus, audit["receipt_id"], str(plan_path(plan.adapter_training, plans_dir)), base))
        promo = run.stage("promote", lambda: promote_task(home, corpus, adapter["receipt_id"], str(plan_path(plan.promotion_policy, plans_dir))))
        if promo["promoted"] is None:
            raise GateFailedError(f"{promo['error']} (receipt {promo['receipt_id']})")
        bindings = {"adapter": promo["tree"], **({"base": base} if base else {})}
        ev = run.stage("evaluate", lambda: evaluate_task(home, corpus, str(plan_path(plan.evaluation, plans_dir)), bindings))
        if plan.package:
            run.stage("package", lambda: package_task(home, adapter["receipt_id"], promo["tree"], promo["receipt_id"], [ev["receipt_id"]]))
        if plan.listening_protocol and packets_dir:
            run.stage("export_packets", lambda: packets_task(home, ev["receipt_id"], str(plan_path(plan.listening_protocol or "", plans_dir)), packets_dir))
        summary.update({"audit": audit, "adapter": adapter, "promotion": promo, "evaluation": ev})
    except VoxledgerError as exc:
        stage = _next_stage(run)
        run.fail(stage, str(exc), None, time.perf_counter() - t0)
        rid = run.record(error=f"{stage}: {exc}")
        raise type(exc)(f"pipeline stopped at {stage}: {exc}; pipeline receipt {rid}") from exc
    except Exception as exc:  # an unexpected failure still leaves a receipt saying where the run stopped
        stage = _next_stage(run)
        run.fail(stage, f"{type(exc).__name__}: {exc}", None, time.perf_counter() - t0)
        run.record(error=f"{stage}: {type(exc).__name__}: {exc}")
        raise
    summary["pipeline_receipt"] = run.record()
    summary["stages"] = [s.model_dump(mode="json") for s in run.stages]
    return summary


ORDER = ("audit", "train_base", "train_adapter", "promote", "evaluate", "package", "export_packets")


def _next_stage(run: _Run) -> str:
    done = {s.stage for s in run.stages if s.status == "succeeded"}
    last = run.stages[-1].stage if run.stages else None
    if last in ("audit", "promote") and run.stages[-1].status == "succeeded":
        return last  # the stage ran but its verdict stopped the pipeline
    return next((s for s in ORDER if s not in done), "pipeline")


def _file_digest(path: Path) -> str:
    """The canonical digest of a plan file's validated content (not its raw bytes)."""
    import yaml
    from voxledger.schemas.canonical import canonical_digest

    return canonical_digest(yaml.safe_load(path.read_text(encoding="utf-8")))


