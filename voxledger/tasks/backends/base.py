"""The interface every model family implements, and the closed registry of backends."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from voxledger.schemas.training import BackendName, TrainingPlan


@dataclass
class TrainingSetup:
    """What a backend hands the generic training loop."""

    model: torch.nn.Module
    effective_config: dict[str, Any]
    n_train_utterances: int
    cv_batches: list[Any]


class Backend(Protocol):
    """A model family: data preparation, model building, LoRA, training steps, synthesis.

    The generic loop in ``voxledger.tasks.training`` owns checkpoints, resume, early stopping
    and receipts; a backend owns only the model and its data.
    """

    name: BackendName
    needs_stored_base: bool
    """LoRA needs a base tree from the store (tiny); False when the backend's identity pins its base (cosyvoice3's llm.pt)."""

    def identity(self) -> dict[str, Any]:
        """What the backend runs besides our code (upstream sources, model files, library versions).

        Its canonical digest binds every run and checkpoint: a changed upstream changes every
        cache key downstream and makes resume refuse.
        """
        ...

    def setup(self, corpus_root: Path, plan: TrainingPlan, base_dir: Path | None) -> TrainingSetup:
        """Load data for ``plan``'s splits and build the model (fresh, or base + LoRA)."""
        ...

    def epoch_batches(self, epoch: int, seed: int) -> list[Any]:
        """Batches of one epoch, a pure function of (epoch, seed)."""
        ...

    def train_step(
        self, model: torch.nn.Module, batch: Any, optimizer: torch.optim.Optimizer, lr: float, max_grad_norm: float
    ) -> dict[str, float]:
        """One optimisation step; returns at least loss and grad_norm."""
        ...

    def cv_loss(self, model: torch.nn.Module, batches: list[Any]) -> float:
        """Held-out loss (eval mode, no RNG use)."""
        ...

    def batch_frames(self, batch: Any) -> tuple[int, int]:
        """(frames, utterances) in a batch, for throughput."""
        ...

    def trainable_state(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The tensors the run changes (adapter weights in LoRA mode, all weights in full mode)."""
        ...

    def load_trainable_state(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Put ``trainable_state`` back (strict: every key must match)."""
        ...

    def export(self, model: torch.nn.Module, out_dir: Path) -> None:
        """Write the deliverable files (safetensors + JSON config) of the current weights."""
        ...

    def load_for_inference(self, base_dir: Path | None, artifact_dir: Path, runtime: str) -> Any:
        """A ready-to-synthesize model: runtime is 'base', 'adapter', 'merged' or 'merged_export'."""
        ...

    def synthesize(self, loaded: Any, text: str, speaker: str, seed: int, settings: dict[str, Any]) -> tuple[np.ndarray, int]:
        """(waveform float32, sample rate) for ``text`` in ``speaker``'s voice."""
        ...


BACKENDS: dict[str, str] = {
    "tiny": "voxledger.tasks.backends.tiny.backend:TinyBackend",
    "cosyvoice3": "voxledger.tasks.backends.cosyvoice3.backend:CosyVoice3Backend",
}
"""The closed registry: ``BackendName`` (in the plan schema) lists exactly these keys, and a test
checks both agree. Backends are imported on first use (each pulls in its own heavy stack)."""


def get_backend(name: BackendName) -> Backend:
    """The backend registered under ``name``; ValueError naming the registered ones otherwise."""
    import importlib

    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; registered: {', '.join(BACKENDS)}")
    module, _, cls = BACKENDS[name].partition(":")
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend
