"""DNSMOS predictions on real espeak-ng speech: noise lowers them; models are digest-checked."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.metrics import MosSpec
from voxledger.tasks.metrics.mos import predict_mos

# 2.7 s of speech: speechmos doubles a short clip until it reaches 9.01 s (here 10.9 s) and
# scores each 9.01 s window hopped by 1 s, so this clip costs two windows (~0.5 s).
TEXT = "Open the window and let the fresh air into the room."


def test_white_noise_lowers_predicted_mos(speak: Callable[..., np.ndarray]) -> None:
    clean = speak(TEXT)
    rng = np.random.default_rng(1234)
    noise = rng.standard_normal(clean.size) * float(np.sqrt(np.mean(clean**2))) * 10 ** (-5 / 20)
    noisy = np.clip(clean + noise, -1.0, 1.0).astype(np.float32)  # 5 dB SNR
    a, b = predict_mos(clean), predict_mos(noisy)
    assert a.kind == b.kind == "predicted_mos"
    # Measured on this clip: OVRL 2.77 -> 1.93, BAK 3.62 -> 1.85 (SIG barely moves: 3.22 -> 3.16).
    assert b.predicted_ovrl < a.predicted_ovrl - 0.5
    assert b.predicted_bak < a.predicted_bak - 1.0
    for value in (a.predicted_sig, a.predicted_bak, a.predicted_ovrl, a.predicted_p808):
        assert 1.0 <= value <= 5.0


def test_prediction_is_deterministic(speak: Callable[..., np.ndarray]) -> None:
    wav = speak(TEXT)
    assert predict_mos(wav) == predict_mos(wav.copy())


def test_model_digest_mismatch_names_both_digests(speak: Callable[..., np.ndarray]) -> None:
    wrong = "a" * 64
    with pytest.raises(EvaluationError) as info:
        predict_mos(speak(TEXT), MosSpec(primary_model_sha256=wrong))
    assert "sig_bak_ovr.onnx" in str(info.value) and wrong in str(info.value)


def test_overshoot_is_refused_not_clipped() -> None:
    with pytest.raises(EvaluationError, match="peak 1.2000 exceeds 1.0"):
        predict_mos(np.full(16000, 1.2, dtype=np.float32))
