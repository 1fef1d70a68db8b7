"""The generic training loop: epochs, early stopping on CV loss, guarded checkpoints, exact resume."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from voxledger.schemas.training import EpochRecord, TrainingInputs, TrainingPlan
from voxledger.tasks.backends.base import Backend
from voxledger.tasks.training.checkpoints import latest_checkpoint, restore_rng, write_checkpoint
from voxledger.tasks.training.distributed import agree_stop


def lr_at(step: int, plan: TrainingPlan, total_steps: int) -> float:
    """Linear warm-up then cosine decay: a pure function of the step (nothing else to resume)."""
    import math

    o = plan.optim
    if step < o.warmup_steps:
        return o.peak_lr * (step + 1) / o.warmup_steps
    span = max(1, total_steps - o.warmup_steps)
    progress = min(1.0, (step - o.warmup_steps) / span)
    floor = o.peak_lr * o.final_lr_fraction
    return floor + (o.peak_lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


@dataclass
class LoopState:
    """Everything about the loop's position that a checkpoint must carry."""

    epoch: int = 0
    batch: int = 0
    global_step: int = 0
    sums: dict[str, float] = field(
        default_factory=lambda: {"loss": 0.0, "grad": 0.0, "frames": 0.0, "utts": 0.0, "wall": 0.0, "ckpt": 0.0, "steps": 0.0}
    )
    history: list[dict[str, Any]] = field(default_factory=list)
    best_cv: float | None = None
    best_epoch: int = -1
    bad_epochs: int = 0
    epoch_receipts: list[str] = field(default_factory=list)
    resumed_at: list[int] = field(default_factory=list)
    stop_reason: str | None = None


@dataclass
class LoopResult:
    """The finished loop."""

    state: LoopState
    model: torch.nn.Module
    trainable_parameters: int
    total_parameters: int


EpochHook = Callable[[int, torch.nn.Module, EpochRecord], str]


def _progress_line(state: LoopState, n_batches: int, max_epochs: int, total_steps: int, sums: dict[str, float]) -> str:
    """``epoch 2 (3 of 10) step 37/120 (412/1200 overall) loss 1.2345 ETA 3m05s``: the epoch as
    receipts number it (from 0), then its place among the plan's epochs; the ETA assumes
    every remaining step costs this epoch's mean step time (early stopping only shortens it)."""
    mean_s = sums["wall"] / max(1.0, sums["steps"])
    eta_s = int(mean_s * max(0, total_steps - state.global_step))
    loss = sums["loss"] / max(1.0, sums["steps"])
    return (
        f"training: epoch {state.epoch} ({state.epoch + 1} of {max_epochs}) step {state.batch}/{n_batches} "
        f"({state.global_step}/{total_steps} overall) loss {loss:.4f} ETA {eta_s // 60}m{eta_s % 60:02d}s"
    )


