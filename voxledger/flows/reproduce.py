"""Flow ``reproduce``: re-run a recorded stage in a scratch home and record whether it reproduced.

Four steps, each its own task run or flow run: ``prepare_reproduction`` (the receipt's kind is
covered, its inputs verify, the code is the recorded code unless drift is allowed),
``seed_scratch_home`` (the original home's receipts from before the stage started, and the
objects they name), the stage's own flow from the stage table run on the scratch home (a subflow,
so the re-run goes through exactly the code path the original did), and ``record_reproduction``
(outputs compared under the stage's bands; the one write to the original home). What the flow is
given and how its outputs are compared come from the registry entry the stage row names
(``tasks/stages/reproduce_registry.py``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, flow_name, open_home, shared_store
from voxledger.flows.progress import report
from voxledger.schemas.errors import (
    AuditFailedError,
    EquivalenceError,
    EvaluationError,
    GateFailedError,
    ReproductionError,
    SynthesisError,
    TrainingError,
)
from voxledger.schemas.pipeline import PipelineRunReceipt
from voxledger.schemas.reproduction import OutputComparison, ReproductionBands, ReproductionReceipt
from voxledger.schemas.stages import resolve, stage_row
from voxledger.stores.hashing import StatCacheUse, stat_cache_use
from voxledger.stores.home import HomeRef
from voxledger.stores.scratch import SeedReport, seed_home
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages import reproduce as rp
from voxledger.tasks.stages import reproduce_registry as reproductions

THREADS_VARIABLE = "VOXLEDGER_REPRODUCE_THREADS"
STAGE_FAILURES = (AuditFailedError, GateFailedError, EquivalenceError, TrainingError, EvaluationError, SynthesisError)
"""What a stage raises when its own work fails (not a lock, a missing object or bad input): a re-run
that fails so before recording its receipt did not reproduce, and is recorded as ``differs``."""


@task(name="prepare_reproduction", **STAGE_TASK)
def prepare_reproduction(home: HomeRef, rid: str, allow_code_drift: bool, threads: int | None) -> rp.Preparation:
    """Check the receipt can be re-run here (kind, inputs verified, code identity)."""
    return rp.prepare(open_home(home), rid, allow_code_drift=allow_code_drift, threads=threads)


@task(name="seed_scratch_home", **STAGE_TASK)
def seed_scratch_home(home: HomeRef, scratch: HomeRef, rid: str) -> SeedReport:
    """Give the scratch home what the original home held when the stage started."""
    h = open_home(home)
    receipt = h.receipts.read(rid)
    return seed_home(h, scratch.open(), receipt.started_at, trees=rp.own_trees(receipt))


@task(name="record_reproduction", **STAGE_TASK)
def record_reproduction(
    home: HomeRef,
    scratch: HomeRef,
    prep: rp.Preparation,
    rerun_id: str | None,
    seeded: SeedReport,
    wall_s: float,
    started: Any,
    failure: str | None = None,
    trust: rp.StatCacheTrust | None = None,
) -> StageOutcome[ReproductionReceipt]:
    """Compare the re-run's outputs with the original's and record the verdict in the original home
    (``failure``: the re-run failed before recording a receipt, so there is nothing to compare;
    ``trust``: how the stat caches were used until now)."""
    h, s, bands = open_home(home), scratch.open(), ReproductionBands()
    rerun = s.receipts.read(rerun_id) if rerun_id is not None else None
    if rerun is None:
        comparisons = [OutputComparison(name="rerun", verdict="differs", reason=f"the re-run failed before recording a receipt: {failure}")]
    else:
        comparisons = reproductions.compare(h, s, prep, rerun, bands)
    return rp.record_reproduction(
        h, prep, rerun_id, rerun, comparisons, seeded=seeded, bands=bands, wall_s=wall_s, started=started, flow=flow_name(), trust=trust
    )


@task(name="record_pipeline_reproduction", **STAGE_TASK)
def record_pipeline_reproduction(
    home: HomeRef,
    prep: rp.Preparation,
    stages: list[tuple[str, str, str, ReproductionReceipt]],
    not_rerun: tuple[str, ...],
    wall_s: float,
    started: Any,
    trust: rp.StatCacheTrust | None = None,
) -> StageOutcome[ReproductionReceipt]:
    """Record the pipeline run's verdict: the worst of its stages' reproductions."""
    return rp.record_pipeline_reproduction(
        open_home(home), prep, stages, not_rerun, wall_s=wall_s, started=started, flow=flow_name(), trust=trust
    )


@contextmanager
def forced_threads(threads: int | None) -> Iterator[None]:
    """Every torch stage of the re-run uses ``threads`` intra-op threads (``VOXLEDGER_REPRODUCE_THREADS``)."""
    if threads is None:
        yield
        return
    from voxledger.tasks.threads import torch_threads

    before = os.environ.get(THREADS_VARIABLE)
    os.environ[THREADS_VARIABLE] = str(threads)
    try:
        with torch_threads(threads):  # stages that set no count of their own run with it too
            yield
    finally:
        if before is None:
            os.environ.pop(THREADS_VARIABLE, None)
        else:
            os.environ[THREADS_VARIABLE] = before


def _rerun(scratch: HomeRef, stage: str, arguments: dict[str, Any]) -> str:
    """Run the stage's own flow (its row's) on the scratch home; the receipt id it recorded (also when its verdict failed the run)."""
    row = stage_row(stage)
    if row is None:
        raise ReproductionError(f"stage {stage} is not in the stage table (schemas/stages.py): nothing to re-run it with")
    try:
        return str(resolve(row.flow)(scratch, **arguments).receipt_id)
    except (AuditFailedError, GateFailedError, EquivalenceError) as exc:  # recorded, then judged: the receipt is the result
        if exc.receipt_id is None:
            raise
        return str(exc.receipt_id)


@flow(name="reproduce")
def reproduce(
    home: HomeRef | str,
    receipt_id: str,
    corpus: str | None = None,
    scratch: str | None = None,
    allow_code_drift: bool = False,
    threads: int | None = None,
    deep: bool = False,
) -> StageOutcome[ReproductionReceipt]:
    """Re-run receipt ``receipt_id`` in a scratch home (``scratch``: kept; else a temporary one) and record the verdict.

    ``deep``: trust no stat cache (every input, seeded object and corpus file is read and hashed);
    either way the receipt records how many files a stat cache vouched for (``stat_cache_trusted``).
    """
    ref = HomeRef.of(home)
    with shared_store(ref):  # under VOXLEDGER_SYNC: inputs pulled from the shared store first, the verdict pushed after
        return _reproduce(ref, receipt_id, corpus, scratch, allow_code_drift, threads, deep)


def _reproduce(
    ref: HomeRef, receipt_id: str, corpus: str | None, scratch: str | None, allow_code_drift: bool, threads: int | None, deep: bool
) -> StageOutcome[ReproductionReceipt]:
    with stat_cache_use(trust=not deep) as use:  # counts every file a stat cache vouches for, in this home and the scratch one
        return _reproduce_counted(ref, receipt_id, corpus, scratch, allow_code_drift, threads, deep, use)


def _reproduce_counted(
    ref: HomeRef,
    receipt_id: str,
    corpus: str | None,
    scratch: str | None,
    allow_code_drift: bool,
    threads: int | None,
    deep: bool,
    use: StatCacheUse,
) -> StageOutcome[ReproductionReceipt]:
    started = rp.now()
    prep = prepare_reproduction(ref, receipt_id, allow_code_drift, threads)
    arguments = reproductions.stage_arguments(open_home(ref), prep, Path(corpus) if corpus else None)
    if scratch and Path(scratch).exists() and any(Path(scratch).iterdir()):
        raise ReproductionError(f"--scratch {scratch} is not empty: give a new or empty folder (the re-run's home is made there)")
    if isinstance(prep.receipt, PipelineRunReceipt):
        return _reproduce_pipeline(ref, prep, corpus, scratch, allow_code_drift, threads, started, deep, use)
    where = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix="voxledger-reproduce-"))
    scratch_ref = HomeRef(root=str(where), lock_timeout_s=ref.lock_timeout_s, shared_store=False)
    try:
        seeded = seed_scratch_home(ref, scratch_ref, receipt_id)
        report(f"re-running {prep.stage} of {receipt_id[:12]} in {where} ({seeded.receipts} receipts, {seeded.objects} objects given)")
        t0 = time.perf_counter()
        rerun_id, failure = None, None
        with forced_threads(threads):
            try:
                rerun_id = _rerun(scratch_ref, prep.stage, arguments)
            except STAGE_FAILURES as exc:  # failed before recording (a recorded failure is returned by _rerun)
                failure = " ".join(str(exc).split())[:600]
        wall_s = time.perf_counter() - t0
        return record_reproduction(ref, scratch_ref, prep, rerun_id, seeded, wall_s, started, failure, rp.StatCacheTrust(use.vouched, deep))
    finally:
        if not scratch:
            shutil.rmtree(where, ignore_errors=True)


def _reproduce_pipeline(
    ref: HomeRef,
    prep: rp.Preparation,
    corpus: str | None,
    scratch: str | None,
    allow_code_drift: bool,
    threads: int | None,
    started: Any,
    deep: bool,
    use: StatCacheUse,
) -> StageOutcome[ReproductionReceipt]:
    """Reproduce each stage receipt the run chains, in run order, each in its own scratch home (``SCRATCH/<stage>`` when
    kept), then record the run's verdict."""
    from voxledger.tasks.reproduction.pipeline import plan_stages

    plan = plan_stages(open_home(ref), prep.receipt)  # type: ignore[arg-type]
    done: list[tuple[str, str, str, ReproductionReceipt]] = []
    t0 = time.perf_counter()
    for stage, rid in plan.rerun:
        report(f"pipeline {prep.rid[:12]}: reproducing stage {stage} ({rid[:12]})")
        where = str(Path(scratch) / stage) if scratch else None
        out = _reproduce(ref, rid, corpus, where, allow_code_drift, threads, deep)
        done.append((stage, rid, out.receipt_id, out.receipt))
    trust = rp.StatCacheTrust(use.vouched, deep)  # the stages' counts included (their blocks count into this one)
    return record_pipeline_reproduction(ref, prep, done, plan.not_rerun, time.perf_counter() - t0, started, trust)
