"""The interface every model family implements, and the closed registry of backends.

Nothing outside ``tasks/backends/<name>/`` names a backend: packaging, equivalence, generated
plans, the CLI and the benchmarks ask the backend a receipt or plan names (`get_backend`) through
this protocol, and ``tests/test_backend_closure.py`` fails when a module reaches past it. This
module imports no model library, so the CLI can read the registry at start-up.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from voxledger.schemas.equivalence import StageKind
from voxledger.schemas.package import ComponentDigests, MemberRole
from voxledger.schemas.training import DEFAULT_BACKEND, BackendName, TrainingPlan

if TYPE_CHECKING:
    import click
    import numpy as np
    import torch

__all__ = ["BACKENDS", "COMMAND_GROUPS", "DEFAULT_BACKEND", "Backend", "PlanRecipe", "SynthesisStage", "TrainingSetup"]


@dataclass
class TrainingSetup:
    """What a backend hands the generic training loop."""

    model: torch.nn.Module
    effective_config: dict[str, Any]
    n_train_utterances: int
    cv_batches: list[Any]


@dataclass(frozen=True)
class SynthesisStage:
    """One stage of a backend's synthesis: its name in `Backend.stage_outputs`, how equivalence
    compares it, and the stem of its dump file (``<dump>.i32`` for tokens, ``<dump>.f32`` otherwise)."""

    name: str
    kind: StageKind
    dump: str


@dataclass(frozen=True)
class PlanRecipe:
    """The backend's measured settings for one training mode, as generated plans (``voxledger init``) write them.

    ``note`` is the plan file's comment about them; ``{speakers}``, ``{language}`` and
    ``{target}`` in it are filled in from the corpus.
    """

    frames_per_batch: int
    precision: str
    optim: dict[str, Any]
    lora: dict[str, Any] | None
    note: str


class Backend(Protocol):
    """A model family: data preparation, model building, LoRA, training steps, synthesis.

    The generic loop in ``voxledger.tasks.training`` owns checkpoints, resume, early stopping
    and receipts; a backend owns only the model and its data. What a backend cannot do yet it
    refuses with `BackendCapabilityError` naming itself and what is missing.
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

    def rng_state(self) -> dict[str, Any]:
        """JSON-able state of generators the backend owns (beyond python's, numpy's and torch's global
        ones, which the loop saves itself); stored in every working checkpoint."""
        ...

    def load_rng_state(self, state: dict[str, Any]) -> None:
        """Put `rng_state` back on resume (``{}`` for a checkpoint that holds none)."""
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

    def adapter_speaker(self, artifact_dir: Path) -> str:
        """The voice a LoRA checkpoint folder adds; TrainingError when the folder holds no adapter of this backend."""
        ...

    def deliverables(self) -> dict[str, MemberRole]:
        """File name -> package member role of everything a LoRA checkpoint tree may ship; nothing else may enter a
        package, and a tree must hold at least one file of each role named here."""
        ...

    def package_components(self, bound: dict[str, Any], effective_config: dict[str, Any]) -> ComponentDigests:
        """The digests a package binds its adapter to, from its training run's ``bound`` inputs and effective config.

        Raises TrainingError when the run names no base this backend can bind.
        """
        ...

    def check_base(self, components: ComponentDigests, base_dir: Path | None) -> None:
        """Refuse (DigestMismatchError) a base that is not the one ``components`` names: ``base_dir`` (a stored tree) or,
        when it is None, the backend's own configured model (e.g. cosyvoice3's model folder, by its identity)."""
        ...

    def inference_settings(self) -> tuple[int, dict[str, Any]]:
        """(sample rate in Hz, synthesis settings) a packaged adapter is meant to run with."""
        ...

    def component_note(self) -> str:
        """What covers a package's absent tokenizer and vocoder digests (and where the rest of the model lives)."""
        ...

    def synthesis_stages(self) -> tuple[SynthesisStage, ...]:
        """Synthesis split into stages, in order; the last one's output is the waveform `synthesize` returns."""
        ...

    def stage_outputs(
        self, loaded: Any, text: str, speaker: str, seed: int, settings: dict[str, Any], feed: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Every stage's output for one utterance, keyed by `SynthesisStage.name`.

        ``feed`` maps a stage name to an array used in place of that stage's own output as the
        next stage's input (the reference runtime's intermediates, for stage attribution).
        """
        ...

    def plan_recipe(self, mode: Literal["full", "lora"]) -> PlanRecipe:
        """The measured recipe generated training plans of ``mode`` start from."""
        ...

    def shipped_base(self) -> Path | None:
        """The folder of the trained base this backend ships in the package (``schemas/shipped.py``), or None."""
        ...


BACKENDS: dict[str, str] = {
    "tiny": "voxledger.tasks.backends.tiny.backend:TinyBackend",
    "cosyvoice3": "voxledger.tasks.backends.cosyvoice3.backend:CosyVoice3Backend",
}
"""The closed registry: ``BackendName`` (in the plan schema) lists exactly these keys, and a test
checks both agree. Backends are imported on first use (each pulls in its own heavy stack)."""

COMMAND_GROUPS: dict[str, str] = {
    "cosyvoice3": "voxledger.tasks.backends.cosyvoice3.cli:cli_group",
}
"""Backends that add a ``voxledger <name> ...`` command group: name -> "module:function" returning
the click group. The CLI attaches each one; the modules import click and nothing heavy."""


def backend_location(name: BackendName) -> tuple[str, str]:
    """(module, class name) the registry gives for ``name``, without importing it; ValueError naming the registered ones otherwise."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; registered: {', '.join(BACKENDS)}")
    module, _, cls = BACKENDS[name].partition(":")
    return module, cls


SHIPPED_FOLDER = "shipped"
"""A backend ships a trained base in this folder beside its module (``schemas/shipped.py``)."""


def shipped_folder(name: BackendName) -> Path | None:
    """The folder of ``name``'s shipped base, found beside its module without importing it (read
    commands such as ``base list`` stay free of torch), or None when it ships none."""
    import importlib.util

    module, _ = backend_location(name)
    spec = importlib.util.find_spec(module)  # imports the parent packages only: their __init__ are docstrings
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / SHIPPED_FOLDER
    return folder if (folder / "base.json").is_file() else None


def compute_device(*names: str) -> str | None:
    """The torch device the backends ``names`` compute on, as receipts record it (``cuda:0``, ``cpu``;
    several joined by ','), for the backends that choose one (``compute_device()``: cosyvoice3's one
    device for every stage); None when none does (the tiny backend is CPU only; ``recordings``)."""
    found = {device_of(get_backend(name)) for name in names if name != "recordings"} - {None}  # type: ignore[arg-type]
    return ",".join(sorted(d for d in found if d is not None)) or None


def device_of(backend: Backend) -> str | None:
    """The device ``backend`` computes on when it chooses one (its ``compute_device()``), else None."""
    chooser = getattr(backend, "compute_device", None)
    return None if chooser is None else str(chooser())


def get_backend(name: BackendName) -> Backend:
    """The backend registered under ``name``; ValueError naming the registered ones otherwise."""
    module, cls = backend_location(name)
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend


def command_groups() -> list[click.Group]:
    """Every backend's optional command group, in registry order."""
    groups = []
    for spec in COMMAND_GROUPS.values():
        module, _, fn = spec.partition(":")
        groups.append(getattr(importlib.import_module(module), fn)())
    return groups
