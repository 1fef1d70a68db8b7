"""Flow ``pipeline``: audit -> train base -> train adapter -> promote -> evaluate -> package -> packets.

Each stage is the same Prefect task its own flow runs, and each runs inside ``StageLog.stage``,
which records that stage's own outcome as it happens: succeeded with its receipt, or failed with
the reason (and its receipt, when the stage wrote one before its verdict stopped the run). Later
stages are absent. The pipeline receipt is written in both cases. Every stage is content-cached:
an unchanged re-run re-verifies each stage's receipt and outputs and returns the same ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from prefect import flow
from pydantic import BaseModel

from voxledger.flows.audit import audit_corpus, require_pass
from voxledger.flows.common import announced_receipt, shared_store, sync_enabled
from voxledger.flows.evaluate import evaluate_plan
from voxledger.flows.package import package_adapter
from voxledger.flows.packets import export_packets
from voxledger.flows.progress import report
from voxledger.flows.promote import promote_adapter, require_promoted
from voxledger.flows.train import train_adapter
from voxledger.schemas.audit import AuditPolicy, AuditReceipt
from voxledger.schemas.base import InputRef, ReceiptBase, utc_now
from voxledger.schemas.errors import PlanError, VoxledgerError
from voxledger.schemas.evaluation import EvaluationPlan, EvaluationReceipt
from voxledger.schemas.listening import ListeningProtocol
from voxledger.schemas.listening_receipts import PacketSetReceipt
from voxledger.schemas.package import PackageReceipt
from voxledger.schemas.pipeline import (
    PipelineParameters,
    PipelinePlan,
    PipelineRunReceipt,
    StageName,
    StageRecord,
)
from voxledger.schemas.promotion import PromotionPolicy, PromotionReceipt
from voxledger.schemas.training import TrainingPlan, TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.tasks.plans import load_plan, plan_digest, register_plan
from voxledger.tasks.receipting import build_receipt
from voxledger.tasks.stage import StageOutcome

STAGE_PLAN_MODELS: dict[str, type[BaseModel]] = {
    "audit_policy": AuditPolicy,
    "base_training": TrainingPlan,
    "adapter_training": TrainingPlan,
    "promotion_policy": PromotionPolicy,
    "evaluation": EvaluationPlan,
    "listening_protocol": ListeningProtocol,
}


def stage_plan_files(plan: PipelinePlan, plan_file: Path, plans_dir: Path | None) -> dict[str, Path]:
    """Each stage plan the pipeline names, found beside the pipeline plan, else in ``plans_dir``."""
    found: dict[str, Path] = {}
    for key in STAGE_PLAN_MODELS:
        name = getattr(plan, key)
        if not name:
            continue
        candidates = [Path(name)] if Path(name).is_absolute() else [plan_file.parent / name, *([plans_dir / name] if plans_dir else [])]
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            raise PlanError(
                f"pipeline plan {plan_file}: {key} {name!r} not found (looked in {', '.join(str(c.parent) for c in candidates)})"
            )
        found[key] = path
    return found


@dataclass
class _Open:
    """The stage being run: what it has recorded so far."""

    receipt_id: str | None = None
    cached: bool = False

    def done(self, outcome: StageOutcome[Any]) -> StageOutcome[Any]:
        self.receipt_id, self.cached = outcome.receipt_id, outcome.cached
        return outcome


@dataclass
class StageLog:
    """Stage records, each written by the stage's own context as it ends."""

    records: list[StageRecord] = field(default_factory=list)

    @contextmanager
    def stage(self, name: StageName) -> Iterator[_Open]:
        cur, t0 = _Open(), time.perf_counter()
        report(f"stage {name}: running")
        try:
            yield cur
        except BaseException as exc:
            reason = str(exc) if isinstance(exc, VoxledgerError) else f"{type(exc).__name__}: {exc}"
            self.records.append(StageRecord(stage=name, receipt_id=cur.receipt_id, cached=cur.cached,
                                            wall_s=time.perf_counter() - t0, status="failed", detail=reason[:2000]))  # fmt: skip
            raise
        self.records.append(
            StageRecord(stage=name, receipt_id=cur.receipt_id, cached=cur.cached, wall_s=time.perf_counter() - t0, status="succeeded")
        )
        report(f"stage {name}: {'cached' if cur.cached else 'done'} in {time.perf_counter() - t0:.1f} s")

    def failed(self) -> StageRecord | None:
        return next((r for r in self.records if r.status == "failed"), None)


