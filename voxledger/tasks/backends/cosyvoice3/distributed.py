"""Data-parallel LoRA training of the cosyvoice3 backend through torch.distributed (DDP; gloo on the CPU, NCCL on CUDA).

Under a process group of W ranks (started by `launch`, or by ``torchrun`` around code that
calls the backend), `CosyVoice3Backend.setup` wraps the LM in ``DistributedDataParallel``; every
rank walks the same batches (`data.batch_indices` is a pure function of seed and epoch) and takes
its share of each: utterance ``i`` of the batch, in upstream's length order, goes to rank
``i mod W``. The effective batch is the plan's ``frames_per_batch``, as with one process. DDP
averages the ranks' gradients, so every rank clips and steps identically and holds the same weights.

Upstream draws ``random.random()`` once per utterance (uni- or bistream layout). With W ranks the
step's draws are made as one process makes them (W draws, in batch order, from the (seed, step)
generator) and each rank is handed those of its own utterances (`ReplayRandom`): every utterance
gets the layout it gets in a one-process run. Upstream's loss is the mean over the batch's scored
target tokens (``length_normalized_loss``; over utterances without it) while DDP averages the
ranks' gradients with equal weights, so each rank's loss is scaled by its share of the batch's
tokens times W (`share_of_batch`; the tokens are counted where upstream scores them, its
``th_accuracy``): the averaged gradient is then the whole batch's. What still differs from one
process is the order of float sums; `tests/tasks/backends/cosyvoice3/test_data_parallel.py` states the band.

Checkpoints and receipts: `launch` writes them from rank 0 only (``ckpt_dir``, ``out_dir``); the
other ranks keep their working checkpoints in a private folder seeded from rank 0's before a
resume and removed afterwards. Resume is exact: every rank loads rank 0's newest checkpoint (the
loop position, AdamW's state, the backend's (seed, step)); a checkpoint of a run with another
world size is refused, naming both (`CosyVoice3Backend.load_rng_state`).
"""

from __future__ import annotations

import datetime
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from voxledger.schemas.errors import TrainingError
from voxledger.schemas.training import EpochRecord, TrainingInputs, TrainingPlan
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.training.distributed import agree_stop

__all__ = ["Group", "RankJob", "ReplayRandom", "agree_stop", "current_group", "launch"]

RUN_FILE = "run.json"


@dataclass(frozen=True)
class Group:
    """This process's place in a data-parallel run."""

    rank: int
    world_size: int
    backend: str

    def record(self, frames_per_batch: int) -> dict[str, Any]:
        """What a training receipt records of the run's parallelism."""
        return {
            "world_size": self.world_size,
            "backend": self.backend,
            "effective_frames_per_batch": frames_per_batch,
            "shard": "utterance i of each batch (upstream's length order) on rank i mod world_size",
        }


def current_group() -> Group | None:
    """The process group this process is in, else None (one process). A group of one rank trains under DDP
    too (`launch(1, ...)`: DDP on one GPU); its shard is the whole batch and its loss weight exactly 1."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return Group(dist.get_rank(), dist.get_world_size(), str(dist.get_backend()))


def refuse_outside_launch(plan_name: str) -> None:
    """Refuse training under a launcher (``torchrun``) that started ranks voxledger did not group: each would train
    a whole copy and write the same receipts.

    Raises:
        TrainingError: naming the launcher's variables and the setting that starts ranks instead.
    """
    world = os.environ.get("WORLD_SIZE", "1")
    if world.strip() not in ("", "1") and current_group() is None:
        raise TrainingError(
            f"plan {plan_name}: this process is one of WORLD_SIZE={world} ranks started by a launcher (torchrun?), outside a "
            "process group voxledger made; voxledger starts its own ranks: run one `voxledger train` with "
            f"VOXLEDGER_COSYVOICE_RANKS={world} instead"
        )


class ReplayRandom(random.Random):
    """A generator whose ``random()`` gives back ``values`` in order: upstream's per-utterance draws of one rank."""

    def __init__(self, values: Sequence[float]) -> None:
        super().__init__(0)
        self._values, self._next = list(values), 0

    def random(self) -> float:
        if self._next >= len(self._values):
            raise TrainingError(f"upstream drew {self._next + 1} values for a shard of {len(self._values)} utterance(s); a defect")
        self._next += 1
        return self._values[self._next - 1]


