"""What describes a tiny model without building one: `TinyTTSConfig`, the padding id, and the
precision a step runs in here.

Apart from `model` and `training` so that reading corpora, binding a training stage's inputs and
the backend's identity import neither torch, transformers nor PEFT (about 5 s in a new process):
a cached training stage needs only these.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PAD_ID = 0
Precision = Literal["fp32", "bf16"]


class TinyTTSConfig(BaseModel):
    """Every hyperparameter of `TinyTTS`; phoneme id ``i + 1`` is ``phonemes[i]``, 0 is padding."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    phonemes: tuple[str, ...] = Field(min_length=1)
    speakers: tuple[str, ...] = Field(min_length=1)
    language: str = Field(default="en", description="manifest language code; synthesis phonemizes text with its espeak-ng voice")
    n_mels: int = 80
    hidden_size: int = 256
    encoder_layers: int = 3
    encoder_kernel: int = 5
    frame_kernel: int = 5
    backbone_layers: int = 4
    attention_heads: int = 4
    kv_heads: int = 2
    ffn_size: int = 768
    bidirectional: bool = True
    rope_theta: float = 10_000.0
    max_frames: int = 4096
    postnet_layers: int = 3
    postnet_channels: int = 256
    postnet_kernel: int = 5
    duration_layers: int = 2
    duration_kernel: int = 3
    dropout: float = 0.1
    duration_loss_weight: float = 0.1
    shared_stress_embedding: bool = True

    def to_dict(self) -> dict[str, object]:
        """Plain-dict view; PEFT reads ``model.config`` through this method."""
        return self.model_dump()

    def phoneme_id(self, phoneme: str) -> int:
        """Id of ``phoneme``; raises KeyError naming it when it is not in the inventory."""
        try:
            return self.phonemes.index(phoneme) + 1
        except ValueError:
            raise KeyError(
                f"phoneme {phoneme!r} is not in the model's inventory of {len(self.phonemes)}; "
                "rebuild the config from the current espeak phoneme_inventory()"
            ) from None


def native_bf16() -> bool:
    """True when this CPU computes bfloat16 natively (AVX512-BF16 or AMX). Without it, PyTorch
    emulates bf16 autocast on CPU: measured 22.7 s against 1.5 s per fp32 step of the demo's
    base recipe on a 2-core AMD EPYC without AVX-512, so plans asking for bf16 train in fp32
    there, and the backend's identity (part of every run key) says which one ran."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def effective_precision(requested: str) -> Precision:
    """The precision a step really uses here: bf16 only where the CPU has it natively."""
    return "bf16" if requested == "bf16" and native_bf16() else "fp32"
