"""The ``tiny`` backend behind the generic ``Backend`` interface.

Full mode builds a fresh `TinyTTS` (seeded) over the training speakers; LoRA mode loads a base
model file, appends the new speaker row and attaches PEFT LoRA (attention and MLP projections). Deliverables are
``model.safetensors`` (full) or ``adapter.safetensors`` + ``adapter_config.json`` (LoRA), written
with fixed metadata so equal weights give equal bytes. Packages hold the LoRA pair; synthesis
splits into durations, mel and pcm (`stages`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from voxledger.schemas.canonical import canonical_bytes
from voxledger.schemas.errors import CorpusError, DigestMismatchError, TrainingError
from voxledger.schemas.package import ComponentDigests, MemberRole
from voxledger.schemas.training import TrainingPlan
from voxledger.stores.memo import DerivedMemo
from voxledger.tasks.backends.base import PlanRecipe, SynthesisStage, TrainingSetup, shipped_folder
from voxledger.tasks.backends.tiny.align import durations_path
from voxledger.tasks.backends.tiny.audio import SAMPLE_RATE_HZ, NormStats, compute_norm_stats
from voxledger.tasks.backends.tiny.config import TinyTTSConfig, effective_precision
from voxledger.tasks.backends.tiny.data import (
    CorpusExample,
    TinyBatch,
    TinyDataset,
    corpus_durations,
    load_examples,
    to_utterance,
)
from voxledger.tasks.corpus.espeak import phoneme_inventory
from voxledger.tasks.corpus.records import LoadedCorpus

if TYPE_CHECKING:
    import torch

# torch, the network (`model`: transformers' Qwen2, PEFT) and what builds on it (`training`,
# `synth`, `stages`) are imported by the methods that build, load or run a model: binding a
# training stage's inputs, its identity and a cached stage need none of them (about 5 s of
# imports in a new process).

MODEL_FILE = "model.safetensors"
ADAPTER_FILE = "adapter.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
OPTIM_KEYS = ("peak_lr", "warmup_steps", "final_lr_fraction", "weight_decay", "max_grad_norm")
PLAN_NOTES = {
    "full": (
        "Full training of the tiny TTS on {speakers} (language {language!r}); recipe measured on the demo "
        "(tasks/backends/tiny/training.py BASE_RECIPE). Durations come from forced alignment against espeak-ng."
    ),
    "lora": "LoRA on the backbone's attention (q/k/v/o) and MLP (gate/up/down) projections plus a new speaker row for the target voice {target!r}.",
}
COMPONENT_NOTE = (
    "tiny backend: no separate tokenizer or vocoder files. Phonemes come from espeak-ng "
    "(version under inference.tools); the mel normalisation statistics and model config live in the "
    "base model tree (base_model_sha256), and the Griffin-Lim vocoder settings are code constants "
    "covered by code.source_sha256."
)


@dataclass
class TinyLoaded:
    """A model ready for synthesis plus its normalisation statistics."""

    model: torch.nn.Module
    norm: NormStats
    runtime: str


class TinyBackend:
    """Backend ``tiny``: a small Qwen2-backbone TTS that trains on CPU."""

    name: Literal["tiny"] = "tiny"
    needs_stored_base = True

    def __init__(self) -> None:
        self._train: TinyDataset | None = None
        self._norm: NormStats | None = None
        self._plan: TrainingPlan | None = None

    def identity(self) -> dict[str, Any]:
        """The libraries whose behaviour shapes tiny's data and model besides our code."""
        from importlib import metadata

        from voxledger.tasks.backends.tiny.config import native_bf16

        versions = {p: metadata.version(p) for p in ("espeakng-loader", "transformers", "peft")}
        return {"backend": self.name, **versions, "native_bf16": native_bf16()}

    def setup(self, corpus_root: Path, plan: TrainingPlan, base_dir: Path | None) -> TrainingSetup:
        self._plan = plan
        train = self._examples(corpus_root, plan.train_splits, plan)
        cv = self._examples(corpus_root, plan.cv_splits, plan)
        if plan.mode == "full":
            model, config = self._fresh(train, cv, plan)
        else:
            if base_dir is None:
                raise TrainingError(f"plan {plan.name}: LoRA mode needs a base model (give the base run's model digest)")
            model, config = self._lora(base_dir, plan)
        train_utts = [to_utterance(e, config) for e in train]
        cv_utts = [to_utterance(e, config) for e in cv]
        if self._norm is None:
            self._norm = compute_norm_stats(u.mel for u in train_utts)
        self._train = TinyDataset(train_utts, config, self._norm, plan.frames_per_batch)
        cv_set = TinyDataset(cv_utts, config, self._norm, plan.frames_per_batch)
        sources = sorted({e.durations.source for e in (*train, *cv)})
        effective = {
            "model": config.model_dump(mode="json"),
            "frames_per_batch": plan.frames_per_batch,
            "train_utterances": len(train),
            "cv_utterances": len(cv),
            "duration_sources": sources,
            "precision_effective": effective_precision(plan.precision),
        }
        return TrainingSetup(
            model=model, effective_config=effective, n_train_utterances=len(train), cv_batches=cv_set.batches(0, plan.seed)
        )

    def feature_files(
        self, loaded: LoadedCorpus, audio_sha256: dict[str, str] | None = None, memo: DerivedMemo | None = None
    ) -> dict[str, bytes]:
        """The per-utterance durations files training reads (relative path -> bytes): the features tree.

        Utterances with an alignment file are converted from it; the others are force-aligned
        against espeak-ng (`align`), or read back from the home's ``memo`` when the same audio
        bytes (``audio_sha256``: id -> digest), text and aligner code were aligned before.
        ``setup`` reads the very same durations (memoised per process).
        """
        return {durations_path(uid): d.to_bytes(uid) for uid, d in corpus_durations(loaded, audio_sha256, memo).items()}

    def _examples(self, root: Path, splits: tuple[str, ...], plan: TrainingPlan) -> list[CorpusExample]:
        try:
            return load_examples(root, splits, plan.speakers)
        except CorpusError as exc:
            raise TrainingError(f"plan {plan.name}: {exc}") from None

    def _fresh(self, train: list[CorpusExample], cv: list[CorpusExample], plan: TrainingPlan) -> tuple[torch.nn.Module, TinyTTSConfig]:
        languages = sorted({e.language for e in train})
        if len(languages) != 1:
            raise TrainingError(
                f"plan {plan.name}: training utterances mix languages {languages}; train one language per model (select speakers or splits)"
            )
        # the espeak English inventory keeps demo models comparable; a language with an inventory of its own (Mandarin)
        # adds it, so its adapters and prompts find every phoneme; the corpus's own phonemes (CV split too) join any other
        phonemes = sorted(set(phoneme_inventory(languages[0])) | {p for e in (*train, *cv) for p in e.durations.phonemes})
        speakers = sorted({e.speaker for e in train})
        config = TinyTTSConfig(phonemes=tuple(phonemes), speakers=tuple(speakers), language=languages[0], **plan.model)  # type: ignore[arg-type]
        import torch

        from voxledger.tasks.backends.tiny.model import TinyTTS

        torch.manual_seed(_init_seed(plan.seed))
        return TinyTTS(config), config

    def _lora(self, base_dir: Path, plan: TrainingPlan) -> tuple[torch.nn.Module, TinyTTSConfig]:
        assert plan.lora is not None and plan.new_speaker is not None
        import torch

        from voxledger.tasks.backends.tiny.model import attach_lora, load_tiny

        base, norm = load_tiny(base_dir / MODEL_FILE)
        self._norm = norm
        if plan.new_speaker in base.config.speakers:
            raise TrainingError(f"speaker {plan.new_speaker!r} is already in the base model; LoRA adds a new voice")
        torch.manual_seed(plan.seed)
        base.add_speaker(plan.new_speaker, init="mean")
        peft = attach_lora(base, plan.lora.r, plan.lora.alpha, plan.lora.dropout, plan.lora.targets)
        return peft, base.config

    def epoch_batches(self, epoch: int, seed: int) -> list[TinyBatch]:
        if self._train is None:
            raise TrainingError("setup() must run before epoch_batches()")
        return self._train.batches(epoch, seed)

    def train_step(
        self, model: torch.nn.Module, batch: TinyBatch, optimizer: torch.optim.Optimizer, lr: float, max_grad_norm: float
    ) -> dict[str, float]:
        from voxledger.tasks.backends.tiny import training as tt

        precision = self._plan.precision if self._plan is not None else "fp32"
        return tt.train_step(model, batch, optimizer, lr=lr, max_grad_norm=max_grad_norm, precision=precision)

    def cv_loss(self, model: torch.nn.Module, batches: list[TinyBatch]) -> float:
        from voxledger.tasks.backends.tiny import training as tt

        return tt.cv_loss(model, batches)

    def batch_frames(self, batch: TinyBatch) -> tuple[int, int]:
        return batch.n_frames, len(batch.ids)

    def trainable_state(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        if hasattr(model, "peft_config"):
            from peft import get_peft_model_state_dict

            return {k: v.detach().clone().contiguous() for k, v in get_peft_model_state_dict(model).items()}
        return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}

    def rng_state(self) -> dict[str, Any]:
        """Nothing of its own: the tiny model draws only from torch's generator, which the loop saves."""
        return {}

    def load_rng_state(self, state: dict[str, Any]) -> None:
        """Nothing to restore (see `rng_state`)."""

    def load_trainable_state(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        if hasattr(model, "peft_config"):
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(model, state)
            unexpected = list(getattr(result, "unexpected_keys", []) or [])
            if unexpected:
                raise TrainingError(f"adapter state has unexpected keys {unexpected[:5]}")
        else:
            model.load_state_dict(state, strict=True)

    def export(self, model: torch.nn.Module, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        if self._norm is None:
            raise TrainingError("no normalisation statistics: setup() must run before export()")
        if hasattr(model, "peft_config"):
            plan = self._plan
            assert plan is not None and plan.lora is not None
            from voxledger.tasks.tensorio import save_deterministic

            save_deterministic(self.trainable_state(model), out_dir / ADAPTER_FILE, metadata={"format": "voxledger-tiny-lora/1"})
            config = {"format": "voxledger-tiny-lora/1", "new_speaker": plan.new_speaker, **plan.lora.model_dump(mode="json")}
            (out_dir / ADAPTER_CONFIG).write_bytes(canonical_bytes(config))
        else:
            from voxledger.tasks.backends.tiny.model import save_tiny

            save_tiny(out_dir / MODEL_FILE, model, self._norm)  # type: ignore[arg-type]

    def load_for_inference(self, base_dir: Path | None, artifact_dir: Path, runtime: str) -> TinyLoaded:
        """runtime: 'base' (artifact_dir is a model), 'adapter', 'merged' (in memory), 'merged_export'."""
        from safetensors.torch import load_file

        from voxledger.tasks.backends.tiny.model import attach_lora, load_tiny, merge_lora

        if runtime in ("base", "merged_export"):
            model, norm = load_tiny(artifact_dir / MODEL_FILE)
            return TinyLoaded(model.eval(), norm, runtime)
        if base_dir is None:
            raise TrainingError(f"runtime {runtime!r} needs the base model folder")
        config = json.loads((artifact_dir / ADAPTER_CONFIG).read_text())
        base, norm = load_tiny(base_dir / MODEL_FILE)
        base.add_speaker(config["new_speaker"], init="mean")
        peft = attach_lora(base, config["r"], config["alpha"], 0.0, tuple(config["targets"]))
        state = load_file(str(artifact_dir / ADAPTER_FILE))
        self.load_trainable_state(peft, state)
        peft.eval()
        if runtime == "merged":
            return TinyLoaded(merge_lora(peft).eval(), norm, runtime)
        return TinyLoaded(peft, norm, runtime)

    def export_merged(self, loaded: TinyLoaded, out_dir: Path) -> None:
        """Write a merged model (adapters folded into the weights) as ``model.safetensors``."""
        from voxledger.tasks.backends.tiny.model import TinyTTS, merge_lora, save_tiny

        model = loaded.model if loaded.runtime == "merged" else merge_lora(loaded.model)  # type: ignore[arg-type]
        out_dir.mkdir(parents=True, exist_ok=True)
        save_tiny(out_dir / MODEL_FILE, cast(TinyTTS, model), loaded.norm)

    def synthesize(self, loaded: TinyLoaded, text: str, speaker: str, seed: int, settings: dict[str, Any]) -> tuple[np.ndarray, int]:
        import torch

        from voxledger.tasks.backends.tiny.synth import synthesize as tiny_synthesize

        torch.manual_seed(seed)
        wav = tiny_synthesize(loaded.model, loaded.norm, text, speaker, seed=seed, durations=settings.get("durations", "predicted"))
        return wav, SAMPLE_RATE_HZ

    def adapter_speaker(self, artifact_dir: Path) -> str:
        path = artifact_dir / ADAPTER_CONFIG
        if not path.is_file():
            raise TrainingError(f"no {ADAPTER_CONFIG}, so it is no LoRA checkpoint of the tiny backend")
        return str(json.loads(path.read_text(encoding="utf-8"))["new_speaker"])

    def peft_files(self, adapter: dict[str, bytes], effective_config: dict[str, Any], base_model: str) -> tuple[dict[str, bytes], str]:
        """The adapter as a folder ``peft.PeftModel.from_pretrained`` loads, and how to load it.

        ``adapter``: the package's adapter files (name -> bytes); ``effective_config``: the training
        run's (its ``model.speakers`` places the new speaker's row); ``base_model``: what
        ``base_model_name_or_path`` says. The tensors keep their names and values (they came from
        PEFT's own state dict); only the safetensors metadata becomes PEFT's (``format: pt``).
        Returns ({file name: bytes}, a Python snippet that loads it).
        """
        from safetensors.torch import load

        from voxledger.tasks.backends.tiny.model import lora_config
        from voxledger.tasks.tensorio import deterministic_bytes

        ours = json.loads(adapter[ADAPTER_CONFIG])
        speakers = list(effective_config["model"]["speakers"])
        if ours["new_speaker"] not in speakers:
            raise TrainingError(
                f"{ADAPTER_CONFIG} names speaker {ours['new_speaker']!r}, the training run's model has {speakers}: "
                "this adapter does not belong to that run; rebuild the package"
            )
        row = speakers.index(ours["new_speaker"])
        config = lora_config(ours["r"], ours["alpha"], ours["dropout"], tuple(ours["targets"]), (row,)).to_dict()  # type: ignore[no-untyped-call]  # peft leaves it unannotated
        config |= {"base_model_name_or_path": base_model, "inference_mode": True}
        # peft writes sets in hash order; sorted lists keep the bytes a function of the adapter alone
        config = {k: sorted(v) if isinstance(v, set) else v for k, v in config.items()}
        files = {
            "adapter_config.json": (json.dumps(config, indent=2, sort_keys=True) + "\n").encode(),
            "adapter_model.safetensors": deterministic_bytes(load(adapter[ADAPTER_FILE]), metadata={"format": "pt"}),
        }
        loading = (
            "from peft import PeftModel\n"
            "from voxledger.tasks.backends.tiny.model import load_tiny\n\n"
            'base, norm = load_tiny("BASE/model.safetensors")  # BASE: the base tree named by base_model_name_or_path\n'
            f"base.add_speaker({ours['new_speaker']!r})  # the row the adapter trains (row {row})\n"
            'model = PeftModel.from_pretrained(base, "THIS_FOLDER")\n'
        )
        return files, loading

    def deliverables(self) -> dict[str, MemberRole]:
        return {ADAPTER_FILE: "adapter_weights", ADAPTER_CONFIG: "adapter_config"}

    def inference_settings(self) -> tuple[int, dict[str, Any]]:
        return SAMPLE_RATE_HZ, {"durations": "predicted"}

    def component_note(self) -> str:
        return COMPONENT_NOTE

    def package_components(self, bound: dict[str, Any], effective_config: dict[str, Any]) -> ComponentDigests:
        """The stored base tree the run bound (tokenizer and vocoder live in code: `component_note`)."""
        if not bound.get("base_sha256"):
            raise TrainingError("a tiny adapter run binds a stored base tree; this run names none")
        return ComponentDigests(base_model_sha256=bound["base_sha256"], note=COMPONENT_NOTE)

    def check_base(self, components: ComponentDigests, base_dir: Path | None) -> None:
        """``base_dir`` must be the stored base tree the package names."""
        from voxledger.schemas.canonical import sha256_hex
        from voxledger.stores.trees import build_manifest, manifest_bytes

        if base_dir is None:
            raise DigestMismatchError(f"a tiny package runs on base tree {components.base_model_sha256}; give its folder")
        base_sha = sha256_hex(manifest_bytes(build_manifest(base_dir)))
        if base_sha != components.base_model_sha256:
            raise DigestMismatchError(f"base folder {base_dir} is tree {base_sha}, the package needs {components.base_model_sha256}")

    def synthesis_stages(self) -> tuple[SynthesisStage, ...]:
        from voxledger.tasks.backends.tiny import stages

        return stages.STAGES

    def stage_outputs(
        self, loaded: TinyLoaded, text: str, speaker: str, seed: int, settings: dict[str, Any], feed: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        from voxledger.tasks.backends.tiny import stages

        return stages.stage_outputs(loaded, text, speaker, seed, settings, feed)

    def shipped_base(self) -> Path | None:
        """``shipped/``: the base trained by ``plans/train-tiny-base.yaml`` on the demo corpus (see its base.json)."""
        return shipped_folder("tiny")

    def plan_recipe(self, mode: Literal["full", "lora"]) -> PlanRecipe:
        """`training.BASE_RECIPE` (full) or `training.LORA_RECIPE` (lora), measured on the demo corpus."""
        from voxledger.tasks.backends.tiny import training as tt

        recipe = tt.BASE_RECIPE if mode == "full" else tt.LORA_RECIPE
        lora = {k: recipe[k] for k in ("r", "alpha", "dropout")} | {"targets": list(tt.LORA_RECIPE_TARGETS)} if mode == "lora" else None
        return PlanRecipe(
            frames_per_batch=int(recipe["frames_per_batch"]),
            precision=str(recipe["precision"]),
            optim={k: recipe[k] for k in OPTIM_KEYS},
            lora=lora,
            note=PLAN_NOTES[mode],
        )


def _init_seed(seed: int) -> int:
    """The seed of a fresh model's weights: the plan's, unless ``VOXLEDGER_TEST_UNSEEDED_INIT`` is set.

    That setting exists only so a test can plant a hidden nondeterminism (an unseeded draw) and
    check that ``voxledger reproduce`` reports exactly the outputs it changes.
    """
    import secrets

    from voxledger.settings import load_settings

    return secrets.randbits(63) if load_settings().test_unseeded_init else seed
