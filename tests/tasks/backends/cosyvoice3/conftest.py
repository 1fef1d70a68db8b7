"""Session fixtures: one fake model folder and one small espeak corpus for all cosyvoice3 tests."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from tests.corpus_factory import build_small_corpus
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config

from .fake_model import FAKE_TREE, build_fake_model_dir


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


# --- upstream's real code: the fake tree and, where available, a real checkout ---------------------

REPO = Path(__file__).resolve().parents[4]
ENV_REAL_CHECKOUT = "VOXLEDGER_TEST_COSYVOICE_CHECKOUT"  # an unpacked FunAudioLLM/CosyVoice checkout (CI sets it)
ARCHIVE = REPO.parent / "shared" / "upstream" / "cosyvoice-ace7c47.tar.gz"  # source snapshot, unpacked on demand
UPSTREAM_PACKAGES = ("cosyvoice", "matcha")


def real_checkout_or_reason(tmp_root: Path) -> tuple[Path | None, str]:
    """A real checkout (the environment variable's, else the archive unpacked under ``tmp_root``), or why not."""
    given = os.environ.get(ENV_REAL_CHECKOUT)
    if given:
        path = Path(given)
        if not (path / "cosyvoice" / "llm" / "llm.py").is_file():
            return None, f"{ENV_REAL_CHECKOUT}={given} is not a CosyVoice checkout (no cosyvoice/llm/llm.py)"
        return path, ""
    if not ARCHIVE.is_file():
        return None, f"no real CosyVoice checkout: set {ENV_REAL_CHECKOUT} or put the source snapshot at {ARCHIVE}"
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(tmp_root, filter=_sources_only)
    return tmp_root / "CosyVoice", ""


def _sources_only(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter, minus links (Matcha-TTS's ``data`` links to an absolute path outside the tree)."""
    return None if member.issym() or member.islnk() else tarfile.data_filter(member, dest)


@contextmanager
def upstream_from(checkout: Path) -> Iterator[Path]:
    """Import ``cosyvoice`` / ``matcha`` from ``checkout`` inside the block; this process's modules come back after."""
    saved_modules = {k: v for k, v in sys.modules.items() if k.split(".", 1)[0] in UPSTREAM_PACKAGES}
    saved_path = list(sys.path)
    for name in saved_modules:
        del sys.modules[name]
    try:
        yield checkout
    finally:
        for name in [k for k in sys.modules if k.split(".", 1)[0] in UPSTREAM_PACKAGES]:
            del sys.modules[name]
        sys.modules.update(saved_modules)
        sys.path[:] = saved_path


@pytest.fixture(scope="session")
def real_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real checkout, or a skip saying why there is none."""
    path, reason = real_checkout_or_reason(tmp_path_factory.mktemp("upstream"))
    if path is None:
        pytest.skip(reason)
    return path


_REAL_ID = re.compile(r"\[(?:.+-)?real(?:-.+)?\]$")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here that runs upstream's real code (the ``[real]`` cases and the scaffolded chain) is
    selectable as one tier: ``-m real_chain`` (``.ci/run`` runs it with the cosyvoice3 extra installed)."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and _REAL_ID.search(item.name):
            item.add_marker(pytest.mark.real_chain)


@pytest.fixture(params=["fake", "real"])
def upstream_checkout(request: pytest.FixtureRequest) -> Iterator[Path]:
    """Each contract test once on the fake tree and once on upstream's real code (skipped with the reason when absent)."""
    checkout = FAKE_TREE if request.param == "fake" else request.getfixturevalue("real_checkout")
    with upstream_from(checkout) as path:
        yield path


SCAFFOLD_LAYERS, SCAFFOLD_SEED = 1, 0  # one Qwen2 layer and one DiT block at the released widths


@pytest.fixture(scope="session")
def scaffolded(real_checkout: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `voxledger cosyvoice3 scaffold` model folder built in this process from the real checkout's classes
    (the real-chain tier's model); a skip naming the missing modules where upstream's import set is not installed."""
    from voxledger.tasks.backends.cosyvoice3.scaffold import BUILD_IMPORTS, scaffold

    missing = [m for m in BUILD_IMPORTS if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"upstream's import set is not installed ({', '.join(missing)}): install the cosyvoice3 extra (docs/cosyvoice3.md)")
    torch.set_num_threads(2)
    out = tmp_path_factory.mktemp("cv3-scaffold") / "Fun-CosyVoice3-0.5B"
    with upstream_from(real_checkout):
        scaffold(out, SCAFFOLD_LAYERS, real_checkout, SCAFFOLD_SEED)
    return out


@pytest.fixture(params=["fake", "real"])
def cv3_upstream(request: pytest.FixtureRequest, fake_config: CosyVoice3Config) -> Iterator[CosyVoice3Config]:
    """The backend configured through the environment (as the CLI, Prefect's flows and the packaging child
    see it): the fake tree and its model folder, or the real checkout with a scaffolded model folder."""
    from voxledger.tasks.backends.cosyvoice3.config import ENV_CHECKOUT, ENV_MODEL, ENV_WORK

    if request.param == "fake":
        config = fake_config
    else:
        checkout, model = request.getfixturevalue("real_checkout"), request.getfixturevalue("scaffolded")
        config = CosyVoice3Config(checkout_dir=checkout, model_dir=model, work_dir=fake_config.cache_dir.parent / "real-work")
    with upstream_from(config.checkout_dir), pytest.MonkeyPatch.context() as mp:
        for var, value in ((ENV_CHECKOUT, config.checkout_dir), (ENV_MODEL, config.model_dir), (ENV_WORK, config.cache_dir)):
            mp.setenv(var, str(value))
        yield config
