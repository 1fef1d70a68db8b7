"""Predicted MOS with DNSMOS P.835 (SIG, BAK, OVRL) and P.808, through the speechmos package.

The ONNX models ship inside speechmos; both are hashed against ``MosSpec`` before the first
prediction. These are model predictions of listener opinion, trained on noisy and enhanced
speech: useful to catch noise and artefacts, not a substitute for listening tests. speechmos
tiles clips shorter than 9.01 s up to that length, so short clips are scored as loops.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

import numpy as np

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.metrics import MosPrediction, MosSpec
from voxledger.tasks.metrics import verify_engine, verify_model_file
from voxledger.tasks.metrics.validity import require_mono


def default_model_dir() -> Path:
    """``<site-packages>/speechmos/dnsmos_models``, located without importing speechmos.

    Raises:
        EvaluationError: speechmos is not installed.
    """
    spec = importlib.util.find_spec("speechmos")
    if spec is None or not spec.submodule_search_locations:
        raise EvaluationError("package 'speechmos' not found: pip install speechmos==0.0.1.1")
    return Path(next(iter(spec.submodule_search_locations))) / "dnsmos_models"


@cache
def _verified(spec: MosSpec) -> MosSpec:
    """Hash the two ONNX files once per process and spec."""
    verify_engine(spec.engine)
    folder = default_model_dir()
    verify_model_file(folder / "sig_bak_ovr.onnx", spec.primary_model_sha256, spec.name)
    verify_model_file(folder / "model_v8.onnx", spec.p808_model_sha256, spec.name)
    return spec


def predict_mos(wav16k: np.ndarray, spec: MosSpec | None = None) -> MosPrediction:
    """DNSMOS predictions for one 16 kHz mono float clip in [-1, 1].

    Raises:
        EvaluationError: the clip is invalid or peaks above 1.0 (speechmos refuses it; resampling
            can overshoot, so peak-limit first), or a model file does not match the spec.
    """
    spec = _verified(spec or MosSpec())
    audio = require_mono(wav16k, spec.sample_rate_hz, spec.sample_rate_hz, max_peak=1.0)
    from speechmos import dnsmos

    out = dnsmos.run(audio, sr=spec.sample_rate_hz, model_type=spec.model_type)
    return MosPrediction(
        predicted_sig=float(out["sig_mos"]),
        predicted_bak=float(out["bak_mos"]),
        predicted_ovrl=float(out["ovrl_mos"]),
        predicted_p808=float(out["p808_mos"]),
    )
