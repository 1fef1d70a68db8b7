"""ECAPA speaker embeddings on real espeak-ng voices, and the checkpoint digest check."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.metrics import SpeakerSpec
from voxledger.tasks.metrics.speaker import SpeakerEncoder, cosine

SENTENCES = [
    "The weather is nice today, so we will walk to the park.",
    "Thank you for coming to the meeting this afternoon.",
    "My name is John and I live in a small house near the river.",
]
VOICES = {"male": ("en-us", 50), "female": ("en+f3", 70)}


@pytest.fixture(scope="module")
def embeddings(speaker_encoder: Any, speak: Callable[..., np.ndarray]) -> dict[str, list[np.ndarray]]:
    return {name: [speaker_encoder.embed(speak(s, voice, pitch)) for s in SENTENCES] for name, (voice, pitch) in VOICES.items()}


def test_same_voice_is_closer_than_different_voice(embeddings: dict[str, list[np.ndarray]]) -> None:
    same = [cosine(a, b) for v in embeddings.values() for a, b in itertools.combinations(v, 2)]
    cross = [cosine(a, b) for a in embeddings["male"] for b in embeddings["female"]]
    # FACTS.md measured same-voice 0.87 (min 0.81) and en-us vs en+f3 0.20 on espeak.
    assert min(same) > max(cross)
    assert np.mean(same) - np.mean(cross) > 0.3


def test_embedding_shape_and_determinism(
    speaker_encoder: Any, speak: Callable[..., np.ndarray], embeddings: dict[str, list[np.ndarray]]
) -> None:
    again = speaker_encoder.embed(speak(SENTENCES[0], *VOICES["male"]))
    assert again.shape == (192,) and again.dtype == np.float32
    np.testing.assert_allclose(again, embeddings["male"][0], rtol=1e-5, atol=1e-6)


def test_checkpoint_digest_mismatch_names_both_digests() -> None:
    wrong = "f" * 64
    with pytest.raises(EvaluationError) as info:
        SpeakerEncoder(SpeakerSpec(checkpoint_sha256=wrong))
    message = str(info.value)
    assert "embedding_model.ckpt" in message and wrong in message
    assert SpeakerSpec().checkpoint_sha256 in message


def test_cosine() -> None:
    assert cosine(np.array([1.0, 2.0]), np.array([2.0, 4.0])) == pytest.approx(1.0)
    assert cosine(np.array([1.0, 0.0]), np.array([-1.0, 0.0])) == pytest.approx(-1.0)
    with pytest.raises(EvaluationError, match="zero-norm"):
        cosine(np.zeros(3), np.ones(3))
    with pytest.raises(EvaluationError, match="shapes"):
        cosine(np.ones(3), np.ones(4))
