"""Where and in what precision the cosyvoice3 backend computes: one device for every stage, the plan's precision honoured.

Device: ``VOXLEDGER_COSYVOICE_DEVICE`` is ``auto`` (default: CUDA when this torch sees a GPU,
else the CPU), ``cpu``, ``cuda`` or ``cuda:N``; plain ``cuda`` (and ``auto`` on a GPU) means
``cuda:$LOCAL_RANK`` under torchrun, else torch's current CUDA device. Training runs there; upstream's
``CosyVoice3`` places synthesis by its own rule (``cuda`` when available, else ``cpu``), so a
synthesising stage whose choice differs from upstream's is refused in one line (`check_inference_device`)
rather than run on another device than training did. Of the ONNX feature extractors, the speech
tokenizer follows the device where onnxruntime has CUDA (as upstream's front end), campplus runs on
the CPU (upstream's choice); the providers are part of the prepared data's key.

Precision (a training plan's ``precision``):

- ``fp32``: the LM in float32, no autocast; on CUDA TF32 is switched off for the step (torch's
  cuDNN default allows it), so CPU and GPU both compute true fp32. Unchanged from before bf16 existed.
- ``bf16``: the forward pass (loss included) under ``torch.autocast(<device>, bfloat16)``; the LoRA
  weights, their gradients and AdamW's state stay float32. On a CPU without native bf16
  (avx512_bf16 / amx_bf16) torch emulates it: correct, slower (recorded as ``cpu_native_bf16``).
  Refused on a GPU without bf16 (`torch.cuda.is_bf16_supported`).
- ``tf32``: float32 weights with CUDA's TF32 matmuls and convolutions; CUDA only, compute capability
  8.0 or newer. Refused on the CPU (it has no TF32).

TF32 is a process-wide switch of torch: `Precision.compute` sets it for the duration of a step and
puts the previous values back.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from voxledger.schemas.errors import SynthesisError, TrainingError

ENV_DEVICE = "VOXLEDGER_COSYVOICE_DEVICE"
DEVICE_PATTERN = r"^(auto|cpu|cuda(:\d+)?)$"
PRECISIONS = ("fp32", "bf16", "tf32")


def resolve_device(setting: str) -> torch.device:
    """The one device every cosyvoice3 stage of this process runs on.

    Raises:
        TrainingError: CUDA is named but this torch sees no GPU, or ``cuda:N`` is past the device count.
    """
    if setting == "auto":
        setting = "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise TrainingError(
            f"{ENV_DEVICE}={setting}: this torch ({torch.__version__}, CUDA build {torch.version.cuda}) sees no GPU; "
            "set it to auto or cpu, or install a CUDA build of torch"
        )
    if setting == "cuda":
        local = os.environ.get("LOCAL_RANK")
        return torch.device("cuda", int(local) if local else torch.cuda.current_device())
    index = int(setting.split(":", 1)[1])
    if index >= torch.cuda.device_count():
        raise TrainingError(
            f"{ENV_DEVICE}={setting}: only {torch.cuda.device_count()} CUDA device(s) here; name one of 0..{torch.cuda.device_count() - 1}"
        )
    return torch.device("cuda", index)


def upstream_inference_device() -> torch.device:
    """Where upstream's ``CosyVoice3`` puts its models: ``cuda`` (the current device) when available, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def check_inference_device(chosen: torch.device, placed: torch.device | str) -> None:
    """Refuse synthesis on another device than the one chosen for every stage.

    Raises:
        SynthesisError: upstream placed its models on ``placed``, not on ``chosen``.
    """
    here = torch.device(placed)
    if here.type == "cuda" and here.index is None:
        here = torch.device("cuda", torch.cuda.current_device())
    if here != chosen:
        raise SynthesisError(
            f"upstream's CosyVoice3 runs synthesis on {here}, but {ENV_DEVICE} chooses {chosen} for every stage; "
            f"set {ENV_DEVICE}=auto (or {here}), or hide the GPU with CUDA_VISIBLE_DEVICES= to run everything on the CPU"
        )


def cpu_native_bf16() -> bool:
    """True when this CPU computes bfloat16 natively (AVX512-BF16 or AMX); else torch emulates it."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


@dataclass(frozen=True)
class Precision:
    """A plan's precision, checked against the device it runs on (`check_precision`)."""

    name: str
    device: torch.device

    @property
    def lm_dtype(self) -> str:
        """The dtype the LM computes in: ``bfloat16`` under autocast, else ``float32`` (its weights are float32 always)."""
        return "bfloat16" if self.name == "bf16" else "float32"

    def record(self) -> dict[str, Any]:
        """What a training receipt records of it (effective_config.precision)."""
        return {
            "precision": self.name,
            "device": str(self.device),
            "autocast": "bfloat16" if self.name == "bf16" else None,
            "tf32": self.name == "tf32",
            "cpu_native_bf16": cpu_native_bf16() if self.name == "bf16" and self.device.type == "cpu" else None,
        }

    @contextmanager
    def compute(self) -> Iterator[None]:
        """The block's forward pass in this precision (TF32 switches restored afterwards)."""
        if self.device.type != "cuda":
            if self.name == "fp32":  # nothing entered: the fp32 step is the one this backend always ran
                yield
                return
            with torch.autocast("cpu", dtype=torch.bfloat16):
                yield
            return
        saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = self.name == "tf32"
        try:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.name == "bf16"):
                yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def check_precision(plan_name: str, name: str, device: torch.device) -> Precision:
    """The plan's precision on ``device``, or one line saying why this hardware cannot run it.

    Raises:
        TrainingError: an unknown precision, TF32 off CUDA or before compute capability 8.0, bf16 on a GPU without it.
    """
    if name not in PRECISIONS:
        raise TrainingError(f"plan {plan_name}: precision {name!r} is not one of {PRECISIONS} for backend cosyvoice3")
    if name == "tf32":
        if device.type != "cuda":
            raise TrainingError(f"plan {plan_name}: precision tf32 needs a CUDA GPU (the CPU has no TF32); use fp32 or bf16 on {device}")
        major, minor = torch.cuda.get_device_capability(device)
        if major < 8:
            raise TrainingError(
                f"plan {plan_name}: precision tf32 needs compute capability 8.0 or newer; {device} is {major}.{minor}: use fp32"
            )
    if name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise TrainingError(f"plan {plan_name}: {device} ({torch.cuda.get_device_name(device)}) has no bfloat16; use fp32")
    return Precision(name, device)
