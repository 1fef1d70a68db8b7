"""Plain, I/O-free training pieces for the tiny backend: losses, one step, CV loss, lr schedule.

The learning rate is a pure function of the step (`lr_at`) and is handed to `train_step`, so a
resumed run needs only the step counter and the optimizer state, never a scheduler object.

Loss = L1(mel before postnet) + L1(mel after postnet) over real frames (normalised log-mel),
plus ``duration_loss_weight`` x MSE of ``log(1 + frames)`` over real phonemes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, cast

import torch
from torch import nn

from voxledger.tasks.backends.tiny.config import PAD_ID, TinyTTSConfig, effective_precision
from voxledger.tasks.backends.tiny.data import TinyBatch

# Recipes measured on the full demo corpus (1200 train utterances, 4 voices; 100 target
# utterances) through `voxledger demo run` on an idle 2-core CPU, 2 threads, bf16: the base
# reached CV 0.397 in 531 steps / 306 s (Whisper tiny.en WER of voice spk-b1 over the 60 test
# sentences 0.347; espeak's own audio 0.318); LoRA (LORA_RECIPE_TARGETS) early-stopped at 262 steps /
# 220 s (bf16; 223 s in fp32) with ECAPA similarity 0.66 to the target's recordings (0.35 for the
# nearest base voice). These dicts document the recipe; the plans in plans/ are what runs.
BASE_RECIPE: dict[str, float | int | str] = {
    "total_steps": 520,
    "peak_lr": 2e-3,
    "warmup_steps": 100,
    "final_lr_fraction": 0.05,
    "weight_decay": 0.01,
    "max_grad_norm": 1.0,
    "frames_per_batch": 3000,
    "precision": "bf16",
}
LORA_RECIPE: dict[str, float | int | str] = {
    "total_steps": 335,
    "r": 16,
    "alpha": 32,
    "dropout": 0.0,
    "peak_lr": 2e-3,  # 4e-3 lowered CV loss but raised WER (0.48 vs 0.40)
    "warmup_steps": 20,
    "final_lr_fraction": 0.05,
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "frames_per_batch": 3000,
    "precision": "bf16",
}
# LoRA on the backbone's attention and MLP projections. With q/k/v/o alone, fp32 training (any CPU
# without native bf16) stopped at CV 0.519 with checkpoints 6-10 WER points worse than the base on
# the demo gate, and none passed it; with the MLP too it stopped at CV 0.438, 1-3 points (README,
# "What the demo measured").
LORA_RECIPE_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lr_at(step: int, peak_lr: float, warmup_steps: int, total_steps: int, final_lr_fraction: float = 0.05) -> float:
    """Linear warm-up to ``peak_lr``, then cosine decay to ``peak_lr * final_lr_fraction``."""
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    floor = peak_lr * final_lr_fraction
    return floor + (peak_lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over the parameters that require gradients (all of them, or only LoRA's)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))


def compute_losses(model: nn.Module, batch: TinyBatch) -> dict[str, torch.Tensor]:
    """Teacher-forced losses of ``model`` (a `TinyTTS` or its PEFT wrapper) on ``batch``."""
    out = model(batch.phoneme_ids, batch.speaker_ids, batch.durations)
    before, after = out["mel_before"].float(), out["mel_after"].float()  # float32 under autocast
    frames = out["frame_mask"].unsqueeze(-1).float()
    denom = frames.sum() * before.shape[-1]
    mel_l1 = ((before - batch.mels).abs() * frames).sum() / denom
    postnet_l1 = ((after - batch.mels).abs() * frames).sum() / denom
    phones = (batch.phoneme_ids != PAD_ID).float()
    target = torch.log1p(batch.durations.float())
    duration_mse = ((out["log_durations"].float() - target) ** 2 * phones).sum() / phones.sum()
    weight = _config(model).duration_loss_weight
    return {
        "loss": mel_l1 + postnet_l1 + weight * duration_mse,
        "mel_l1": mel_l1,
        "postnet_l1": postnet_l1,
        "duration_mse": duration_mse,
    }


def train_step(
    model: nn.Module,
    batch: TinyBatch,
    optimizer: torch.optim.Optimizer,
    lr: float | None = None,
    max_grad_norm: float = 1.0,
    precision: str = "fp32",  # a plan's precision: tf32 never reaches here (TrainingPlan refuses it for tiny)
) -> dict[str, float]:
    """One optimisation step; returns the losses, the gradient norm and the lr used.

    Args:
        lr: when given, set on every parameter group before stepping (see `lr_at`).
        precision: ``"bf16"`` runs the forward pass under CPU bfloat16 autocast (weights,
            gradients and optimizer state stay float32); about 1.5x faster per step on CPUs
            with native bf16 (AVX512-BF16), slower on CPUs without it.
    """
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}")
    model.train()
    if lr is not None:
        for group in optimizer.param_groups:
            group["lr"] = lr
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=effective_precision(precision) == "bf16"):
        losses = compute_losses(model, batch)
    optimizer.zero_grad(set_to_none=True)
    losses["loss"].backward()  # type: ignore[no-untyped-call]
    params = [p for g in optimizer.param_groups for p in g["params"]]
    grad_norm = nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    result = {k: float(v.detach()) for k, v in losses.items()}
    result["grad_norm"] = float(grad_norm)
    result["lr"] = float(optimizer.param_groups[0]["lr"])
    return result


@torch.no_grad()
def cv_loss(model: nn.Module, batches: Iterable[TinyBatch]) -> float:
    """Frame-weighted mean of the training loss over ``batches``, in eval mode (no dropout)."""
    was_training = model.training
    model.eval()
    total, frames = 0.0, 0
    for batch in batches:
        total += float(compute_losses(model, batch)["loss"]) * batch.n_frames
        frames += batch.n_frames
    model.train(was_training)
    if frames == 0:
        raise ValueError("cv_loss got no frames; pass at least one non-empty batch")
    return total / frames


def _config(model: nn.Module) -> TinyTTSConfig:
    base = cast(Any, model).get_base_model() if hasattr(model, "get_base_model") else model
    from voxledger.tasks.backends.tiny.model import TinyTTS  # loaded already: ``model`` is one

    if not isinstance(base, TinyTTS):
        raise TypeError(f"expected a TinyTTS or its PEFT wrapper, got {type(base).__name__}")
    return base.config
