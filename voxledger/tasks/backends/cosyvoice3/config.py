"""Where the CosyVoice checkout and the pretrained model live, and the plan options of the backend.

Two kinds of settings, kept apart on purpose:

- `CosyVoice3Config`: machine facts (paths, device, cache folder). They come from the
  ``VOXLEDGER_COSYVOICE_*`` settings (`CosyVoice3Config.from_env`) and never enter a plan
  digest, because an absolute path says nothing about the result. What the files *are* is
  established by the preflight (`voxledger.tasks.backends.cosyvoice3.upstream.preflight`),
  which digests them.
- `CosyVoice3Options`: result-changing choices, read from a training plan's ``model`` mapping
  (a closed set of keys: a typo is an error).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from pydantic import Field, ValidationError

from voxledger.schemas.base import Frozen, Sha256
from voxledger.schemas.errors import PlanError, TrainingError, validation_lines
from voxledger.settings import load_settings
from voxledger.tasks.backends.cosyvoice3.runtime import DEVICE_PATTERN, resolve_device

ENV_CHECKOUT = "VOXLEDGER_COSYVOICE_DIR"
ENV_MODEL = "VOXLEDGER_COSYVOICE_MODEL_DIR"
ENV_WORK = "VOXLEDGER_COSYVOICE_WORK_DIR"
ENV_PYTHON = "VOXLEDGER_COSYVOICE_PYTHON"
DEFAULT_MODEL_SUBDIR = "pretrained_models/Fun-CosyVoice3-0.5B"
END_OF_PROMPT = "<|endofprompt|>"
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."


class CosyVoice3Config(Frozen):
    """Paths and device for one machine. Nothing is ever downloaded.

    Attributes:
        checkout_dir: a FunAudioLLM/CosyVoice checkout (with ``third_party/Matcha-TTS``).
        model_dir: the Fun-CosyVoice3-0.5B folder (``cosyvoice3.yaml``, ``llm.pt``, ...).
        campplus_onnx / speech_tokenizer_onnx: the feature extractors; default to the files of
            the same name in ``model_dir``.
        device: ``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N``: the device of every
            stage (`runtime.resolve_device`); synthesis where upstream would place it elsewhere is refused.
        work_dir: cache for prepared data (Kaldi files, parquet) and file digests.
        ranks: data-parallel ranks of a training run (`distributed.launch`); 1 trains in this process.
        python: another interpreter with upstream's own pins (torch 2.3.1, transformers 4.51.3,
            Python 3.10) to run upstream in. A configuration hook only: running through it is
            not implemented, so the backend refuses to start while it is set, and
            ``voxledger cosyvoice3 preflight`` reports its versions.
    """

    checkout_dir: Path
    model_dir: Path
    campplus_onnx: Path | None = None
    speech_tokenizer_onnx: Path | None = None
    device: str = Field(default="auto", pattern=DEVICE_PATTERN)
    work_dir: Path | None = None
    python: Path | None = None
    ranks: int = Field(default=1, ge=1, le=64)

    @property
    def campplus_path(self) -> Path:
        return self.campplus_onnx or self.model_dir / "campplus.onnx"

    @property
    def speech_tokenizer_path(self) -> Path:
        return self.speech_tokenizer_onnx or self.model_dir / "speech_tokenizer_v3.onnx"

    def torch_device(self) -> torch.device:
        """The device of every stage (`runtime.resolve_device`); plain ``cuda`` under torchrun means ``cuda:$LOCAL_RANK``."""
        return resolve_device(self.device)

    @property
    def cache_dir(self) -> Path:
        return self.work_dir or Path.home() / ".cache" / "voxledger" / "cosyvoice3"

    @classmethod
    def from_env(cls) -> CosyVoice3Config:
        """Read the configuration from the ``VOXLEDGER_COSYVOICE_*`` settings (`voxledger.settings`).

        Raises:
            SettingsError: a variable holds a value of the wrong kind (a device other than cpu, cuda or cuda:N).
            TrainingError: ``VOXLEDGER_COSYVOICE_DIR`` is unset, or the values do not make a configuration.
        """
        cv = load_settings().cosyvoice
        if cv.dir is None:
            raise TrainingError(
                f"backend cosyvoice3 needs a CosyVoice checkout: set {ENV_CHECKOUT}=/path/to/CosyVoice "
                f"(git clone --recursive https://github.com/FunAudioLLM/CosyVoice) and put Fun-CosyVoice3-0.5B "
                f"in <checkout>/{DEFAULT_MODEL_SUBDIR} or set {ENV_MODEL}"
            )
        values: dict[str, Any] = {
            "checkout_dir": cv.dir,
            "model_dir": cv.model_dir or cv.dir / DEFAULT_MODEL_SUBDIR,
            "campplus_onnx": cv.campplus_onnx,
            "speech_tokenizer_onnx": cv.speech_tokenizer_onnx,
            "device": cv.device,
            "work_dir": cv.work_dir,
            "python": cv.python,
            "ranks": cv.ranks,
        }
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = "; ".join(validation_lines(exc))
            raise TrainingError(f"invalid cosyvoice3 configuration from the environment: {problems} ({values})") from exc


class CosyVoice3Options(Frozen):
    """Result-changing settings of a cosyvoice3 training plan (its ``model`` mapping).

    The length filters are upstream's ``filter`` defaults from
    ``examples/libritts/cosyvoice3/conf/cosyvoice3.yaml`` (100..6000 frames of 10 ms, 1..200 text
    tokens, text tokens per 10 ms frame within 0.0005..1), except ``max_duration_s``: upstream's
    speech tokenizer refuses audio over 30 s, so longer clips could never be trained on.
    """

    system_prompt: str = Field(default=DEFAULT_SYSTEM_PROMPT, min_length=1)
    min_duration_s: float = Field(default=1.0, ge=0)
    max_duration_s: float = Field(default=30.0, gt=0, le=30.0)
    min_text_tokens: int = Field(default=1, ge=1)
    max_text_tokens: int = Field(default=200, ge=1)
    min_tokens_per_frame: float = Field(default=0.0005, ge=0)
    max_tokens_per_frame: float = Field(default=1.0, gt=0)
    prompt_min_duration_s: float = Field(default=3.0, ge=0)
    expect_upstream_sha256: Sha256 | None = None

    @classmethod
    def from_plan_model(cls, plan_name: str, model: Mapping[str, Any]) -> CosyVoice3Options:
        """Validate a plan's ``model`` mapping; unknown keys are an error naming the valid ones."""
        try:
            return cls(**dict(model))
        except ValidationError as exc:
            problems = "; ".join(validation_lines(exc))
            raise PlanError(
                f"plan {plan_name}: invalid cosyvoice3 'model' settings ({problems}); valid keys: {sorted(cls.model_fields)}"
            ) from exc


def instruct_text(instruction: str | None, system_prompt: str = DEFAULT_SYSTEM_PROMPT) -> str:
    """The v3 instruct string for one utterance; it always ends with ``<|endofprompt|>``.

    An instruction that already contains ``<|endofprompt|>`` is used verbatim; otherwise it is
    appended to the system prompt (upstream's convention:
    ``"You are a helpful assistant. <instruction><|endofprompt|>"``).
    """
    if instruction and END_OF_PROMPT in instruction:
        return instruction
    text = f"{system_prompt} {instruction.strip()}" if instruction and instruction.strip() else system_prompt
    return text + END_OF_PROMPT