def shard_positions(n_utterances: int, group: Group) -> list[int]:
    """The positions (in the collated batch's order) this rank trains on."""
    return list(range(group.rank, n_utterances, group.world_size))


def check_shards(plan_name: str, frames_per_batch: int, batch_sizes: list[list[int]], world_size: int) -> None:
    """Refuse a run in which some batch (``batch_sizes[epoch]``: utterances per batch) has fewer utterances than ranks.

    Raises:
        TrainingError: naming the epoch, the batch size and the fix.
    """
    for epoch, sizes in enumerate(batch_sizes):
        if sizes and min(sizes) < world_size:
            raise TrainingError(
                f"plan {plan_name}: epoch {epoch} has a batch of {min(sizes)} utterance(s), fewer than the {world_size} ranks; "
                f"raise frames_per_batch (now {frames_per_batch}) or train on fewer ranks"
            )


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``model`` under DDP (its parameters shared, rank 0's weights broadcast once)."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


@contextmanager
def counting_targets() -> Iterator[list[int]]:
    """Within the block, the scored target tokens of each loss upstream's LM computes (the targets its
    ``th_accuracy`` sees that are not ``ignore_label``), appended to the yielded list."""
    module = sys.modules["cosyvoice.llm.llm"]
    original = module.th_accuracy

    def counted(pad_outputs: torch.Tensor, pad_targets: torch.Tensor, ignore_label: int) -> torch.Tensor:
        counts.append(int((pad_targets != ignore_label).sum()))
        return original(pad_outputs, pad_targets, ignore_label=ignore_label)  # type: ignore[no-any-return]

    counts: list[int] = []
    module.th_accuracy = counted  # type: ignore[attr-defined]
    try:
        yield counts
    finally:
        module.th_accuracy = original  # type: ignore[attr-defined]


def share_of_batch(model: torch.nn.Module, tokens: int, utterances: int, device: torch.device) -> float:
    """W x this rank's share of the batch's loss denominator (scored tokens, or utterances where upstream's
    criterion does not normalise by length): scaling the rank's loss by it makes DDP's gradient mean the batch's."""
    criterion = getattr(model, "criterion_ce", None)
    own = tokens if getattr(criterion, "normalize_length", True) else utterances
    total = torch.tensor([own], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return own * dist.get_world_size() / float(total.item())


def mean_over_ranks(value: float, device: torch.device) -> float:
    """The mean of a per-rank number (the step's loss) over all ranks."""
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t.item()) / dist.get_world_size()


@dataclass(frozen=True)
class RankJob:
    """One data-parallel training run, as every rank gets it (pickled into the spawned processes)."""

    config: CosyVoice3Config
    corpus: Path
    plan: TrainingPlan
    bound: TrainingInputs
    ckpt_dir: Path
    out_dir: Path
    base_dir: Path | None = None  # a stored base (a merged cosyvoice3 export), else the model folder's llm.pt
    crash_at_epoch: int | None = None  # tests: every rank stops before recording this epoch, as a killed run does


def launch(world_size: int, job: RankJob, *, timeout_s: float = 600.0) -> dict[str, Any]:
    """Train ``job.plan`` on ``world_size`` ranks spawned here (gloo on the CPU, NCCL on CUDA), resuming from ``job.ckpt_dir``.

    Rank 0 writes the working checkpoints (``job.ckpt_dir``), each epoch's adapter
    (``job.out_dir/epoch-N``), the final one (``job.out_dir/last``) and ``run.json`` (effective
    configuration, curve, best epoch, stop reason, resume points, parameter counts); returns
    ``run.json``'s content. An interrupt here (Ctrl-C) stops every rank before it is raised.

    Raises:
        TrainingError: a rank failed (its error is named) or the world size is below 1.
    """
    from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException, start_processes

    if world_size < 1:
        raise TrainingError(f"world size {world_size}: give at least 1 rank")
    job.out_dir.mkdir(parents=True, exist_ok=True)
    (job.out_dir / RUN_FILE).unlink(missing_ok=True)  # an earlier attempt's answer is never taken for this one's
    with tempfile.TemporaryDirectory(prefix="voxledger-ddp-") as tmp:
        try:
            ranks = start_processes(  # type: ignore[no-untyped-call]
                _rank_main, args=(world_size, job, str(Path(tmp) / "store"), timeout_s), nprocs=world_size, start_method="spawn", join=False
            )
            try:
                while not ranks.join(1.0):
                    pass
            except BaseException:
                for process in ranks.processes:  # a failed rank's siblings, or every rank after a Ctrl-C here
                    if process.is_alive():
                        process.terminate()
                for process in ranks.processes:
                    process.join(10)
                    if process.is_alive():
                        process.kill()
                raise
        except ProcessRaisedException as exc:
            last = str(exc).strip().splitlines()[-1]
            raise TrainingError(f"data-parallel training on {world_size} ranks failed: {last}") from None
        except ProcessExitedException as exc:
            raise TrainingError(f"data-parallel training on {world_size} ranks failed: rank {exc.error_index} exited ({exc})") from None
    return dict(json.loads((job.out_dir / RUN_FILE).read_text(encoding="utf-8")))


def _stopped_by_launcher(signum: int, frame: object) -> None:
    """A rank stopped by its launcher (a Ctrl-C there, a failed sibling): give back its multiprocessing
    resources (else Python's resource tracker warns of leaked semaphores on the user's console) and leave
    at once, without the seconds an interpreter holding torch takes to shut down."""
    from multiprocessing import util

    util._run_finalizers()  # type: ignore[attr-defined]  # what multiprocessing runs at a process's normal exit
    os._exit(128 + signum)


def _rank_main(rank: int, world_size: int, job: RankJob, store: str, timeout_s: float) -> None:
    import signal

    from voxledger.tasks.backends.cosyvoice3.backend import CosyVoice3Backend
    from voxledger.tasks.training.loop import run_loop

    signal.signal(signal.SIGTERM, _stopped_by_launcher)
    torch.set_num_threads(job.plan.threads)
    cuda = job.config.device.startswith("cuda") or (job.config.device == "auto" and torch.cuda.is_available())
    if cuda:  # this spawned process is its own: its environment is no other thread's
        os.environ["LOCAL_RANK"] = str(rank)
        torch.cuda.set_device(rank)
        job = RankJob(**{**job.__dict__, "config": job.config.model_copy(update={"device": "cuda"})})
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    ckpt = job.ckpt_dir if rank == 0 else job.ckpt_dir.with_name(f"{job.ckpt_dir.name}.rank{rank}")
    try:
        if rank:  # rank 0's checkpoints are the run's; this rank resumes from a copy of them
            shutil.rmtree(ckpt, ignore_errors=True)
            if job.ckpt_dir.is_dir():
                shutil.copytree(job.ckpt_dir, ckpt)
        backend = CosyVoice3Backend(job.config)
        setup = backend.setup(job.corpus, job.plan, job.base_dir)

        def on_epoch_end(epoch: int, model: torch.nn.Module, record: EpochRecord) -> str:
            if epoch == job.crash_at_epoch:
                raise TrainingError(f"rank {rank} stopped before recording epoch {epoch} (crash_at_epoch)")
            if rank == 0:
                backend.export(model, job.out_dir / f"epoch-{epoch}")
            return f"{epoch:064d}"

        # the backend registry's name Literal is wider than this class's: the training stage passes it the same way
        result = run_loop(backend, setup.model, setup.cv_batches, job.plan, job.bound, ckpt, on_epoch_end)  # type: ignore[arg-type]
        if rank == 0:
            backend.export(result.model, job.out_dir / "last")
            state = result.state
            run = {
                "effective_config": setup.effective_config,
                "history": state.history,
                "best_epoch": state.best_epoch,
                "best_cv_loss": state.best_cv,
                "global_step": state.global_step,
                "stop_reason": state.stop_reason,
                "resumed_at": state.resumed_at,
                "trainable_parameters": result.trainable_parameters,
                "total_parameters": result.total_parameters,
            }
            tmp = job.out_dir / f".{RUN_FILE}.tmp"
            tmp.write_text(json.dumps(run, sort_keys=True), encoding="utf-8")
            tmp.replace(job.out_dir / RUN_FILE)
    finally:
        if rank:
            shutil.rmtree(ckpt, ignore_errors=True)
        dist.destroy_process_group()
