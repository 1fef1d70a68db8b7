"""Text -> 16 kHz audio with a trained tiny TTS model.

Text becomes phonemes through espeak-ng (`voxledger.tasks.corpus.espeak`, the voice of the model's
language, as in training), which
also yields espeak's own timing for them. Two duration sources:

- ``"predicted"`` (default): the model's duration predictor, conditioned on the speaker. It is
  the only choice that follows a speaker's own pace, and the only one that does not assume the
  training audio was espeak-timed; it needs no oracle.
- ``"espeak"``: espeak's phoneme timing for the text (the timing the demo corpus was made with),
  useful to separate duration errors from spectral ones.

Synthesis is bit-repeatable on CPU: the network runs in eval mode without sampling, and the
vocoder's Griffin-Lim phase comes from ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import torch
from torch import nn

from voxledger.tasks.backends.tiny.align import espeak_voice, frame_durations
from voxledger.tasks.backends.tiny.audio import SAMPLE_RATE_HZ, NormStats, frame_count, vocode
from voxledger.tasks.backends.tiny.model import TinyTTS
from voxledger.tasks.corpus import espeak

DurationSource = Literal["predicted", "espeak"]


@dataclass(frozen=True)
class Phonemized:
    """Phonemes of a text and espeak's frame durations for them (16 kHz, hop 256)."""

    phonemes: tuple[str, ...]
    espeak_durations: np.ndarray


def phonemize(text: str, language: str = "en") -> Phonemized:
    """espeak-ng phonemes (leading silence first) and their frame counts for ``text`` in ``language``."""
    spoken = espeak.resample_synthesis(espeak.synthesize(text, voice=espeak_voice(language)), SAMPLE_RATE_HZ)
    ends = [seg.end_sample for seg in spoken.phonemes]
    return Phonemized(
        phonemes=tuple(seg.phoneme for seg in spoken.phonemes),
        espeak_durations=frame_durations(ends, frame_count(len(spoken.audio))),
    )


def base_model(model: nn.Module) -> TinyTTS:
    """The `TinyTTS` inside ``model`` (itself, or the base of its PEFT wrapper)."""
    base = cast(Any, model).get_base_model() if hasattr(model, "get_base_model") else model
    if not isinstance(base, TinyTTS):
        raise TypeError(f"expected a TinyTTS or its PEFT wrapper, got {type(base).__name__}")
    return base


def synthesize_mel(
    model: nn.Module,
    norm_stats: NormStats,
    text: str,
    speaker: str,
    durations: DurationSource = "predicted",
) -> np.ndarray:
    """Log-mel frames ``(T, 80)`` (denormalised) for ``text`` in ``speaker``'s voice.

    Raises:
        KeyError: unknown speaker, or a phoneme outside the model's inventory.
        ValueError: empty text or an unknown ``durations`` source.
    """
    if durations not in ("predicted", "espeak"):
        raise ValueError(f"durations must be 'predicted' or 'espeak', got {durations!r}")
    base = base_model(model)
    spoken = phonemize(text, base.config.language)
    ids = torch.tensor([[base.config.phoneme_id(p) for p in spoken.phonemes]])
    speaker_ids = torch.tensor([base.speaker_index(speaker)])
    given = torch.from_numpy(spoken.espeak_durations).unsqueeze(0) if durations == "espeak" else None
    was_training = model.training
    model.eval()
    try:
        mel, _ = base.infer(ids, speaker_ids, given)
    finally:
        model.train(was_training)
    return norm_stats.denormalize(mel[0].numpy())


def synthesize(
    model: nn.Module,
    norm_stats: NormStats,
    text: str,
    speaker: str,
    seed: int,
    durations: DurationSource = "predicted",
) -> np.ndarray:
    """16 kHz float32 audio for ``text``; identical samples for identical inputs and ``seed``.

    ``model`` is a `TinyTTS` or its PEFT wrapper (adapters active); see `synthesize_mel`.
    """
    return vocode(synthesize_mel(model, norm_stats, text, speaker, durations), seed=seed)