def _record_run(home: Home, plan_rid: str, plan_sha: str, corpus: Path, stage_plans: dict[str, str], log: StageLog,
                started: Any, error: str | None) -> str:  # fmt: skip
    inputs = [InputRef(role="pipeline_plan", sha256=plan_rid, ref="receipt")]
    inputs += [InputRef(role=f"stage:{s.stage}", sha256=s.receipt_id, ref="receipt") for s in log.records if s.receipt_id]
    receipt = build_receipt(
        PipelineRunReceipt, flow="pipeline", task="pipeline", started_at=started, inputs=inputs,
        status="failed" if error else "succeeded", error=error,
        parameters=PipelineParameters(plan_sha256=plan_sha, corpus_name=corpus.name, stage_plans=stage_plans),
        stages=tuple(log.records),
    )  # fmt: skip
    return home.record(receipt)


@dataclass(frozen=True)
class PipelineSummary:
    """The pipeline receipt id and every stage's record."""

    pipeline_receipt: str
    stages: tuple[StageRecord, ...]


@flow(name="pipeline")
def pipeline(home: str, corpus: str, plan_file: str, plans_dir: str | None = None, packets_dir: str | None = None) -> PipelineSummary:
    """Run every stage of a pipeline plan; the pipeline receipt records each stage as it ended."""
    with shared_store(home):
        return _pipeline(home, corpus, plan_file, plans_dir, packets_dir)


def _pipeline(home: str, corpus: str, plan_file: str, plans_dir: str | None, packets_dir: str | None) -> PipelineSummary:
    started, h = utc_now(), Home(home)
    plan = load_plan(Path(plan_file), PipelinePlan)
    files = stage_plan_files(plan, Path(plan_file), Path(plans_dir) if plans_dir else None)
    # the digest every stage registers its plan under: one function, over the validated model
    stage_plans = {key: plan_digest(load_plan(path, STAGE_PLAN_MODELS[key])) for key, path in files.items()}
    plan_rid, plan_sha = register_plan(h, plan, source_name=Path(plan_file).name, flow="pipeline")
    log = StageLog()
    try:
        _run_stages(log, home, corpus, plan, {k: str(v) for k, v in files.items()}, packets_dir)
    except BaseException as exc:
        failed = log.failed()
        where = failed.stage if failed else "pipeline"
        detail = failed.detail if failed else f"{type(exc).__name__}: {exc}"
        rid = _record_run(h, plan_rid, plan_sha, Path(corpus), stage_plans, log, started, f"{where}: {detail}"[:4000])
        if isinstance(exc, VoxledgerError):
            raise type(exc)(f"pipeline stopped at {where}: {exc}; pipeline receipt {rid}", receipt_id=rid) from exc
        raise
    rid = _record_run(h, plan_rid, plan_sha, Path(corpus), stage_plans, log, started, None)
    return PipelineSummary(rid, tuple(log.records))


