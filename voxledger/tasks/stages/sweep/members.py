"""A sweep member's training run, in a process of its own.

Members train in separate processes, never in threads of one: torch's global random generator
(seeded by the training loop and the backend at set-up), torch's thread count and the Python and
NumPy generators a checkpoint saves are process-wide, so two members sharing a process would draw
from one generator in an order set by the scheduler, and their runs would not be reproducible.
Each member's process is forked from a server that imported the model stack once
(``tasks/member_preload.py``) and runs the training stage's own function (``run_training``),
so each member is an ordinary training run: the same cache key, reuse, receipts, checkpoints and
resume as ``voxledger train``. The catalog's file lock lets the member processes record into one home.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from voxledger.schemas.errors import TrainingError, VoxledgerError
from voxledger.schemas.training import DEFAULT_BACKEND, BackendName, TrainingPlan, TrainingRunReceipt
from voxledger.stores.home import Home, HomeRef
from voxledger.tasks.backends.base import backend_location
from voxledger.tasks.plans import plan_digest
from voxledger.tasks.processes import die_with_parent
from voxledger.tasks.stage import StageOutcome

MEMBER_PRELOAD = "voxledger.tasks.member_preload"


def member_processes(backend: BackendName = DEFAULT_BACKEND) -> BaseContext:
    """Where member processes come from: forked from a server that imported the model stack and
    ``backend``'s module once (``tasks/member_preload.py``); the server starts with the first member
    and serves the whole process (a later call naming another backend gets the same server: its
    members import that backend themselves)."""
    ctx = get_context("forkserver")
    ctx.set_forkserver_preload([MEMBER_PRELOAD, backend_location(backend)[0]])
    return ctx


def train_member(
    home: HomeRef, corpus: str, audit_rid: str, plan: TrainingPlan, *, plan_name: str, base_sha: str | None, flow: str
) -> StageOutcome[TrainingRunReceipt]:
    """The member's run, trained (resumed, or served from cache by the training stage itself) in a process of its own.

    Raises:
        TrainingError: the member's training failed (its message, naming the member), or its process
            died (killed: re-run the sweep; finished members are served from cache, this one resumes).
    """
    args = (home.model_dump(mode="json"), corpus, audit_rid, plan.model_dump(mode="json"), plan_name, base_sha, flow)
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=member_processes(plan.backend), initializer=die_with_parent) as pool:
            rid, cached = pool.submit(train_in_process, *args).result()
    except BrokenProcessPool as exc:
        raise TrainingError(
            f"sweep member {plan_name}: its training process died before recording a run ({exc}); run the sweep again: "
            "finished members are served from cache and this one resumes from its last checkpoint"
        ) from None
    receipt = home.open().receipts.read(rid, TrainingRunReceipt)
    if receipt.parameters.bound.plan_sha256 != plan_digest(plan):
        raise TrainingError(f"sweep member {plan_name}: its process recorded run {rid[:16]} of another plan; run the sweep again")
    return StageOutcome(rid, receipt, cached=cached)


def train_in_process(
    home: dict[str, Any], corpus: str, audit_rid: str, plan: dict[str, Any], plan_name: str, base_sha: str | None, flow: str
) -> tuple[str, bool]:
    """The member process's work (plain arguments in; the training run's receipt id out, and whether it was stored).

    Any failure comes back as one TrainingError naming the member (an exception raised in another
    process crosses as its message only)."""
    from voxledger.tasks.stages.train import run_training

    try:
        h = HomeRef.model_validate(home).open()
        training = TrainingPlan.model_validate(plan)
        out = run_training(h, Path(corpus), audit_rid, training, plan_name=plan_name, base_sha=base_sha, flow=flow)
    except VoxledgerError as exc:
        raise TrainingError(f"sweep member {plan_name}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the process boundary: the parent gets one line, not a foreign traceback
        raise TrainingError(f"sweep member {plan_name}: training failed in its process: {type(exc).__name__}: {exc}") from None
    return out.receipt_id, out.cached


def stored_member(
    home: Home, corpus: Path, audit_rid: str, plan: TrainingPlan, *, base_sha: str | None
) -> StageOutcome[TrainingRunReceipt] | None:
    """The member's training run when this home already holds it (verified, as the training stage
    itself would serve it), else None: what a sweep dispatching members to a work pool need not send.

    The key is the training stage's own (``run_training``): the same inputs bound the same way.

    Raises:
        TrainingError: the audit is missing or failed, or the corpus changed since it.
    """
    from voxledger.schemas.canonical import canonical_digest
    from voxledger.tasks.backends.base import get_backend
    from voxledger.tasks.receipting import cache_key
    from voxledger.tasks.stage import reuse
    from voxledger.tasks.stages.train import bind_inputs, passing_audit

    backend = get_backend(plan.backend)
    plan_sha = plan_digest(plan)
    bound = bind_inputs(
        home, corpus, passing_audit(home, audit_rid), audit_rid, plan_sha, base_sha, canonical_digest(backend.identity()), backend
    )
    return reuse(home, cache_key("train", bound.model_dump(mode="json"), plan_sha, {}), TrainingRunReceipt)
