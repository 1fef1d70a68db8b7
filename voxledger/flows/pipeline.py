"""Flow ``pipeline``: every pipeline stage of the stage table (``schemas/stages.py``), in order.

The pipeline reads and validates every plan once, registers the pipeline plan, and hands each
stage its validated plan as a ``PlanRef`` (document + digest): what the pipeline receipt records
under ``stage_plans`` is what each stage ran, whatever happens to the files meanwhile. Each stage
is the same Prefect task its own flow runs, called here or, when the plan puts it on another work
pool, started as that stage's deployment and awaited (one code path builds the arguments for
both). ``StageLog.stage`` records each stage's own outcome as it ends; later stages are absent.
The pipeline receipt is written in both cases. Every stage is content-cached.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from prefect import flow

from voxledger.flows.common import announced_receipt, register_plan_task, shared_store, sync_enabled
from voxledger.flows.progress import report
from voxledger.flows.stages import StageSpec, pool_of, stage_names, stage_table
from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.errors import InterruptedRunError, PlanError, VoxledgerError
from voxledger.schemas.pipeline import PipelineParameters, PipelinePlan, PipelineRunReceipt, PipelineSummary, StageRecord
from voxledger.schemas.stages import PIPELINE
from voxledger.stores.home import Home, HomeRef
from voxledger.tasks.plans import PlanRef, load_plan
from voxledger.tasks.receipting import build_receipt
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages.contract import StageContext


def stage_plan_files(plan: PipelinePlan, plan_file: Path, plans_dir: Path | None) -> dict[str, Path]:
    """Each stage plan the pipeline names (by plan field), found beside the pipeline plan, else in ``plans_dir``."""
    found: dict[str, Path] = {}
    for spec in stage_table():
        name = spec.plan_file(plan)
        if not name or spec.plan_field is None or spec.plan_field in found:
            continue
        here = [plan_file.parent / name, *([plans_dir / name] if plans_dir else [])]
        candidates = [Path(name)] if Path(name).is_absolute() else here
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            looked = ", ".join(str(c.parent) for c in candidates)
            raise PlanError(f"pipeline plan {plan_file}: {spec.plan_field} {name!r} not found (looked in {looked})")
        found[spec.plan_field] = path
    return found


def load_stage_plans(plan: PipelinePlan, plan_file: Path, plans_dir: Path | None) -> dict[str, PlanRef]:
    """Every stage plan read and validated once, by plan field (PlanError naming file and field otherwise)."""
    unknown = sorted(set(plan.stage_pools) - set(stage_names()))
    if unknown:
        raise PlanError(f"pipeline plan {plan_file}: stage_pools names unknown stage(s) {unknown}; stages are {list(stage_names())}")
    models = {s.plan_field: s.plan_model for s in stage_table() if s.plan_field and s.plan_model is not None}
    return {key: PlanRef.load(path, models[key]) for key, path in stage_plan_files(plan, plan_file, plans_dir).items()}


@dataclass
class _Open:
    """The stage being run: what it has recorded so far."""

    receipt_id: str | None = None
    cached: bool = False
    verified_objects: int | None = None

    def done(self, outcome: StageOutcome[Any]) -> StageOutcome[Any]:
        self.receipt_id, self.cached = outcome.receipt_id, outcome.cached
        self.verified_objects = outcome.verified.objects if outcome.verified is not None else None
        return outcome


@dataclass
class StageLog:
    """Stage records, each written by the stage's own context as it ends."""

    records: list[StageRecord] = field(default_factory=list)

    @contextmanager
    def stage(self, name: str) -> Iterator[_Open]:
        cur, t0 = _Open(), time.perf_counter()
        report(f"stage {name}: running")
        try:
            yield cur
        except BaseException as exc:
            reason = _reason(exc)
            wall = time.perf_counter() - t0
            self.records.append(
                StageRecord(stage=name, receipt_id=cur.receipt_id, cached=cur.cached, wall_s=wall, status="failed", detail=reason[:2000])
            )
            raise
        wall = time.perf_counter() - t0
        self.records.append(
            StageRecord(
                stage=name,
                receipt_id=cur.receipt_id,
                cached=cur.cached,
                wall_s=wall,
                status="succeeded",
                verified_objects=cur.verified_objects,
            )
        )
        checked = f" ({cur.verified_objects} objects verified)" if cur.verified_objects is not None else ""
        report(f"stage {name}: {'cached' if cur.cached else 'done'}{checked} in {wall:.1f} s")

    def failed(self) -> StageRecord | None:
        return next((r for r in self.records if r.status == "failed"), None)