def _run_stages(log: StageLog, home: str, corpus: str, plan: PipelinePlan, files: dict[str, str], packets_dir: str | None) -> None:
    d = _Dispatch.of(plan, home)
    with log.stage("audit") as st:
        audit = d.run(st, "audit", AuditReceipt, lambda: audit_corpus(home, corpus, files["audit_policy"]))
        require_pass(audit, corpus)
    base = None
    if "base_training" in files:
        with log.stage("train_base") as st:
            trained = d.run(st, "train_base", TrainingRunReceipt, lambda: train_adapter(home, corpus, audit.receipt_id, files["base_training"], None),
                            audit_rid=audit.receipt_id, base_sha=None)  # fmt: skip
            base = trained.receipt.subject("best").sha256
    with log.stage("train_adapter") as st:
        adapter = d.run(st, "train_adapter", TrainingRunReceipt,
                        lambda: train_adapter(home, corpus, audit.receipt_id, files["adapter_training"], base), audit_rid=audit.receipt_id,
                        base_sha=base)  # fmt: skip
    with log.stage("promote") as st:
        promo = d.run(st, "promote", PromotionReceipt, lambda: promote_adapter(home, corpus, adapter.receipt_id, files["promotion_policy"]),
                      run_rid=adapter.receipt_id)  # fmt: skip
        require_promoted(promo)
    r = promo.receipt.result
    winner = next(c for c in r.challengers if c.name == r.promoted)
    bindings = {"adapter": winner.tree_sha256, **({"base": base} if base else {})}
    with log.stage("evaluate") as st:
        ev = d.run(st, "evaluate", EvaluationReceipt, lambda: evaluate_plan(home, corpus, files["evaluation"], bindings), bindings=bindings)
    if plan.package:
        with log.stage("package") as st:
            d.run(st, "package", PackageReceipt,
                  lambda: package_adapter(home, adapter.receipt_id, winner.tree_sha256, promo.receipt_id, (ev.receipt_id,)),
                  run_rid=adapter.receipt_id, tree_sha=winner.tree_sha256, promotion_rid=promo.receipt_id, eval_rids=[ev.receipt_id])  # fmt: skip
    if "listening_protocol" in files and packets_dir:
        with log.stage("export_packets") as st:
            d.run(st, "export_packets", PacketSetReceipt, lambda: export_packets(home, files["listening_protocol"], packets_dir, evaluation_rid=ev.receipt_id),
                  out_dir=packets_dir, evaluation_rid=ev.receipt_id)  # fmt: skip


R = TypeVar("R", bound=ReceiptBase)


@dataclass(frozen=True)
class _Dispatch:
    """Where each stage runs. In a pipeline deployment started with ``--shared-store`` and a plan
    with ``stage_pools``, a stage whose pool differs from the pipeline's is started as its own
    deployment (``<flow>/<plan>-<stage>``) on its pool and awaited; its receipt comes back through
    the shared store (pulled and verified here) and the id it announced on its flow run.
    Everything else runs here, in this process."""

    plan: PipelinePlan
    home: str
    enabled: bool

    @classmethod
    def of(cls, plan: PipelinePlan, home: str) -> _Dispatch:
        from prefect.context import FlowRunContext

        ctx = FlowRunContext.get()
        deployed = ctx is not None and ctx.flow_run is not None and ctx.flow_run.deployment_id is not None
        return cls(plan, home, sync_enabled() and deployed and bool(plan.stage_pools))

    def run(self, st: _Open, stage: StageName, kind: type[R], local: Callable[[], StageOutcome[R]], **parameters: Any) -> StageOutcome[R]:
        pool = self.plan.pool_of(stage)
        if not self.enabled or pool == self.plan.pool_of("pipeline"):
            return st.done(local())
        from prefect.deployments import run_deployment

        from voxledger.flows.deploy import STAGE_FLOWS
        from voxledger.flows.sync import pull_task, push_task

        name = f"{STAGE_FLOWS[stage][0].rsplit(':', 1)[1]}/{self.plan.name}-{stage}"
        push_task(self.home)  # what this stage needs from the stages run here so far
        report(f"stage {stage}: dispatched to work pool {pool} ({name})")
        run: Any = run_deployment(name, parameters=parameters, timeout=None, poll_interval=2)  # sync here: a FlowRun
        pull_task(self.home)
        got = announced_receipt(run.id)
        state = run.state
        ended = f"{state.type.value.lower()}: {state.message}" if state is not None else "in an unknown state"
        if got is None:
            raise VoxledgerError(
                f"stage {stage} ran as flow run {run.name!r} of deployment {name} on work pool {pool} and ended {ended} without "
                "recording a receipt; see that run's logs in Prefect"
            )
        rid, cached = got
        outcome = st.done(StageOutcome(rid, Home(self.home).receipts.read(rid, kind), cached))
        if state is not None and not state.is_completed() and stage not in ("audit", "promote"):  # those two judge their receipt here
            raise VoxledgerError(f"stage {stage} (flow run {run.name!r} on work pool {pool}) ended {ended}; receipt {rid}")
        return outcome
