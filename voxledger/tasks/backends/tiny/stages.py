"""Tiny's synthesis split into stages, for packaging probes and stage attribution.

The stages are durations (phoneme frame counts), mel (decoded with those durations) and pcm
(Griffin-Lim on that mel). `stage_outputs` runs the same computation as `synth.synthesize`, so
its pcm equals the backend's waveform bit for bit; ``feed`` hands a stage another runtime's
output as its input, which is how attribution blames a gap on the stage that causes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from voxledger.tasks.backends.base import SynthesisStage
from voxledger.tasks.backends.tiny.audio import vocode
from voxledger.tasks.backends.tiny.synth import base_model, phonemize

STAGES: tuple[SynthesisStage, ...] = (
    SynthesisStage(name="durations", kind="tokens", dump="tokens"),
    SynthesisStage(name="mel", kind="mel", dump="mel"),
    SynthesisStage(name="pcm", kind="pcm", dump="pcm"),
)


def stage_outputs(
    loaded: Any, text: str, speaker: str, seed: int, settings: dict[str, Any], feed: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """Durations (int32), mel (float32, frames x 80) and pcm (float32) of one utterance.

    Durations are ``feed['durations']`` when given, else espeak's timing when
    ``settings['durations'] == 'espeak'``, else the model's prediction; pcm vocodes
    ``feed['mel']`` when given.
    """
    feed, source = feed or {}, settings.get("durations", "predicted")
    if source not in ("predicted", "espeak"):
        raise ValueError(f"durations must be 'predicted' or 'espeak', got {source!r}")
    base = base_model(loaded.model)
    spoken = phonemize(text, base.config.language)
    ids = torch.tensor([[base.config.phoneme_id(p) for p in spoken.phonemes]])
    spk = torch.tensor([base.speaker_index(speaker)])
    if "durations" in feed:
        given: torch.Tensor | None = torch.from_numpy(feed["durations"]).long().unsqueeze(0)
    elif source == "espeak":
        given = torch.from_numpy(spoken.espeak_durations).unsqueeze(0)
    else:
        given = None
    loaded.model.eval()
    torch.manual_seed(seed)
    mel_norm, durations = base.infer(ids, spk, given)
    mel = loaded.norm.denormalize(mel_norm[0].numpy()).astype(np.float32)
    pcm = vocode(feed.get("mel", mel), seed=seed).astype(np.float32)
    return {"durations": durations[0].numpy().astype(np.int32), "mel": mel, "pcm": pcm}
