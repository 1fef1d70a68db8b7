"""The plan's precision is honoured and recorded (fp32 unchanged, bf16 autocast, tf32 refused off CUDA); reproduce's band per precision."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from voxledger.schemas.errors import SynthesisError, TrainingError
from voxledger.schemas.reproduction import ReproductionBands
from voxledger.tasks.backends.cosyvoice3 import runtime
from voxledger.tasks.backends.cosyvoice3.backend import CosyVoice3Backend
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.reproduction.compare import cv_curve

from .test_training import make_plan

# 4 steps of make_plan() on the fake model (batches 0, 1, 0, 1 of epoch 0, lr 3e-2, clip 1, one torch thread), measured
# with the backend as it was before precision was read (commit 7d7701f): the adapter's sha256 was 7f75dbb3...206ea then
# and is the same after; the losses below are those of that run. bf16 autocast gave 8.97847, 9.10615, 8.92789, 9.01888.
FP32_LOSSES = [8.978572845458984, 9.106213569641113, 8.927600860595703, 9.018266677856445]
FP32_REL_TOL = 1e-6  # bitwise on the machine it was measured on; other CPU builds may round matmuls differently
BF16_BAND = 1e-2  # |bf16 - fp32| / fp32 loss per step: bf16's unit round-off is 3.9e-3; measured 1e-5..7e-5 here


def _losses(config: CosyVoice3Config, corpus: Path, precision: str) -> tuple[list[float], dict[str, Any]]:
    backend = CosyVoice3Backend(config)
    setup = backend.setup(corpus, make_plan(precision=precision), None)
    optimizer = torch.optim.AdamW([p for p in setup.model.parameters() if p.requires_grad], lr=3e-2)
    batches = backend.epoch_batches(0, 0)
    losses = [backend.train_step(setup.model, batches[i % len(batches)], optimizer, 3e-2, 1.0)["loss"] for i in range(4)]
    return losses, setup.effective_config


@pytest.fixture(scope="module")
def curves(fake_config: CosyVoice3Config, small_corpus: Path) -> dict[str, tuple[list[float], dict[str, Any]]]:
    from voxledger.tasks.threads import torch_threads

    cpu = fake_config.model_copy(update={"device": "cpu"})  # the recorded numbers are the CPU's (a GPU has its own tier)
    with torch_threads(1):
        return {p: _losses(cpu, small_corpus, p) for p in ("fp32", "bf16")}


def test_fp32_is_unchanged(curves: dict[str, tuple[list[float], dict[str, Any]]]) -> None:
    losses, eff = curves["fp32"]
    assert all(abs(a - b) <= FP32_REL_TOL * abs(b) for a, b in zip(losses, FP32_LOSSES, strict=True)), losses
    assert eff["cosyvoice3"]["lm_dtype"] == "float32" and "precision" not in eff["cosyvoice3"]  # adapter_config.json keeps its bytes
    assert eff["precision"] == {"precision": "fp32", "device": "cpu", "autocast": None, "tf32": False, "cpu_native_bf16": None}


def test_bf16_autocast_is_recorded_and_moves_the_curve_within_its_band(curves: dict[str, tuple[list[float], dict[str, Any]]]) -> None:
    (fp32, _), (bf16, eff) = curves["fp32"], curves["bf16"]
    assert eff["cosyvoice3"]["lm_dtype"] == "bfloat16" and eff["cosyvoice3"]["precision"] == "bf16"
    assert eff["precision_effective"] == "bf16" and eff["precision"]["autocast"] == "bfloat16"
    assert eff["precision"]["cpu_native_bf16"] == runtime.cpu_native_bf16()
    rel = [abs(b - a) / abs(a) for a, b in zip(fp32, bf16, strict=True)]
    assert max(rel) <= BF16_BAND, rel
    assert max(rel) > FP32_REL_TOL, rel  # autocast really ran: the curve is not fp32's


def test_precision_and_device_refusals(fake_config: CosyVoice3Config, small_corpus: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("the refusals are those of a machine without CUDA")
    with pytest.raises(TrainingError, match=r"precision tf32 needs a CUDA GPU \(the CPU has no TF32\)"):
        CosyVoice3Backend(fake_config).setup(small_corpus, make_plan(precision="tf32"), None)
    cuda = fake_config.model_copy(update={"device": "cuda"})
    with pytest.raises(TrainingError, match="VOXLEDGER_COSYVOICE_DEVICE=cuda: this torch .* sees no GPU; set it to auto or cpu"):
        CosyVoice3Backend(cuda).setup(small_corpus, make_plan(), None)
    assert fake_config.model_copy(update={"device": "auto"}).torch_device() == torch.device("cpu")
    with pytest.raises(ValidationError, match="offered by backend cosyvoice3 only"):
        make_plan(backend="tiny", precision="tf32")


def test_synthesis_elsewhere_than_the_chosen_device_is_refused() -> None:
    runtime.check_inference_device(torch.device("cpu"), "cpu")
    with pytest.raises(SynthesisError, match=r"runs synthesis on cpu, but VOXLEDGER_COSYVOICE_DEVICE chooses cuda:0 for every stage"):
        runtime.check_inference_device(torch.device("cuda", 0), torch.device("cpu"))


def _run(precision: str, cv: list[float]) -> Any:
    epochs = [SimpleNamespace(cv_loss=x) for x in cv]
    return SimpleNamespace(
        parameters=SimpleNamespace(effective_config={"precision_effective": precision}), result=SimpleNamespace(epochs=epochs, best_epoch=1)
    )


def test_reproduce_judges_a_curve_in_its_precisions_band() -> None:
    bands = ReproductionBands()
    moved = [2.0, 1.0], [2.002, 1.002]  # 1e-3 < 2e-3 < 4e-3: inside bf16's band, outside fp32's
    bf16 = cv_curve(_run("bf16", moved[0]), _run("bf16", moved[1]), bands)
    assert bf16.verdict == "within_bands" and "band 4e-03 (the band of bf16 runs)" in bf16.reason, bf16.reason
    fp32 = cv_curve(_run("fp32", moved[0]), _run("fp32", moved[1]), bands)
    assert fp32.verdict == "differs" and fp32.reason.endswith("band 1e-03"), fp32.reason
