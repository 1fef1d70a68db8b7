"""Synthesis through upstream's ``CosyVoice3`` with seeds, segment concatenation and thread checks.

Upstream's ``inference_zero_shot`` / ``inference_instruct2`` are generators yielding one
``{'tts_speech': (1, L)}`` per normalised text segment; they are concatenated here. Three
upstream behaviours are guarded against:

- constructing ``CosyVoice3`` reseeds the global RNGs (its yaml), so every call seeds python,
  numpy and torch right before it starts;
- the speech-token LLM runs in a background thread whose exceptions are only printed, and the
  caller still gets a very short wav (~0.04 s): thread exceptions raised during the call are
  captured (``threading.excepthook``) and turned into a `SynthesisError` carrying the cause;
  a wav shorter than `MIN_WAV_S` without a captured exception is refused as well;
- CosyVoice3 needs ``<|endofprompt|>`` in the prompt text: a prompt transcript without it is
  prefixed with the system prompt and the marker (``"You are a helpful assistant.<|endofprompt|>..."``).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, ValidationError

from voxledger.schemas.base import Frozen
from voxledger.schemas.errors import SynthesisError, validation_lines
from voxledger.tasks.backends.cosyvoice3.config import (
    DEFAULT_SYSTEM_PROMPT,
    END_OF_PROMPT,
    instruct_text,
)

SAMPLE_RATE_HZ = 24000
MIN_WAV_S = 0.1
_HOOK_LOCK = threading.Lock()


class SynthesisSettings(Frozen):
    """Per-call settings; prompt fields default to the prompt bundled with the model."""

    mode: Literal["zero_shot", "instruct2"] = "zero_shot"
    prompt_wav: str | None = None
    prompt_text: str | None = None
    instruction: str | None = None
    text_frontend: bool = True
    speed: float = Field(default=1.0, gt=0)


@dataclass
class CosyVoice3Loaded:
    """An upstream ``CosyVoice3`` ready to speak, plus the default voice prompt."""

    cosy: Any
    runtime: str
    prompt_wav: Path | None
    prompt_text: str | None
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    meta: dict[str, Any] | None = None


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextmanager
def capture_thread_errors() -> Iterator[list[BaseException]]:
    """Collect exceptions raised in any thread while the block runs (one block at a time).

    Every thread's exception counts, not only upstream's ``llm_job`` thread: a failure elsewhere
    in the process during a synthesis call also fails the call, which errs on the safe side.
    """
    errors: list[BaseException] = []

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            args.exc_value.add_note(f"raised in thread {args.thread.name if args.thread else '?'}")
            errors.append(args.exc_value)

    with _HOOK_LOCK:
        previous = threading.excepthook
        threading.excepthook = hook
        try:
            yield errors
        finally:
            threading.excepthook = previous


def _prompt_text(transcript: str, system_prompt: str) -> str:
    return transcript if END_OF_PROMPT in transcript else f"{system_prompt}{END_OF_PROMPT}{transcript}"


def resolve_prompt(loaded: CosyVoice3Loaded, s: SynthesisSettings) -> tuple[str, str]:
    """(prompt audio path, upstream's second argument): the prompt transcript with the system prompt
    and ``<|endofprompt|>`` (zero-shot), or the instruction text (instruct2).

    Raises:
        SynthesisError: no prompt audio, a missing file, or zero-shot without a transcript.
    """
    wav = s.prompt_wav or (str(loaded.prompt_wav) if loaded.prompt_wav else None)
    if wav is None:
        raise SynthesisError("no prompt audio: pass settings['prompt_wav'] (and 'prompt_text'), or load a trained adapter that bundles one")
    if not Path(wav).is_file():
        raise SynthesisError(f"prompt audio {wav} does not exist")
    if s.mode == "instruct2":
        return wav, instruct_text(s.instruction, loaded.system_prompt)
    transcript = s.prompt_text if s.prompt_text is not None else loaded.prompt_text
    if transcript is None:
        raise SynthesisError("zero-shot synthesis needs the prompt's transcript: pass settings['prompt_text']")
    return wav, _prompt_text(transcript, loaded.system_prompt)


def _generator(loaded: CosyVoice3Loaded, text: str, s: SynthesisSettings) -> Iterator[dict[str, torch.Tensor]]:
    wav, prompt = resolve_prompt(loaded, s)
    if s.mode == "instruct2":
        return loaded.cosy.inference_instruct2(text, prompt, wav, stream=False, speed=s.speed, text_frontend=s.text_frontend)  # type: ignore[no-any-return]
    return loaded.cosy.inference_zero_shot(text, prompt, wav, stream=False, speed=s.speed, text_frontend=s.text_frontend)  # type: ignore[no-any-return]


UPSTREAM_FAILURES = (AssertionError, ImportError, IndexError, KeyError, OSError, RuntimeError, TypeError, ValueError)
"""What a failure inside upstream's synthesis code raises (turned into `SynthesisError`)."""


@contextmanager
def upstream_calls(text: str) -> Iterator[None]:
    """Turn a failure inside upstream's synthesis into `SynthesisError` naming the text."""
    try:
        yield
    except SynthesisError:
        raise
    except UPSTREAM_FAILURES as exc:
        raise SynthesisError(f"CosyVoice3 failed for {text!r}: {exc!r}") from exc


def synthesize(loaded: CosyVoice3Loaded, text: str, seed: int, settings: dict[str, Any]) -> tuple[np.ndarray, int]:
    """(float32 mono wav at 24 kHz, 24000) for ``text``.

    Raises:
        SynthesisError: bad settings, no prompt, an upstream failure (in the caller's thread or
            upstream's LLM thread), a non-(1, L) segment, a sample rate other than 24 kHz, or a
            wav under `MIN_WAV_S`.
    """
    try:
        s = SynthesisSettings(**settings)
    except ValidationError as exc:
        raise SynthesisError(
            f"invalid cosyvoice3 synthesis settings {settings}: {'; '.join(validation_lines(exc))}; valid keys: {sorted(SynthesisSettings.model_fields)}"
        ) from exc
    rate = int(loaded.cosy.sample_rate)
    if rate != SAMPLE_RATE_HZ:
        raise SynthesisError(f"CosyVoice3 reports {rate} Hz; expected {SAMPLE_RATE_HZ} (is this a CosyVoice3 model folder?)")
    segments: list[torch.Tensor] = []
    with capture_thread_errors() as errors:
        seed_everything(seed)
        with upstream_calls(text):
            for out in _generator(loaded, text, s):
                speech = out["tts_speech"]
                if speech.dim() != 2 or speech.shape[0] != 1:
                    raise SynthesisError(f"upstream yielded tts_speech of shape {tuple(speech.shape)}; expected (1, L)")
                segments.append(speech.detach().float().cpu())
    wav = torch.cat(segments, dim=1)[0].numpy() if segments else np.zeros(0, dtype=np.float32)
    if errors:
        where = getattr(errors[0], "__notes__", ["in a background thread"])[-1]
        raise SynthesisError(
            f"CosyVoice3's LLM thread failed for {text!r}: {errors[0]!r} {where} (the {wav.size / rate:.3f} s "
            "wav it still returned was discarded)"
        ) from errors[0]
    if wav.size < MIN_WAV_S * rate:
        raise SynthesisError(
            f"CosyVoice3 produced {wav.size / rate:.3f} s of audio for {text!r} (< {MIN_WAV_S} s): "
            "the LLM emitted (almost) no speech tokens"
        )
    return np.ascontiguousarray(wav, dtype=np.float32), rate