@dataclass(frozen=True)
class _Run:
    """What the pipeline receipt binds: the registered pipeline plan and every stage plan's digest."""

    home: Home
    plan_rid: str
    plan_sha: str
    corpus: Path
    stage_plans: dict[str, str]
    started: Any

    def record(self, log: StageLog, error: str | None) -> str:
        inputs = [InputRef(role="pipeline_plan", sha256=self.plan_rid, ref="receipt")]
        inputs += [InputRef(role=f"stage:{s.stage}", sha256=s.receipt_id, ref="receipt") for s in log.records if s.receipt_id]
        parameters = PipelineParameters(plan_sha256=self.plan_sha, corpus_name=self.corpus.name, stage_plans=self.stage_plans)
        receipt = build_receipt(
            PipelineRunReceipt,
            flow="pipeline",
            task="pipeline",
            started_at=self.started,
            inputs=inputs,
            status="failed" if error else "succeeded",
            error=error,
            parameters=parameters,
            stages=tuple(log.records),
        )
        return self.home.record(receipt)


@flow(name="pipeline")
def pipeline(
    home: HomeRef | str, corpus: str, plan_file: str, plans_dir: str | None = None, packets_dir: str | None = None
) -> PipelineSummary:
    """Run every stage of a pipeline plan; the pipeline receipt records each stage as it ended."""
    ref = HomeRef.of(home)
    with shared_store(ref):
        return _pipeline(ref, corpus, Path(plan_file), Path(plans_dir) if plans_dir else None, packets_dir)


def _pipeline(home: HomeRef, corpus: str, plan_file: Path, plans_dir: Path | None, packets_dir: str | None) -> PipelineSummary:
    with home.open().pipeline_slot():  # one pipeline per home at a time: an overlapping run stops here, before any work
        return _pipeline_run(home, corpus, plan_file, plans_dir, packets_dir)


def _pipeline_run(home: HomeRef, corpus: str, plan_file: Path, plans_dir: Path | None, packets_dir: str | None) -> PipelineSummary:
    started, h = utc_now(), home.open()
    plan = load_plan(plan_file, PipelinePlan)
    plans = load_stage_plans(plan, plan_file, plans_dir)
    pipeline_ref = PlanRef.of(plan, plan_file.name)
    plan_rid, plan_sha = register_plan_task(home, pipeline_ref, PipelinePlan), pipeline_ref.sha256
    run = _Run(h, plan_rid, plan_sha, Path(corpus), {key: ref.sha256 for key, ref in plans.items()}, started)
    ctx = StageContext(home, corpus, plan, plans, packets_dir)
    log = StageLog()
    with _interrupts() as guard:
        try:
            _run_stages(log, ctx)
        except BaseException as exc:
            guard.acknowledge()  # from here a repeated Ctrl-C cannot cut the failed receipt short
            _stopped(run, log, guard.as_interrupt(exc))
    rid = run.record(log, None)
    return PipelineSummary(rid, tuple(log.records))


def _stopped(run: _Run, log: StageLog, exc: BaseException) -> NoReturn:
    """Record the failed pipeline receipt naming the stage it stopped in, and raise."""
    failed = log.failed()
    where = failed.stage if failed else "pipeline"
    detail = _reason(exc) if isinstance(exc, KeyboardInterrupt) or not failed else failed.detail
    rid = run.record(log, f"{where}: {detail}"[:4000])
    if isinstance(exc, VoxledgerError):
        raise type(exc)(f"pipeline stopped at {where}: {exc}; pipeline receipt {rid}", receipt_id=rid) from exc
    if isinstance(exc, KeyboardInterrupt):
        raise InterruptedRunError(f"pipeline interrupted at stage {where}; failed pipeline receipt {rid}", receipt_id=rid) from exc
    raise exc


class _Interrupts:
    """SIGINT (Ctrl-C) and SIGTERM (a stopping ``serve`` cancelling this run, a ``kill``) end the stages
    with KeyboardInterrupt, so the pipeline receipt records the stage it stopped in.

    Python drops a KeyboardInterrupt raised where it cannot propagate (a weakref or import-lock
    callback: "Exception ignored in ..."), and the run would go on. So after a signal, until the
    pipeline acknowledges it, the signal is raised again every ``REPEAT_S``; once acknowledged, further
    signals are only noted, so recording the failed receipt cannot be cut short.
    """

    REPEAT_S = 0.5

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._acknowledged = threading.Event()
        self._signum: int | None = None

    def handle(self, signum: int, frame: object) -> None:
        if self._acknowledged.is_set():
            return
        if self._signum is None:
            import threading

            self._signum = signum
            threading.Thread(target=self._repeat, name="voxledger-interrupt", daemon=True).start()
        raise KeyboardInterrupt(f"signal {signum}")

    def _repeat(self) -> None:
        import os
        import signal

        while not self._acknowledged.wait(self.REPEAT_S):
            with self._lock:
                if not self._acknowledged.is_set() and self._signum is not None:
                    os.kill(os.getpid(), signal.Signals(self._signum))

    def acknowledge(self) -> None:
        with self._lock:
            self._acknowledged.set()

    def as_interrupt(self, exc: BaseException) -> BaseException:
        """What the stages stopped with, once a signal came: a KeyboardInterrupt even where Python turned
        it into another error (one landing inside a C extension's import surfaces as ``ImportError:
        initialization failed``), so a Ctrl-C is never reported as a defect."""
        if self._signum is None or isinstance(exc, KeyboardInterrupt):
            return exc
        interrupt = KeyboardInterrupt(f"signal {self._signum}; surfaced as {type(exc).__name__}: {exc}")
        interrupt.__cause__ = exc
        return interrupt


