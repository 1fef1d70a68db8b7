"""Session fixtures: one fake model folder and one small espeak corpus for all cosyvoice3 tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.corpus_factory import build_small_corpus
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config

from .fake_model import build_fake_model_dir


@pytest.fixture(scope="session")
def fake_config(tmp_path_factory: pytest.TempPathFactory) -> CosyVoice3Config:
    """A config pointing at the fake tree, a freshly built fake model folder and a cache folder."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("cosyvoice3")
    return build_fake_model_dir(root / "Fun-CosyVoice3-0.5B", root / "work")


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared small espeak corpus (target voice spk_t in target_train / target_dev)."""
    return build_small_corpus(tmp_path_factory.mktemp("cv3-corpus") / "corpus")
