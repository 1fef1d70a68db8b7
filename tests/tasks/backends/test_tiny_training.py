"""Tiny backend training pieces on the real tiny demo corpus: steps, CV loss, lr schedule."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from voxledger.tasks.backends.tiny.audio import compute_norm_stats
from voxledger.tasks.backends.tiny.data import TinyDataset, load_utterances
from voxledger.tasks.backends.tiny.model import TinyTTS, TinyTTSConfig, attach_lora
from voxledger.tasks.backends.tiny.training import (
    compute_losses,
    cv_loss,
    lr_at,
    make_optimizer,
    train_step,
)
from voxledger.tasks.corpus.demo import build_demo_corpus
from voxledger.tasks.corpus.espeak import phoneme_inventory

SMALL = {"hidden_size": 64, "ffn_size": 128, "backbone_layers": 2, "postnet_channels": 32}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> tuple[TinyDataset, TinyDataset]:
    root: Path = tmp_path_factory.mktemp("tiny-train") / "corpus"
    build_demo_corpus(root, size="tiny")
    cfg = config()
    train = load_utterances(root, ("train",), cfg)
    norm = compute_norm_stats(u.mel for u in train)
    dev = load_utterances(root, ("dev",), cfg)
    return TinyDataset(train, cfg, norm, 800), TinyDataset(dev, cfg, norm, 800)


def config() -> TinyTTSConfig:
    speakers = ("spk-b1", "spk-b2", "spk-b3", "spk-b4")
    return TinyTTSConfig(phonemes=tuple(phoneme_inventory()), speakers=speakers, **SMALL)


def test_loss_decreases_over_20_steps(datasets: tuple[TinyDataset, TinyDataset]) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train, dev = datasets
    model = TinyTTS(train_config := config())
    assert model.config == train_config
    optimizer = make_optimizer(model, lr=3e-3, weight_decay=0.0)
    batches = train.batches(epoch=0, seed=0)
    before = cv_loss(model, batches)
    history = []
    for step in range(20):
        batch = batches[step % len(batches)]
        result = train_step(model, batch, optimizer, lr=lr_at(step, 3e-3, 5, 20))
        assert set(result) >= {"loss", "mel_l1", "postnet_l1", "duration_mse", "grad_norm", "lr"}
        history.append(result["loss"])
    after = cv_loss(model, batches)
    assert after < 0.8 * before, (before, after, history)
    assert math.isfinite(cv_loss(model, dev.batches(0, 0)))


def test_cv_loss_is_deterministic_and_restores_the_mode(datasets) -> None:
    _, dev = datasets
    torch.manual_seed(1)
    model = TinyTTS(config()).train()
    batches = dev.batches(0, 0)
    first = cv_loss(model, batches)
    assert cv_loss(model, batches) == first and model.training
    with pytest.raises(ValueError, match="no frames"):
        cv_loss(model, [])


def test_train_step_on_a_lora_wrapper_moves_only_adapters(datasets) -> None:
    train, _ = datasets
    torch.manual_seed(2)
    model = TinyTTS(config())
    frozen = {k: v.clone() for k, v in model.state_dict().items()}
    peft_model = attach_lora(model, r=4, alpha=8, dropout=0.0, speaker_rows=(0,))
    optimizer = make_optimizer(peft_model, lr=1e-2, weight_decay=0.0)
    result = train_step(peft_model, train.batches(0, 0)[0], optimizer)
    assert math.isfinite(result["loss"])
    changed = [k for k, v in model.state_dict().items() if k in frozen and not torch.equal(v, frozen[k])]
    assert changed == []  # base weights untouched; LoRA and token deltas live in new tensors
    losses = compute_losses(peft_model, train.batches(0, 0)[0])
    assert losses["loss"].requires_grad


def test_lr_schedule_warms_up_then_decays_to_the_floor() -> None:
    assert lr_at(0, 1e-3, 10, 100) == pytest.approx(1e-4)
    assert lr_at(9, 1e-3, 10, 100) == pytest.approx(1e-3)
    assert lr_at(55, 1e-3, 10, 100) == pytest.approx(1e-3 * (0.05 + 0.95 * 0.5))
    assert lr_at(100, 1e-3, 10, 100) == pytest.approx(5e-5)
    assert lr_at(500, 1e-3, 10, 100) == pytest.approx(5e-5)