@contextmanager
def _interrupts() -> Iterator[_Interrupts]:
    """Install ``_Interrupts`` for SIGINT and SIGTERM (only the main thread can set handlers)."""
    import signal
    import threading

    guard = _Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    import sys

    previous = {sig: signal.signal(sig, guard.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous_hook = sys.unraisablehook

    def quiet_interrupts(unraisable: Any) -> None:
        """A KeyboardInterrupt dropped inside a ``__del__`` or weakref callback is raised again by the
        guard; Python's "Exception ignored in ..." traceback for it would only reach the user's console."""
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            previous_hook(unraisable)

    sys.unraisablehook = quiet_interrupts
    try:
        yield guard
    finally:
        guard.acknowledge()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.unraisablehook = previous_hook


def _reason(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return f"interrupted ({exc or 'SIGINT / Ctrl-C'})"
    return str(exc) if isinstance(exc, VoxledgerError) else f"{type(exc).__name__}: {exc}"


def stage_arguments(spec: StageSpec, ctx: StageContext) -> dict[str, Any] | None:
    """The stage task's arguments besides ``home`` (its plan reference included), or None when it does not run."""
    if not spec.enabled(ctx.plan):
        return None
    inputs = spec.inputs(ctx)
    if inputs is None:
        return None
    return {**({"plan": ctx.plans[spec.plan_field]} if spec.plan_field else {}), **inputs}


def _run_stages(log: StageLog, ctx: StageContext) -> None:
    dispatch = _Dispatch.of(ctx)
    for spec in stage_table():
        arguments = stage_arguments(spec, ctx)
        if arguments is None:
            continue
        with log.stage(spec.name) as st:
            out = st.done(dispatch.run(spec, arguments))
            ctx.outcomes[spec.name] = out
            if spec.verdict is not None:
                spec.verdict(out)


@dataclass(frozen=True)
class _Dispatch:
    """Where each stage runs. In a pipeline deployment started with ``--shared-store`` and a plan
    with ``stage_pools``, a stage whose pool differs from the pipeline's is started as its own
    deployment (``StageSpec.deployment``) on its pool and awaited; its receipt comes back through
    the shared store (pulled and verified here) and the id it announced on its flow run.
    Everything else runs here, in this process, as the same task with the same arguments."""

    ctx: StageContext
    enabled: bool

    @classmethod
    def of(cls, ctx: StageContext) -> _Dispatch:
        from prefect.context import FlowRunContext

        run_ctx = FlowRunContext.get()
        deployed = run_ctx is not None and run_ctx.flow_run is not None and run_ctx.flow_run.deployment_id is not None
        return cls(ctx, sync_enabled(ctx.home) and deployed and bool(ctx.plan.stage_pools))

    def remote(self, stage: str) -> bool:
        """Whether ``stage`` is started on another work pool."""
        plan = self.ctx.plan
        return self.enabled and pool_of(plan, stage) != pool_of(plan, PIPELINE)

    def run(self, spec: StageSpec, arguments: dict[str, Any]) -> StageOutcome[Any]:
        if not self.remote(spec.name):
            if spec.plan_field is not None and spec.plan_model is not None:
                register_plan_task(self.ctx.home, arguments["plan"], spec.plan_model)  # its own task run, before the work
            out: StageOutcome[Any] = spec.task(home=self.ctx.home, **arguments)
            return out
        return self._remote(spec, arguments)

    def _remote(self, spec: StageSpec, arguments: dict[str, Any]) -> StageOutcome[Any]:
        from prefect.deployments import run_deployment

        from voxledger.flows.sync import pull_task, push_task

        home, pool, name = self.ctx.home, spec.work_pool(self.ctx.plan), spec.deployment(self.ctx.plan)
        push_task(home)  # what this stage needs from the stages run here so far
        report(f"stage {spec.name}: dispatched to work pool {pool} ({name})")
        # the deployment carries the worker's own home; everything else is what a local call gets
        parameters = {k: v.model_dump(mode="json") if isinstance(v, PlanRef) else v for k, v in arguments.items()}
        run: Any = run_deployment(name, parameters=parameters, timeout=None, poll_interval=2)  # sync here: a FlowRun
        pull_task(home)
        got = announced_receipt(run.id)
        state = run.state
        ended = f"{state.type.value.lower()}: {state.message}" if state is not None else "in an unknown state"
        if got is None:
            raise VoxledgerError(
                f"stage {spec.name} ran as flow run {run.name!r} of deployment {name} on work pool {pool} and ended {ended} "
                "without recording a receipt; see that run's logs in Prefect"
            )
        rid, cached = got
        outcome = StageOutcome(rid, home.open().receipts.read(rid, spec.receipt), cached)
        if state is not None and not state.is_completed() and spec.verdict is None:  # a verdict judges the receipt instead
            raise VoxledgerError(f"stage {spec.name} (flow run {run.name!r} on work pool {pool}) ended {ended}; receipt {rid}")
        return outcome
