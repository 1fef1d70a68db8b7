"""The cosyvoice3 GPU tier (marker ``cuda``; ``bash tests/gpu/run.sh``): one device for every stage, bf16 and tf32
steps, DDP over NCCL on one GPU, reload of a GPU-trained adapter. Fake tree, tiny widths, 1-2 steps each.
Every test skips without a CUDA device."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from voxledger.schemas.errors import SynthesisError, TrainingError
from voxledger.tasks.backends.cosyvoice3 import lora
from voxledger.tasks.backends.cosyvoice3.backend import ADAPTER_FILE, CosyVoice3Backend
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.backends.cosyvoice3.distributed import RankJob, launch

from .test_data_parallel import BOUND
from .test_training import make_plan

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the cosyvoice3 GPU tier (tests/gpu/run.sh) needs one"),
]
PLAN = make_plan(frames_per_batch=800, max_epochs=1)
BF16_BAND = 1e-2  # per-step |bf16 - fp32| / fp32 loss (bf16's unit round-off is 3.9e-3; the CPU measured 1e-5..7e-5)
TF32_BAND = 1e-2  # TF32 keeps 10 mantissa bits in matmuls (unit round-off 4.9e-4); the loss is a mean over many of them


@dataclass
class Trained:
    config: CosyVoice3Config
    backend: CosyVoice3Backend
    model: torch.nn.Module
    losses: list[float]
    effective: dict[str, Any]


def _train(config: CosyVoice3Config, corpus: Path, precision: str, steps: int = 2) -> Trained:
    backend = CosyVoice3Backend(config)
    setup = backend.setup(corpus, make_plan(frames_per_batch=800, max_epochs=1, precision=precision), None)
    optimizer = torch.optim.AdamW([p for p in setup.model.parameters() if p.requires_grad], lr=3e-2)
    batch = backend.epoch_batches(0, 0)[0]
    losses = [backend.train_step(setup.model, batch, optimizer, 3e-2, 1.0)["loss"] for _ in range(steps)]
    return Trained(config, backend, setup.model, losses, setup.effective_config)


@pytest.fixture(scope="module")
def gpu(fake_config: CosyVoice3Config) -> CosyVoice3Config:
    return fake_config.model_copy(update={"device": "auto"})


@pytest.fixture(scope="module")
def fp32(gpu: CosyVoice3Config, small_corpus: Path) -> Trained:
    return _train(gpu, small_corpus, "fp32")


def test_auto_puts_training_and_synthesis_on_the_gpu_and_cpu_synthesis_is_refused(fp32: Trained, tmp_path: Path) -> None:
    assert fp32.effective["device"] == f"cuda:{torch.cuda.current_device()}" and fp32.effective["device_setting"] == "auto"
    assert {p.device.type for p in fp32.model.parameters()} == {"cuda"}
    fp32.backend.export(fp32.model, tmp_path)
    loaded = fp32.backend.load_for_inference(None, tmp_path, "adapter")
    assert {p.device.type for p in loaded.cosy.model.llm.parameters()} == {"cuda"}
    cpu = CosyVoice3Backend(fp32.config.model_copy(update={"device": "cpu"}))
    with pytest.raises(SynthesisError, match=r"runs synthesis on cuda:\d, but VOXLEDGER_COSYVOICE_DEVICE chooses cpu"):
        cpu.load_for_inference(None, tmp_path, "adapter")


def test_bf16_and_tf32_steps_are_recorded_and_stay_in_their_bands(fp32: Trained, gpu: CosyVoice3Config, small_corpus: Path) -> None:
    if torch.cuda.get_device_capability()[0] < 8 or not torch.cuda.is_bf16_supported():
        pytest.skip("bf16 and tf32 need compute capability 8.0 or newer (their refusal is test_precision.py's)")
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    runs = {"bf16": _train(gpu, small_corpus, "bf16"), "tf32": _train(gpu, small_corpus, "tf32")}
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == saved  # the switches came back
    assert runs["bf16"].effective["cosyvoice3"]["lm_dtype"] == "bfloat16" and runs["bf16"].effective["precision"]["autocast"] == "bfloat16"
    assert runs["tf32"].effective["precision"]["tf32"] is True and runs["tf32"].effective["cosyvoice3"]["lm_dtype"] == "float32"
    for name, band in (("bf16", BF16_BAND), ("tf32", TF32_BAND)):
        rel = [abs(b - a) / abs(a) for a, b in zip(fp32.losses, runs[name].losses, strict=True)]
        assert all(np.isfinite(runs[name].losses)) and max(rel) <= band, (name, rel)


def test_ddp_over_nccl_on_one_gpu_trains_what_one_process_trains(gpu: CosyVoice3Config, small_corpus: Path, tmp_path: Path) -> None:
    from voxledger.tasks.training.loop import run_loop

    backend = CosyVoice3Backend(gpu)
    setup = backend.setup(small_corpus, PLAN, None)
    one = backend.trainable_state(
        run_loop(backend, setup.model, setup.cv_batches, PLAN, BOUND, tmp_path / "one", lambda e, m, r: "0" * 64).model
    )
    run = launch(1, RankJob(gpu, small_corpus, PLAN, BOUND, tmp_path / "ddp-ckpt", tmp_path / "ddp"))
    assert run["effective_config"]["data_parallel"]["backend"] == "nccl" and run["effective_config"]["data_parallel"]["world_size"] == 1
    ddp = load_file(str(tmp_path / "ddp" / "last" / ADAPTER_FILE))
    scale = max(float(v.abs().max()) for v in one.values())
    assert max(float((ddp[k] - one[k]).abs().max()) for k in one) <= 1e-5 * scale  # bitwise on the CPU (gloo, 1 rank)


def test_more_ranks_than_gpus_are_refused_naming_both_settings(gpu: CosyVoice3Config, small_corpus: Path, tmp_path: Path) -> None:
    backend = CosyVoice3Backend(gpu.model_copy(update={"ranks": torch.cuda.device_count() + 1}))
    with pytest.raises(
        TrainingError, match=r"VOXLEDGER_COSYVOICE_RANKS=\d+ on CUDA needs a GPU per rank; .*VOXLEDGER_COSYVOICE_DEVICE=cpu"
    ):
        backend.train_ranks(small_corpus, PLAN, None, BOUND, tmp_path / "run")


def test_a_gpu_trained_adapter_reloads_bitwise_and_speaks(fp32: Trained, tmp_path: Path) -> None:
    fp32.backend.export(fp32.model, tmp_path)
    exported = load_file(str(tmp_path / ADAPTER_FILE))
    loaded = fp32.backend.load_for_inference(None, tmp_path, "adapter")
    reloaded = lora.adapter_state(loaded.cosy.model.llm)
    assert set(reloaded) == set(exported) and all(torch.equal(reloaded[k], exported[k]) for k in exported)
    wav, rate = fp32.backend.synthesize(loaded, "A short test.", loaded.meta["new_speaker"] if loaded.meta else "", 0, {})
    assert rate == 24000 and wav.dtype == np.float32 and np.isfinite(wav).all() and len(wav) > 0
