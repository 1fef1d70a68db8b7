"""The cosyvoice3 backend inside voxledger's own training run (audit -> run_training -> receipts)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from voxledger.schemas.audit import AuditPolicy
from voxledger.stores.home import Home
from voxledger.stores.trees import materialize_tree, put_tree
from voxledger.tasks.backends.cosyvoice3.backend import CosyVoice3Backend
from voxledger.tasks.backends.cosyvoice3.config import (
    ENV_CHECKOUT,
    ENV_MODEL,
    ENV_WORK,
    CosyVoice3Config,
)
from voxledger.tasks.backends.cosyvoice3.upstream import read_llm_state
from voxledger.tasks.plans import load_plan
from voxledger.tasks.stages.audit import audit_corpus_fn
from voxledger.tasks.stages.train import run_training
from voxledger.tasks.tensorio import save_deterministic

from .test_training import make_plan

ROOT = Path(__file__).resolve().parents[4]


def test_train_adapter_fn_with_cosyvoice3(tmp_path: Path, fake_config: CosyVoice3Config, small_corpus: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    for var, value in ((ENV_CHECKOUT, fake_config.checkout_dir), (ENV_MODEL, fake_config.model_dir), (ENV_WORK, fake_config.cache_dir)):
        monkeypatch.setenv(var, str(value))
    home = Home(tmp_path / "home")
    policy = load_plan(ROOT / "plans" / "audit-demo.yaml", AuditPolicy)
    audit = audit_corpus_fn(home, small_corpus, policy, policy_name="audit-demo.yaml").receipt_id
    base = tmp_path / "base"  # the generic run wants a stored base for LoRA: a merged-format llm.safetensors
    base.mkdir()
    save_deterministic({k: v.clone() for k, v in read_llm_state(fake_config.model_dir / "llm.pt").items()}, base / "llm.safetensors")
    base_sha, _ = put_tree(home.blobs, base)
    out = run_training(home, small_corpus, audit, make_plan(), plan_name="cv3-lora.yaml", base_sha=base_sha)
    receipt = out.receipt
    assert receipt.parameters.backend == "cosyvoice3" and len(receipt.result.epochs) == 2
    eff = receipt.parameters.effective_config
    assert eff["base_weights"] == "base/llm.safetensors" and eff["cosyvoice3"]["new_speaker"] == "spk_t"  # type: ignore[index]
    assert receipt.result.trainable_parameters == 2 * 4 * 8 * (32 + 32) - 2 * 2 * 8 * (32 - 16)  # r=8; k/v project to 16
    assert run_training(home, small_corpus, audit, make_plan(), plan_name="cv3-lora.yaml", base_sha=base_sha).cached
    best = tmp_path / "best"
    materialize_tree(home.blobs, receipt.subject("best").sha256, best)
    assert sorted(p.name for p in best.iterdir()) == ["adapter.safetensors", "adapter_config.json", "prompt.wav"]
    backend = CosyVoice3Backend()
    wav, rate = backend.synthesize(backend.load_for_inference(base, best, "adapter"), "A short test.", "spk_t", 0, {})
    assert rate == 24000 and np.isfinite(wav).all()


def test_changed_upstream_files_change_the_training_key(tmp_path: Path, fake_config: CosyVoice3Config, small_corpus: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # sources are covered by the preflight tests; here a model-folder file changes (one process can import one checkout)
    model = tmp_path / "model"
    shutil.copytree(fake_config.model_dir, model)
    for var, value in ((ENV_CHECKOUT, fake_config.checkout_dir), (ENV_MODEL, model), (ENV_WORK, tmp_path / "work")):
        monkeypatch.setenv(var, str(value))
    home = Home(tmp_path / "home")
    audit = audit_corpus_fn(
        home, small_corpus, load_plan(ROOT / "plans" / "audit-demo.yaml", AuditPolicy), policy_name="audit-demo.yaml"
    ).receipt_id
    plan = make_plan(max_epochs=1)
    first = run_training(home, small_corpus, audit, plan, plan_name="cv3-lora.yaml")  # no stored base: upstream's llm.pt
    assert first.receipt.parameters.bound.base_sha256 is None
    with open(model / "hift.pt", "ab") as f:
        f.write(b"\0")
    second = run_training(home, small_corpus, audit, plan, plan_name="cv3-lora.yaml")
    assert not second.cached and second.receipt_id != first.receipt_id
    assert second.receipt.parameters.bound.backend_sha256 != first.receipt.parameters.bound.backend_sha256
    assert second.receipt.parameters.run_key != first.receipt.parameters.run_key
