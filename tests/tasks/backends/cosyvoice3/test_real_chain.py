"""The real-chain tier: upstream's real code (FunAudioLLM/CosyVoice at ace7c47) on a scaffolded model folder.

`voxledger cosyvoice3 scaffold` builds a random-weights Fun-CosyVoice3-0.5B folder with the
checkout's own classes (real widths, one layer); upstream's ``CosyVoice3(model_dir)`` loads it,
and the stage functions run as `test_pipeline.py` runs them on the fake: audit -> LoRA training
-> synthesis with the adapter. Needs the ``cosyvoice3`` extra and openai-whisper (upstream's
import set; ``.ci/run`` installs them into a scratch prefix and runs these tests with
``-m real_chain``); without them, or without a real checkout, each test skips and says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from voxledger.schemas.audit import AuditPolicy
from voxledger.stores.hashing import sha256_file
from voxledger.stores.home import Home
from voxledger.stores.trees import materialize_tree
from voxledger.tasks.backends.cosyvoice3.backend import CosyVoice3Backend
from voxledger.tasks.backends.cosyvoice3.config import ENV_CHECKOUT, ENV_MODEL, ENV_WORK, CosyVoice3Config
from voxledger.tasks.backends.cosyvoice3.environment import check_environment
from voxledger.tasks.backends.cosyvoice3.scaffold import SCAFFOLD_FILE
from voxledger.tasks.backends.cosyvoice3.upstream import read_llm_state
from voxledger.tasks.plans import load_plan
from voxledger.tasks.stages.audit import audit_corpus_fn
from voxledger.tasks.stages.train import run_training

from .conftest import SCAFFOLD_LAYERS, SCAFFOLD_SEED, upstream_from
from .test_training import make_plan

pytestmark = pytest.mark.real_chain
ROOT = Path(__file__).resolve().parents[4]
LAYERS, SEED = SCAFFOLD_LAYERS, SCAFFOLD_SEED


def test_scaffold_is_the_released_layout_and_marked_random(scaffolded: Path, real_checkout: Path) -> None:
    info = json.loads((scaffolded / SCAFFOLD_FILE).read_text(encoding="utf-8"))
    assert info["random_weights"] is True and info["seed"] == SEED and info["layers"] == {"requested": 1, "qwen2": 1, "dit": 1}
    for name, digest in info["files"].items():  # every file listed, with its digest
        assert sha256_file(scaffolded / name) == digest, name
    qwen = json.loads((scaffolded / "CosyVoice-BlankEN" / "config.json").read_text(encoding="utf-8"))
    assert qwen["torch_dtype"] == "bfloat16" and (qwen["hidden_size"], qwen["intermediate_size"], qwen["vocab_size"]) == (896, 4864, 151936)
    with safe_open(str(scaffolded / "CosyVoice-BlankEN" / "model.safetensors"), framework="pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    llm = read_llm_state(scaffolded / "llm.pt")
    assert {v.dtype for v in llm.values()} == {torch.float32}
    emb = llm["llm.model.model.embed_tokens.weight"]
    assert emb.shape == (151936, 896) and not torch.equal(emb, emb.to(torch.bfloat16).float())  # fp32 off the bf16 grid
    assert "depth: 1\n" in (scaffolded / "cosyvoice3.yaml").read_text(encoding="utf-8")
    with upstream_from(real_checkout):
        report = check_environment(CosyVoice3Config(checkout_dir=real_checkout, model_dir=scaffolded))
    assert [f.id for f in report.findings if f.severity == "error"] == [], report.findings
    (warn,) = [f for f in report.findings if f.id == "scaffold-model"]
    assert warn.severity == "warning" and "random weights" in warn.message


def test_scaffold_is_byte_reproducible_through_the_cli(scaffolded: Path, real_checkout: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "voxledger.cli", "cosyvoice3", "scaffold", str(again), "--layers", str(LAYERS),
           "--checkout", str(real_checkout), "--seed", str(SEED)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"wrote {again}: random weights (seed {SEED}" in done.stdout
    ours = sorted(p.relative_to(scaffolded).as_posix() for p in scaffolded.rglob("*") if p.is_file())
    theirs = sorted(p.relative_to(again).as_posix() for p in again.rglob("*") if p.is_file())
    assert ours == theirs
    assert [n for n in ours if (scaffolded / n).read_bytes() != (again / n).read_bytes()] == []


def test_audit_train_and_speak_with_the_adapter_on_upstreams_real_code(
    scaffolded: Path, real_checkout: Path, small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var, value in ((ENV_CHECKOUT, real_checkout), (ENV_MODEL, scaffolded), (ENV_WORK, tmp_path / "work")):
        monkeypatch.setenv(var, str(value))
    home = Home(tmp_path / "home")
    policy = load_plan(ROOT / "plans" / "audit-demo.yaml", AuditPolicy)
    with upstream_from(real_checkout):
        audit = audit_corpus_fn(home, small_corpus, policy, policy_name="audit-demo.yaml")
        assert audit.receipt.result.verdict == "pass"  # type: ignore[union-attr]
        plan = make_plan(max_epochs=1)  # four utterances of <= 3 s, 400 frames a batch: two steps
        out = run_training(home, small_corpus, audit.receipt_id, plan, plan_name="cv3-lora.yaml")
        receipt = out.receipt
        assert receipt.parameters.backend == "cosyvoice3" and len(receipt.result.epochs) == 1
        assert receipt.result.total_steps == 2, {
            k: receipt.parameters.effective_config.get(k) for k in ("train_utterances", "dropped", "cv_utterances")
        }  # two LoRA steps on the real CosyVoice3LM
        assert all(np.isfinite(e.train_loss) and np.isfinite(e.cv_loss) for e in receipt.result.epochs)
        eff = receipt.parameters.effective_config
        meta = eff["cosyvoice3"]
        assert meta["upstream"]["files_sha256"]["llm.pt"] == json.loads((scaffolded / SCAFFOLD_FILE).read_text())["files"]["llm.pt"]  # type: ignore[index]
        assert sorted(meta["upstream_patches"]) == sorted(
            ["lm-dtype-fp32", "decode-full-mask", "min-window-stop-ids", "load-wav-soundfile"]
        )  # type: ignore[index]
        assert receipt.result.trainable_parameters == 1 * 8 * ((896 + 896) * 2 + (896 + 128) * 2)  # r=8 on q, k, v, o of one layer
        best = tmp_path / "best"
        materialize_tree(home.blobs, receipt.subject("best").sha256, best)
        assert sorted(p.name for p in best.iterdir()) == ["adapter.safetensors", "adapter_config.json", "prompt.wav"]
        backend = CosyVoice3Backend()
        loaded = backend.load_for_inference(None, best, "adapter")
        assert type(loaded.cosy).__module__ == "cosyvoice.cli.cosyvoice"
        lora_b = [p for n, p in loaded.cosy.model.llm.named_parameters() if "lora_B" in n]
        assert len(lora_b) == 4 and all(bool(p.abs().sum() > 0) for p in lora_b)  # the trained adapter is live in upstream's LM
        assert Path(sys.modules["cosyvoice.cli.cosyvoice"].__file__ or "").resolve().is_relative_to(real_checkout.resolve())
        wav, rate = backend.synthesize(loaded, "A short test.", "spk_t", 0, {})
    assert rate == 24000 and wav.dtype == np.float32 and wav.size >= 0.1 * rate and np.isfinite(wav).all()