def run_loop(
    backend: Backend,
    model: torch.nn.Module,
    cv_batches: list[Any],
    plan: TrainingPlan,
    bound: TrainingInputs,
    ckpt_dir: Path,
    on_epoch_end: EpochHook,
    progress: Callable[[str], None] | None = None,
) -> LoopResult:
    """Train ``model`` under ``plan``; resume from the newest guarded checkpoint in ``ckpt_dir``.

    ``on_epoch_end(epoch, model, record)`` exports and records the epoch checkpoint and returns
    its receipt id; it runs before the epoch-boundary working checkpoint, so a resumed run never
    records an epoch twice.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=plan.optim.peak_lr, weight_decay=plan.optim.weight_decay, betas=(0.9, 0.98))
    steps_per_epoch = len(backend.epoch_batches(0, plan.seed))
    if plan.steps_per_epoch is not None:
        steps_per_epoch = min(steps_per_epoch, plan.steps_per_epoch)
    total_steps = steps_per_epoch * plan.max_epochs
    state = LoopState()
    ckpt = latest_checkpoint(ckpt_dir, bound)
    if ckpt is not None:
        backend.load_trainable_state(model, ckpt.trainable)
        optimizer.load_state_dict(ckpt.optimizer)
        state = LoopState(**{k: v for k, v in ckpt.progress.items()})
        state.resumed_at.append(state.global_step)
        restore_rng(ckpt.rng)
        backend.load_rng_state(ckpt.rng.get("backend", {}))
    else:
        torch.manual_seed(plan.seed)

    def checkpoint() -> None:
        keep = {int(h["global_step"]) for h in state.history if h["epoch"] == state.best_epoch}
        write_checkpoint(
            ckpt_dir,
            state.global_step,
            trainable=backend.trainable_state(model),
            optimizer=optimizer.state_dict(),
            progress=state.__dict__,
            bound=bound,
            keep=keep,
            keep_last=plan.keep_last,
            backend_rng=backend.rng_state(),
        )

    while state.stop_reason is None:
        batches = backend.epoch_batches(state.epoch, plan.seed)[:steps_per_epoch]
        while state.batch < len(batches):
            t0 = time.perf_counter()
            out = backend.train_step(
                model, batches[state.batch], optimizer, lr_at(state.global_step, plan, total_steps), plan.optim.max_grad_norm
            )
            frames, utts = backend.batch_frames(batches[state.batch])
            s = state.sums
            s["loss"] += out["loss"]
            s["grad"] += out["grad_norm"]
            s["frames"] += frames
            s["utts"] += utts
            s["steps"] += 1
            s["wall"] += time.perf_counter() - t0
            state.batch += 1
            state.global_step += 1
            if state.global_step % plan.checkpoint_every_steps == 0 and state.batch < len(batches):
                t1 = time.perf_counter()
                checkpoint()
                s["ckpt"] += time.perf_counter() - t1
            if progress:
                progress(_progress_line(state, len(batches), plan.max_epochs, total_steps, s))
        if progress:
            progress(f"training: epoch {state.epoch} CV loss over {len(cv_batches)} batch(es)")
        cv = backend.cv_loss(model, cv_batches)
        s = state.sums
        n = max(1.0, s["steps"])
        record = EpochRecord(
            epoch=state.epoch,
            steps=int(s["steps"]),
            global_step=state.global_step,
            train_loss=s["loss"] / n,
            cv_loss=cv,
            grad_norm_mean=s["grad"] / n,
            lr_end=lr_at(max(0, state.global_step - 1), plan, total_steps),
            frames_per_s=s["frames"] / max(s["wall"], 1e-9),
            utterances_per_s=s["utts"] / max(s["wall"], 1e-9),
            wall_s=s["wall"],
            checkpoint_overhead_s=s["ckpt"],
        )
        t1 = time.perf_counter()
        state.epoch_receipts.append(on_epoch_end(state.epoch, model, record))
        export_s = time.perf_counter() - t1
        if state.best_cv is None or cv < state.best_cv - plan.min_delta:
            state.best_cv, state.best_epoch, state.bad_epochs = cv, state.epoch, 0
        else:
            state.bad_epochs += 1
        state.history.append(record.model_copy(update={"checkpoint_overhead_s": s["ckpt"] + export_s}).model_dump(mode="json"))
        last = state.epoch + 1 >= plan.max_epochs
        # under torchrun every rank must leave the loop at the same epoch: the decision is collective
        if agree_stop(state.bad_epochs >= plan.patience or last):
            state.stop_reason = "max_epochs" if last and state.bad_epochs < plan.patience else "early_stopping"
        state.epoch += 1
        state.batch = 0
        state.sums = LoopState().sums
        t1 = time.perf_counter()
        checkpoint()
        # the epoch-boundary checkpoint is this epoch's cost too (its own bytes cannot carry its time)
        state.history[-1]["checkpoint_overhead_s"] += time.perf_counter() - t1
    n_train = sum(p.numel() for p in params)
    n_total = sum(p.numel() for p in model.parameters())
    return LoopResult(state, model, n_train, n_total)
