"""The ``cosyvoice3`` backend: LoRA on a real CosyVoice3 checkout behind the generic ``Backend`` interface.

Setup runs the preflight (files present, upstream sources and weights digested), prepares the
corpus as upstream's recipe does (`prepare.prepare_corpus`), builds upstream's ``CosyVoice3LM``
from the model yaml, loads ``llm.pt`` strictly (or the base run's ``llm.safetensors`` /
``llm.pt``), injects PEFT LoRA into the Qwen2 projections and trains through the model's own
``forward(batch, device)``. Deliverables per epoch: ``adapter.safetensors`` (byte-reproducible),
``adapter_config.json`` (canonical JSON: LoRA settings, options, upstream identity, base-weight
digest, the voice prompt) and the prompt audio (a training utterance of the new speaker, bytes
as in the corpus). `CosyVoice3Backend.export_merged` writes ``llm.safetensors`` with exactly
``llm.pt``'s keys. Only mode ``lora`` exists: full fine-tuning of a 0.5B model is out of scope.

Packages hold the adapter, its config and the bundled prompt (role ``voice_prompt``) and bind
the LLM weights, speech tokenizer, vocoder and front end by digest (`package_components`).
Synthesis is split into speech tokens, LLM log-probabilities, mel and pcm (`stages.py`), for
packaging probes and stage attribution. Not yet supported, and refused with
`BackendCapabilityError`: a measured recipe for generated plans.

Every stage runs on one device (`runtime.resolve_device`), the plan's precision is honoured and
recorded (`runtime.check_precision`), and inside a torch.distributed group of several ranks
training is data-parallel (`distributed`).

Longer than 500 lines on purpose: one class implements the whole `Backend` protocol (set-up,
steps, sharding, synthesis, packaging hooks) over state its parts share.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from safetensors.torch import load_file

from voxledger.schemas.canonical import canonical_bytes, canonical_digest
from voxledger.schemas.errors import BackendCapabilityError, DigestMismatchError, SynthesisError, TrainingError
from voxledger.schemas.package import ComponentDigests, MemberRole
from voxledger.schemas.training import LoraSettings, TrainingInputs, TrainingPlan
from voxledger.stores.hashing import sha256_file
from voxledger.tasks.backends.base import PlanRecipe, SynthesisStage, TrainingSetup
from voxledger.tasks.backends.cosyvoice3 import compat, data, distributed, rng, stages, synth, upstream
from voxledger.tasks.backends.cosyvoice3 import runtime as placement
from voxledger.tasks.backends.cosyvoice3.config import (
    DEFAULT_SYSTEM_PROMPT,
    ENV_PYTHON,
    CosyVoice3Config,
    CosyVoice3Options,
)
from voxledger.tasks.backends.cosyvoice3.prepare import prepare_corpus
from voxledger.tasks.tensorio import save_deterministic

FORMAT = "voxledger-cosyvoice3-lora/1"
MERGED_FORMAT = "voxledger-cosyvoice3-merged/1"
ADAPTER_FILE, ADAPTER_CONFIG = "adapter.safetensors", "adapter_config.json"
MERGED_FILE, MERGED_CONFIG = "llm.safetensors", "merged_config.json"
RUNTIMES = ("base", "adapter", "merged", "merged_export")
CV_RANDOM_SEED = 0  # upstream's forward draws python random() per utterance (bistream or not)
RNG_FORMAT = "cosyvoice3-rng/1"


def choose_prompt(examples: list[data.Example], min_duration_s: float) -> data.Example:
    """The shortest example of at least ``min_duration_s`` (ties by id), else the longest."""
    long_enough = [e for e in examples if e.duration_s >= min_duration_s]
    if long_enough:
        return min(long_enough, key=lambda e: (e.duration_s, e.utt))
    return max(examples, key=lambda e: (e.duration_s, e.utt))


LORA_FRAMES_PER_BATCH = 2000  # upstream's max_frames_in_batch (conf/cosyvoice3.yaml), 50 mel frames per second
LORA_OPTIM: dict[str, Any] = {"peak_lr": 1.0e-4, "warmup_steps": 100, "final_lr_fraction": 0.05, "weight_decay": 0.0, "max_grad_norm": 5.0}
LORA_SETTINGS: dict[str, Any] = {"r": 16, "alpha": 32.0, "dropout": 0.0}
LORA_NOTE = (
    "LoRA on the Qwen2 q/k/v/o projections of the model folder's own LLM for the new voice {target!r}; the prompt it speaks "
    "from is the shortest training utterance of >= 3 s. Recipe: upstream's batch of 2000 mel frames and grad clip 5, "
    "the LM in fp32; the learning rate is not measured on the released weights (not obtainable here): watch the CV curve."
)
PROMPT_SUFFIXES = (".wav", ".flac", ".ogg")  # the prompt keeps the corpus file's bytes and suffix
VOICE_PROMPT_FILES = tuple(f"prompt{suffix}" for suffix in PROMPT_SUFFIXES)


class CosyVoice3Backend:
    """Backend ``cosyvoice3`` (configured from ``VOXLEDGER_COSYVOICE_*`` unless given a config)."""

    name: Literal["cosyvoice3"] = "cosyvoice3"
    needs_stored_base = False  # upstream's llm.pt is the base; its digest is part of identity()

    def __init__(self, config: CosyVoice3Config | None = None) -> None:
        self._config = config
        self._identity: upstream.UpstreamIdentity | None = None
        self._train: list[data.Example] = []
        self._frames_per_batch = 0
        self._device = torch.device("cpu")
        self._precision = placement.Precision("fp32", self._device)
        self._meta: dict[str, Any] | None = None
        self._prompt: tuple[bytes, str] | None = None
        self._seed = 0
        self._step = 0  # train steps taken: with the seed, it decides every draw of the next step
        self._group: distributed.Group | None = None  # a data-parallel run's rank (None: one process)
        self._ddp: torch.nn.Module | None = None

    @property
    def config(self) -> CosyVoice3Config:
        if self._config is None:
            self._config = CosyVoice3Config.from_env()
        return self._config

    def compute_device(self) -> str:
        """The one device every stage of this backend computes on (``VOXLEDGER_COSYVOICE_DEVICE``; auto: CUDA when present)."""
        return str(self.config.torch_device())

    def data_parallel_ranks(self) -> int:
        """How many ranks a training run takes (``VOXLEDGER_COSYVOICE_RANKS``); above 1, `train_ranks` trains it."""
        return self.config.ranks

    def train_ranks(self, corpus: Path, plan: TrainingPlan, base_dir: Path | None, bound: TrainingInputs, run_dir: Path) -> dict[str, Any]:
        """Train ``plan`` on `data_parallel_ranks` ranks (`distributed.launch`), resuming from ``run_dir/checkpoints``:
        rank 0's epoch adapters land in ``run_dir/epochs/epoch-N``; returns its ``run.json``."""
        device = self.config.torch_device()
        if device.type == "cuda" and self.config.ranks > torch.cuda.device_count():
            raise TrainingError(
                f"VOXLEDGER_COSYVOICE_RANKS={self.config.ranks} on CUDA needs a GPU per rank; torch sees {torch.cuda.device_count()}: "
                "lower it, or set VOXLEDGER_COSYVOICE_DEVICE=cpu for gloo ranks on the CPU"
            )
        job = distributed.RankJob(self.config, corpus, plan, bound, run_dir / "checkpoints", run_dir / "epochs", base_dir=base_dir)
        return distributed.launch(self.config.ranks, job)

    def preflight(self) -> upstream.UpstreamIdentity:
        """Check and digest the checkout and model folder (once per backend object)."""
        if self.config.python is not None:
            raise TrainingError(
                f"{ENV_PYTHON}={self.config.python}: running upstream through a separate interpreter is not implemented; "
                "unset it to run upstream in this environment (the backend fixes the known incompatibilities)"
            )
        if self._identity is None:
            self._identity = upstream.preflight(self.config)
        return self._identity

    def identity(self) -> dict[str, Any]:
        """The checkout's imported sources and the model folder's files, by digest (the commit is not identity)."""
        return {"backend": self.name, "upstream_sha256": self.preflight().identity_sha256}

    def _base_weights(self, base_dir: Path | None) -> tuple[Path, str]:
        if base_dir is not None:
            for name in (MERGED_FILE, "llm.pt"):
                if (base_dir / name).is_file():
                    return base_dir / name, sha256_file(base_dir / name)
            raise TrainingError(f"base folder {base_dir} has neither {MERGED_FILE} nor llm.pt; give a merged cosyvoice3 export as the base")
        return self.config.model_dir / "llm.pt", self.preflight().files_sha256["llm.pt"]

    def setup(self, corpus_root: Path, plan: TrainingPlan, base_dir: Path | None) -> TrainingSetup:
        from voxledger.tasks.backends.cosyvoice3 import lora  # PEFT and transformers: only where an adapter is handled

        if plan.mode != "lora" or plan.lora is None or plan.new_speaker is None:
            raise TrainingError(
                f"plan {plan.name}: backend cosyvoice3 trains LoRA adapters only; set mode: lora, a lora section and new_speaker"
            )
        opts = CosyVoice3Options.from_plan_model(plan.name, plan.model)
        distributed.refuse_outside_launch(plan.name)
        self._device = self.config.torch_device()  # one device for every stage: refused here before any work
        self._precision = placement.check_precision(plan.name, plan.precision, self._device)
        identity = self.preflight()
        if opts.expect_upstream_sha256 and opts.expect_upstream_sha256 != identity.identity_sha256:
            raise TrainingError(
                f"plan {plan.name} expects upstream {opts.expect_upstream_sha256}, the checkout and model folder "
                f"digest to {identity.identity_sha256}; point at the expected files or update the plan"
            )
        prep = prepare_corpus(corpus_root, plan.train_splits + plan.cv_splits, plan.speakers, self.config, opts.system_prompt)
        llm, configs = upstream.build_llm(self.config)
        weights, weights_sha = self._base_weights(base_dir)
        upstream.load_llm_strict(llm, upstream.read_llm_state(weights), weights)
        synth.seed_everything(plan.seed)  # loading the yaml reseeded every RNG
        adapted = lora.inject_lora(llm, plan.lora)
        llm.to(self._device)
        self._group = distributed.current_group()
        tokenizer, allowed = configs["get_tokenizer"](), configs["allowed_special"]
        train_files = tuple(f for s in plan.train_splits for f in prep.parquet[s])
        train = data.load_examples(train_files, tokenizer, allowed, opts, plan.speakers)
        cv = data.load_examples(tuple(f for s in plan.cv_splits for f in prep.parquet[s]), tokenizer, allowed, opts, plan.speakers)
        for split_name, loaded in (("train", train), ("cv", cv)):
            if not loaded.examples:
                raise TrainingError(f"plan {plan.name}: no {split_name} utterance passed the filters (dropped: {loaded.dropped})")
        own = [e for e in train.examples if e.speaker == plan.new_speaker]
        if not own:
            raise TrainingError(f"plan {plan.name}: new_speaker {plan.new_speaker!r} has no training utterance after filtering")
        prompt = choose_prompt(own, opts.prompt_min_duration_s)
        audio, rel = data.audio_bytes(train_files, prompt.utt)
        self._prompt = (audio, "prompt" + Path(rel).suffix.lower())
        self._train, self._frames_per_batch = train.examples, plan.frames_per_batch
        self._seed, self._step = plan.seed, 0
        if self._group is not None:
            self._check_shards(plan)
            self._ddp = distributed.wrap(llm, self._device)
        self._meta = {
            "format": FORMAT,
            "new_speaker": plan.new_speaker,
            "lora": plan.lora.model_dump(mode="json"),
            "options": opts.model_dump(mode="json"),
            "base_weights_sha256": weights_sha,
            "lm_dtype": self._precision.lm_dtype,  # what the LM computes in (its weights are float32 always)
            "upstream_patches": list(compat.PATCHES),
            "upstream": {"identity_sha256": identity.identity_sha256, **identity.model_dump(mode="json")},
            "prompt": {"utt": prompt.utt, "text": prompt.text, "file": self._prompt[1], "duration_s": prompt.duration_s},
        }
        if plan.precision != "fp32":  # an fp32 run's adapter_config.json keeps the bytes it always had
            self._meta["precision"] = plan.precision
        cv_batches = [
            data.collate([cv.examples[i] for i in idx])
            for idx in data.batch_indices(cv.examples, plan.frames_per_batch, 0, 0, shuffle=False)
        ]
        effective = {
            "cosyvoice3": self._meta,
            "device": str(self._device),
            "device_setting": self.config.device,
            "precision_effective": plan.precision,
            "precision": self._precision.record(),
            "frames_per_batch": plan.frames_per_batch,
            "data_parallel": self._group.record(plan.frames_per_batch)
            if self._group
            else {"world_size": 1, "backend": None, "effective_frames_per_batch": plan.frames_per_batch},
            "lora_target_regex": lora.target_regex(plan.lora.targets),
            "adapted_modules": adapted,
            "base_weights": weights.name if base_dir is None else f"base/{weights.name}",
            "prepared_sha256": prep.digest,
            "prepared_utterances": prep.utterances,
            "train_utterances": len(train.examples),
            "cv_utterances": len(cv.examples),
            "dropped": {"train": train.dropped, "cv": cv.dropped},
            "mix_ratio": list(getattr(llm, "mix_ratio", [])),
            "max_epochs": plan.max_epochs,
            "upstream_yaml_max_epoch_ignored": configs.get("train_conf", {}).get("max_epoch"),
        }
        return TrainingSetup(model=llm, effective_config=effective, n_train_utterances=len(train.examples), cv_batches=cv_batches)

    def epoch_batches(self, epoch: int, seed: int) -> list[dict[str, Any]]:
        """The epoch's batches; in a data-parallel run this rank's share of each (`distributed`), with the
        positions of its utterances in the whole batch (``positions``, ``full_size``) for upstream's draws."""
        if not self._train:
            raise TrainingError("setup() must run before epoch_batches()")
        groups = data.batch_indices(self._train, self._frames_per_batch, epoch, seed)
        if self._group is None:
            return [data.collate([self._train[i] for i in idx]) for idx in groups]
        batches = []
        for idx in groups:
            ordered = sorted((self._train[i] for i in idx), key=lambda e: -e.duration_s)  # collate's (stable) order
            positions = distributed.shard_positions(len(ordered), self._group)
            batch = data.collate([ordered[p] for p in positions])
            batches.append({**batch, "positions": positions, "full_size": len(ordered)})
        return batches

    def _check_shards(self, plan: TrainingPlan) -> None:
        """Every batch of every epoch must give each rank at least one utterance (DDP steps all ranks together)."""
        sizes = [[len(idx) for idx in data.batch_indices(self._train, plan.frames_per_batch, e, plan.seed)] for e in range(plan.max_epochs)]
        distributed.check_shards(plan.name, plan.frames_per_batch, sizes, self._group.world_size if self._group else 1)

    def _step_random(self, batch: dict[str, Any]) -> random.Random:
        """Upstream's generator for this step: (seed, step)'s; a rank of a data-parallel run gets that generator's
        draws for its own utterances (`distributed.ReplayRandom`), so each utterance is laid out as in one process."""
        own = random.Random(rng.derived_seed("cosyvoice3-upstream-random", self._seed, self._step))
        if "positions" not in batch:
            return own
        draws = [own.random() for _ in range(batch["full_size"])]
        return distributed.ReplayRandom([draws[p] for p in batch["positions"]])

    def train_step(
        self, model: torch.nn.Module, batch: dict[str, Any], optimizer: torch.optim.Optimizer, lr: float, max_grad_norm: float
    ) -> dict[str, float]:
        model.train()
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        # every draw of this step is a function of (seed, step): upstream's module-level random.random()
        # goes to a private generator, torch's (dropout) is reseeded; other threads' draws cannot reach either
        torch.manual_seed(rng.derived_seed("cosyvoice3-torch", self._seed, self._step) % 2**63)
        if self._ddp is None:
            with rng.private_random(self._step_random(batch)), self._precision.compute():
                out = model(batch, self._device)
            loss = out["loss"]
        else:  # DDP averages the ranks' gradients in backward: each loss weighted by its share of the batch
            with rng.private_random(self._step_random(batch)), self._precision.compute(), distributed.counting_targets() as counts:
                out = self._ddp(batch, self._device)
            loss = out["loss"] * distributed.share_of_batch(model, sum(counts), len(batch["utts"]), self._device)
        self._step += 1
        if not torch.isfinite(loss):
            raise TrainingError(f"non-finite loss {float(loss)} on utterances {batch['utts'][:3]}; lower the learning rate")
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
        optimizer.step()
        value = float(loss.detach())
        if self._group is not None:  # the curve is the run's, not rank 0's share
            value = distributed.mean_over_ranks(value, self._device)
        return {"loss": value, "grad_norm": float(grad_norm), "acc": float(out.get("acc", float("nan")))}

    def cv_loss(self, model: torch.nn.Module, batches: list[dict[str, Any]]) -> float:
        """Utterance-weighted mean loss (as upstream's CV); upstream's draws come from a private generator
        seeded with `CV_RANDOM_SEED` (python's process-wide one is neither read nor advanced)."""
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad(), rng.private_random(random.Random(CV_RANDOM_SEED)), self._precision.compute():
            for batch in batches:
                total += float(model(batch, self._device)["loss"]) * len(batch["utts"])
                count += len(batch["utts"])
        return total / max(count, 1)

    def rng_state(self) -> dict[str, Any]:
        """What decides the next step's draws: the plan's seed and the steps taken (saved in checkpoints)."""
        state: dict[str, Any] = {"format": RNG_FORMAT, "seed": self._seed, "step": self._step}
        if self._group is not None:  # the shards and draws depend on it (a one-process state keeps its old shape)
            state["world_size"] = self._group.world_size
        return state

    def load_rng_state(self, state: dict[str, Any]) -> None:
        """Inverse of `rng_state` (a resumed run continues the uninterrupted run's draws).

        Raises:
            TrainingError: the state is not this backend's (a checkpoint of another backend or version).
        """
        if state.get("format") != RNG_FORMAT:
            raise TrainingError(f"checkpoint RNG state {state} is not {RNG_FORMAT}; start a new run (it cannot be resumed exactly)")
        world = self._group.world_size if self._group else 1
        if int(state.get("world_size", 1)) != world:
            raise TrainingError(
                f"the checkpoint was written by a run of {state.get('world_size', 1)} rank(s), this one has {world}: each rank's "
                "share of every batch depends on it, so it cannot be resumed exactly; resume with the same number of ranks or start a new run"
            )
        self._seed, self._step = int(state["seed"]), int(state["step"])

    def batch_frames(self, batch: dict[str, Any]) -> tuple[int, int]:
        return data.batch_frames(batch)

    def trainable_state(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        from voxledger.tasks.backends.cosyvoice3 import lora  # PEFT and transformers: only where an adapter is handled

        return lora.adapter_state(model)

    def load_trainable_state(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        from voxledger.tasks.backends.cosyvoice3 import lora  # PEFT and transformers: only where an adapter is handled

        lora.load_adapter_state(model, state)

    def _write_prompt(self, out_dir: Path, meta: dict[str, Any], prompt: tuple[bytes, str]) -> None:
        (out_dir / prompt[1]).write_bytes(prompt[0])
        (out_dir / (MERGED_CONFIG if meta["format"] == MERGED_FORMAT else ADAPTER_CONFIG)).write_bytes(canonical_bytes(meta))

    def export(self, model: torch.nn.Module, out_dir: Path) -> None:
        from voxledger.tasks.backends.cosyvoice3 import lora  # PEFT and transformers: only where an adapter is handled

        if self._meta is None or self._prompt is None:
            raise TrainingError("setup() must run before export()")
        out_dir.mkdir(parents=True, exist_ok=True)
        save_deterministic(lora.adapter_state(model), out_dir / ADAPTER_FILE, metadata={"format": FORMAT})
        self._write_prompt(out_dir, self._meta, self._prompt)

    def load_for_inference(self, base_dir: Path | None, artifact_dir: Path, runtime: str) -> synth.CosyVoice3Loaded:
        """runtime 'base' (the pretrained LLM; a bundled prompt is used when ``artifact_dir`` has
        one), 'adapter' (LoRA layers live), 'merged' (folded in memory) or 'merged_export'
        (``artifact_dir`` is an `export_merged` folder)."""
        from voxledger.tasks.backends.cosyvoice3 import lora  # PEFT and transformers: only where an adapter is handled

        if runtime not in RUNTIMES:
            raise TrainingError(f"unknown runtime {runtime!r}; choose one of {RUNTIMES}")
        meta = None
        for name in (ADAPTER_CONFIG, MERGED_CONFIG):
            if (artifact_dir / name).is_file():
                meta = json.loads((artifact_dir / name).read_text(encoding="utf-8"))
        if runtime != "base" and meta is None:
            raise TrainingError(f"{artifact_dir} has no {ADAPTER_CONFIG} or {MERGED_CONFIG}; runtime {runtime!r} needs a cosyvoice3 export")
        self.preflight()
        upstream.import_upstream(self.config.checkout_dir)
        with upstream.upstream_code("importing cosyvoice.cli.cosyvoice"):
            from cosyvoice.cli.cosyvoice import CosyVoice3

            compat.patch_audio_loading()
        device = self.config.torch_device()
        placement.check_inference_device(device, placement.upstream_inference_device())  # before building: refused in one line
        with upstream.upstream_code(f"building upstream's CosyVoice3 from {self.config.model_dir}"):
            cosy = CosyVoice3(str(self.config.model_dir))
        placement.check_inference_device(device, cosy.model.device)
        llm = cosy.model.llm
        weights, sha = self._base_weights(base_dir)
        if runtime in ("adapter", "merged") and sha != meta["base_weights_sha256"]:  # type: ignore[index]
            raise DigestMismatchError(
                f"{artifact_dir} was trained on LLM weights {meta['base_weights_sha256']}, "  # type: ignore[index]
                f"but {weights} has sha256 {sha}; load it with the base it was trained on"
            )
        if runtime == "merged_export":
            weights = artifact_dir / MERGED_FILE
        # upstream loaded llm.pt into a partly bf16 module (rounding it): one dtype first, then load again
        compat.to_lm_dtype(llm)
        upstream.load_llm_strict(llm, upstream.read_llm_state(weights), weights)
        upstream.check_lm_dtype(llm, str(weights))
        compat.patch_decoding(llm)
        if runtime in ("adapter", "merged"):
            lora.inject_lora(llm, LoraSettings(**meta["lora"]))  # type: ignore[index]
            lora.load_adapter_state(llm, load_file(str(artifact_dir / ADAPTER_FILE)))
            if runtime == "merged":
                lora.merge_in_place(llm)
        llm.eval()
        prompt = meta["prompt"] if meta else None
        return synth.CosyVoice3Loaded(
            cosy=cosy,
            runtime=runtime,
            prompt_wav=artifact_dir / prompt["file"] if prompt else None,
            prompt_text=prompt["text"] if prompt else None,
            meta=meta,
            system_prompt=meta["options"]["system_prompt"] if meta else DEFAULT_SYSTEM_PROMPT,
        )

    def export_merged(self, loaded: synth.CosyVoice3Loaded, out_dir: Path) -> None:
        """Write ``llm.safetensors`` (adapters folded in; ``llm.pt``'s keys, tied weights stored once and named in its
        ``tied`` metadata), the prompt and its config."""
        from voxledger.tasks.backends.cosyvoice3 import lora  # PEFT and transformers: only where an adapter is handled

        if loaded.meta is None or loaded.prompt_wav is None or loaded.runtime == "base":
            raise TrainingError(
                f"export_merged needs a model loaded from a cosyvoice3 export with runtime adapter, merged or "
                f"merged_export (got runtime {loaded.runtime!r})"
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        llm = loaded.cosy.model.llm
        state, tied = lora.merged_state_dict(llm), lora.tied_keys(llm)
        for alias, kept in tied.items():  # stored once, as llm.pt stores it (the embedding / LM head pair)
            if not torch.equal(state[alias], state[kept]):
                raise TrainingError(f"tied weights {alias} and {kept} differ after merging; the adapters must not touch them")
            del state[alias]
        metadata = {"format": MERGED_FORMAT, upstream.TIED_METADATA: json.dumps(dict(sorted(tied.items())), separators=(",", ":"))}
        save_deterministic(state, out_dir / MERGED_FILE, metadata=metadata)
        self._write_prompt(out_dir, {**loaded.meta, "format": MERGED_FORMAT}, (loaded.prompt_wav.read_bytes(), loaded.prompt_wav.name))

    def synthesize(
        self, loaded: synth.CosyVoice3Loaded, text: str, speaker: str, seed: int, settings: dict[str, Any]
    ) -> tuple[np.ndarray, int]:
        self._check_voice(loaded, speaker, settings)
        return synth.synthesize(loaded, text, seed, settings)

    @staticmethod
    def _check_voice(loaded: synth.CosyVoice3Loaded, speaker: str, settings: dict[str, Any]) -> None:
        voice = loaded.meta["new_speaker"] if loaded.meta else None
        if "prompt_wav" not in settings and voice is not None and speaker != voice:
            raise SynthesisError(
                f"the bundled prompt is speaker {voice!r}, not {speaker!r}; pass settings['prompt_wav'] and 'prompt_text' for another voice"
            )

    def adapter_speaker(self, artifact_dir: Path) -> str:
        path = artifact_dir / ADAPTER_CONFIG
        if not path.is_file():
            raise TrainingError(f"no {ADAPTER_CONFIG}, so it is no LoRA checkpoint of the cosyvoice3 backend")
        return str(json.loads(path.read_text(encoding="utf-8"))["new_speaker"])

    def peft_files(self, adapter: dict[str, bytes], effective_config: dict[str, Any], base_model: str) -> tuple[dict[str, bytes], str]:
        """The LLM adapter as a folder ``peft.PeftModel.from_pretrained`` loads onto upstream's ``CosyVoice3LM``
        (``cosy.model.llm``), and a snippet that loads it: the same LoRA config and tensors, PEFT's names.
        The voice prompt is no part of it (the model card names the package that holds it)."""
        from safetensors.torch import load

        from voxledger.tasks.backends.cosyvoice3 import lora  # PEFT and transformers: only where an adapter is handled
        from voxledger.tasks.tensorio import deterministic_bytes

        meta = json.loads(adapter[ADAPTER_CONFIG])
        config = lora.peft_config(LoraSettings(**meta["lora"]), base_model)
        files = {
            "adapter_config.json": (json.dumps(config, indent=2, sort_keys=True) + "\n").encode(),
            "adapter_model.safetensors": deterministic_bytes(lora.peft_state(load(adapter[ADAPTER_FILE])), metadata={"format": "pt"}),
        }
        loading = (
            "from peft import PeftModel\n"
            "from voxledger.tasks.backends.cosyvoice3.backend import CosyVoice3Backend\n\n"
            "# the base: upstream's CosyVoice3 with the LLM weights named by base_model_name_or_path (VOXLEDGER_COSYVOICE_*)\n"
            'llm = CosyVoice3Backend().load_for_inference(None, "PACKAGE/adapter", "base").cosy.model.llm\n'
            'llm = PeftModel.from_pretrained(llm, "THIS_FOLDER")\n'
        )
        return files, loading

    def deliverables(self) -> dict[str, MemberRole]:
        """The adapter, its config and the bundled prompt (one file, its suffix the corpus file's)."""
        return {ADAPTER_FILE: "adapter_weights", ADAPTER_CONFIG: "adapter_config", **dict.fromkeys(VOICE_PROMPT_FILES, "voice_prompt")}

    def package_components(self, bound: dict[str, Any], effective_config: dict[str, Any]) -> ComponentDigests:
        """LLM weights the adapter was trained on (``llm.pt``, or a stored base tree), the speech tokenizer, the vocoder,
        the front end (prompt encoders and text normaliser) and the whole upstream identity, from the run's records."""
        meta = effective_config.get("cosyvoice3")
        if not isinstance(meta, dict) or "upstream" not in meta:
            raise TrainingError("the training run records no cosyvoice3 settings (effective_config.cosyvoice3); it is not a cosyvoice3 run")
        up, files = meta["upstream"], meta["upstream"]["files_sha256"]
        frontend = canonical_digest(
            {
                "campplus.onnx": files["campplus.onnx"],
                "speech_tokenizer_v3.onnx": files["speech_tokenizer_v3.onnx"],
                "text_frontend": up["text_frontend"],
            }
        )
        return ComponentDigests(
            base_model_sha256=bound.get("base_sha256") or meta["base_weights_sha256"],
            tokenizer_sha256=files["speech_tokenizer_v3.onnx"],
            vocoder_sha256=files["hift.pt"],
            frontend_sha256=frontend,
            backend_identity_sha256=up["identity_sha256"],
            note=self.component_note(),
        )

    def check_base(self, components: ComponentDigests, base_dir: Path | None) -> None:
        """The configured checkout and model folder must digest to the package's upstream identity; a stored base
        folder must hold the LLM weights it names."""
        identity = self.preflight()
        if components.backend_identity_sha256 and identity.identity_sha256 != components.backend_identity_sha256:
            raise DigestMismatchError(
                f"the package runs on upstream identity {components.backend_identity_sha256}, the configured checkout and model "
                f"folder ({self.config.checkout_dir}, {self.config.model_dir}) digest to {identity.identity_sha256}; point "
                "VOXLEDGER_COSYVOICE_DIR / VOXLEDGER_COSYVOICE_MODEL_DIR at the files it was trained with"
            )
        if base_dir is not None:
            from voxledger.schemas.canonical import sha256_hex
            from voxledger.stores.trees import build_manifest, manifest_bytes

            tree = sha256_hex(manifest_bytes(build_manifest(base_dir)))
            if tree != components.base_model_sha256:
                raise DigestMismatchError(f"base folder {base_dir} is tree {tree}, the package needs {components.base_model_sha256}")
        elif identity.files_sha256["llm.pt"] != components.base_model_sha256:
            raise DigestMismatchError(
                f"the package's adapter was trained on LLM weights {components.base_model_sha256}, the model folder's llm.pt is "
                f"{identity.files_sha256['llm.pt']}; give the stored base it was trained on"
            )

    def inference_settings(self) -> tuple[int, dict[str, Any]]:
        """24 kHz; zero-shot synthesis from the prompt bundled with the adapter (`synth.SynthesisSettings` defaults)."""
        return synth.SAMPLE_RATE_HZ, synth.SynthesisSettings().model_dump(mode="json", exclude_none=True)

    def component_note(self) -> str:
        return (
            "cosyvoice3 backend: the text tokenizer, speech tokenizer, flow and vocoder are the upstream model folder's files, "
            "digested by the preflight into the training run's backend identity (upstream_sha256); the package holds only the "
            "LoRA weights of the LLM."
        )

    def synthesis_stages(self) -> tuple[SynthesisStage, ...]:
        """Speech tokens, LLM log-probabilities (teacher-forced), mel, pcm (`stages.py`)."""
        return stages.STAGES

    def stage_outputs(
        self,
        loaded: synth.CosyVoice3Loaded,
        text: str,
        speaker: str,
        seed: int,
        settings: dict[str, Any],
        feed: dict[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        self._check_voice(loaded, speaker, settings)
        return stages.stage_outputs(loaded, text, seed, settings, feed)

    def shipped_base(self) -> Path | None:
        """None: the base is the user's upstream model folder (released weights are not shipped)."""
        return None

    def plan_recipe(self, mode: Literal["full", "lora"]) -> PlanRecipe:
        """LoRA only: `LORA_OPTIM` / `LORA_SETTINGS`, the settings docs/cosyvoice3.md gives (upstream's SFT batch of 2000 mel frames,
        the LM in fp32); not measured on the released weights, which these machines cannot obtain."""
        if mode == "full":
            raise BackendCapabilityError(
                "backend cosyvoice3 trains LoRA adapters only: generated plans cannot name it for a base; it adapts the model "
                "folder's own LLM (docs/cosyvoice3.md)"
            )
        return PlanRecipe(
            frames_per_batch=LORA_FRAMES_PER_BATCH,
            precision="fp32",
            optim=dict(LORA_OPTIM),
            lora=dict(LORA_SETTINGS),
            note=LORA_NOTE,
        )
