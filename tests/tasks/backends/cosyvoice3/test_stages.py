"""cosyvoice3 past training (fake tree): the stage split, attribution, packaging with its checks."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from voxledger.schemas.audit import AuditPolicy
from voxledger.schemas.errors import DigestMismatchError, ReceiptError, SynthesisError
from voxledger.schemas.training import CheckpointReceipt, TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.stores.trees import build_manifest, materialize_tree
from voxledger.tasks.backends.cosyvoice3.backend import CosyVoice3Backend
from voxledger.tasks.backends.cosyvoice3.config import ENV_CHECKOUT, ENV_MODEL, ENV_WORK, CosyVoice3Config
from voxledger.tasks.equivalence.attribution import attribute_runtimes
from voxledger.tasks.packaging.archive import unpack_package
from voxledger.tasks.packaging.assemble import check_deliverables
from voxledger.tasks.packaging.probe import probe_package, probe_stages
from voxledger.tasks.plans import load_plan
from voxledger.tasks.stages.audit import audit_corpus_fn
from voxledger.tasks.stages.package import package_adapter_fn
from voxledger.tasks.stages.train import run_training

from .test_training import make_plan

ROOT = Path(__file__).resolve().parents[4]
TEXT = "The boat drifted toward the shore."
LONG = " ".join(["The boat drifted slowly toward the quiet shore while everyone on the pier waved and cheered."] * 8)  # two segments


@dataclass
class Trained:
    home: Home
    run_rid: str
    best: str
    adapter_dir: Path


@pytest.fixture(scope="module")
def env(fake_config: CosyVoice3Config) -> Iterator[CosyVoice3Config]:
    """The backend configured from the environment, as the CLI and the packaging child see it."""
    with pytest.MonkeyPatch.context() as mp:
        for var, value in ((ENV_CHECKOUT, fake_config.checkout_dir), (ENV_MODEL, fake_config.model_dir), (ENV_WORK, fake_config.cache_dir)):
            mp.setenv(var, str(value))
        yield fake_config


@pytest.fixture(scope="module")
def trained(env: CosyVoice3Config, small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """A LoRA run on the model folder's own llm.pt (no stored base), through the generic training stage."""
    home = Home(tmp_path_factory.mktemp("cv3-stages") / "home")
    policy = load_plan(ROOT / "plans" / "audit-demo.yaml", AuditPolicy)
    audit = audit_corpus_fn(home, small_corpus, policy, policy_name="audit-demo.yaml").receipt_id
    out = run_training(home, small_corpus, audit, make_plan(max_epochs=1), plan_name="cv3-lora.yaml")
    best = out.receipt.subject("best").sha256
    adapter_dir = tmp_path_factory.mktemp("cv3-best")
    shutil.rmtree(adapter_dir)
    materialize_tree(home.blobs, best, adapter_dir)
    return Trained(home, out.receipt_id, best, adapter_dir)


def test_stage_split_ends_in_the_waveform_synthesize_returns(env: CosyVoice3Config, trained: Trained) -> None:
    backend = CosyVoice3Backend()
    loaded = backend.load_for_inference(None, trained.adapter_dir, "adapter")
    out = backend.stage_outputs(loaded, TEXT, "spk_t", 3, {})
    tokens, logits, mel, pcm = (out[s.name] for s in backend.synthesis_stages())
    assert tokens.dtype == np.int32 and tokens.size > 0
    assert logits.shape == (tokens.size + 1, 6761)  # every emitted position and the stop after the last
    assert np.allclose(np.exp(logits).sum(axis=1), 1.0, atol=1e-4)
    assert mel.shape == (2 * tokens.size, 80) and pcm.size == 480 * mel.shape[0]
    # the packaging probe demands the split end in synthesize()'s waveform, bit for bit
    assert probe_stages("cosyvoice3", loaded, TEXT, "spk_t", 3, {})["pcm"].tobytes() == pcm.tobytes()
    with pytest.raises(SynthesisError, match="one segment"):  # fed arrays carry no segment boundaries
        backend.stage_outputs(loaded, LONG, "spk_t", 3, {}, feed={"speech_tokens": tokens})


def test_attribution_is_green_for_merged_and_blames_the_corrupted_component(env: CosyVoice3Config, trained: Trained) -> None:
    backend = CosyVoice3Backend()
    ref = backend.load_for_inference(None, trained.adapter_dir, "adapter")
    merged = backend.load_for_inference(None, trained.adapter_dir, "merged")
    report = attribute_runtimes("cosyvoice3", ref, merged, TEXT, "spk_t", 0)
    assert {s.stage: s.band for s in report.stages} == {"speech_tokens": "GREEN", "llm_logits": "GREEN", "mel": "GREEN", "pcm": "GREEN"}
    assert report.passed
    with torch.no_grad():  # a corrupted flow: only the mel is blamed (pcm is vocoded from the reference mel)
        merged.cosy.model.flow.input_embedding.weight.mul_(3.0)
    bands = {s.stage: s.band for s in attribute_runtimes("cosyvoice3", ref, merged, TEXT, "spk_t", 0).stages}
    assert bands == {"speech_tokens": "GREEN", "llm_logits": "GREEN", "mel": "RED", "pcm": "GREEN"}, bands
    broken = backend.load_for_inference(None, trained.adapter_dir, "merged")
    with torch.no_grad():  # a corrupted LM head: the logits are blamed, the flow and vocoder (fed) are not
        broken.cosy.model.llm.llm_decoder.weight.add_(0.5 * torch.randn_like(broken.cosy.model.llm.llm_decoder.weight))
    bands = {s.stage: s.band for s in attribute_runtimes("cosyvoice3", ref, broken, TEXT, "spk_t", 0).stages}
    assert bands["llm_logits"] == "RED" and bands["mel"] == "GREEN" and bands["pcm"] == "GREEN", bands


def test_package_binds_upstream_and_passes_reload_and_merged_checks(env: CosyVoice3Config, trained: Trained, tmp_path: Path) -> None:
    out = package_adapter_fn(trained.home, trained.run_rid, trained.best)
    result = out.receipt.result
    assert out.receipt.status == "succeeded" and result.reload.passed and result.reload.bitwise_equal
    run = trained.home.receipts.read(trained.run_rid, TrainingRunReceipt)
    epochs = [trained.home.receipts.read(i.sha256, CheckpointReceipt) for i in run.inputs if i.role.startswith("checkpoint:")]
    assert out.receipt.environment.device == run.environment.device == "cpu"  # the device the CPU tests pin, recorded
    assert epochs and {c.environment.device for c in epochs} == {"cpu"}
    assert result.equivalence_band == "GREEN"
    verified = unpack_package(out.package_path, tmp_path / "pkg")
    manifest = verified.manifest
    roles = {m.path: m.role for m in manifest.members if m.role != "receipt"}
    assert roles == {"adapter/adapter.safetensors": "adapter_weights", "adapter/adapter_config.json": "adapter_config",
                     "adapter/prompt.wav": "voice_prompt"}  # fmt: skip
    identity = CosyVoice3Backend().preflight()
    c = manifest.components
    assert c.backend_identity_sha256 == identity.identity_sha256
    assert c.base_model_sha256 == identity.files_sha256["llm.pt"] and c.vocoder_sha256 == identity.files_sha256["hift.pt"]
    assert c.tokenizer_sha256 == identity.files_sha256["speech_tokenizer_v3.onnx"] and c.frontend_sha256
    sample_rate = manifest.inference.sample_rate_hz
    assert sample_rate == 24000
    assert package_adapter_fn(trained.home, trained.run_rid, trained.best).cached


def test_package_refuses_another_upstream_and_stray_files(env: CosyVoice3Config, trained: Trained, tmp_path: Path) -> None:
    pkg = package_adapter_fn(trained.home, trained.run_rid, trained.best).package_path
    other = tmp_path / "model"
    shutil.copytree(env.model_dir, other)
    state = torch.load(other / "hift.pt", weights_only=True)
    torch.save({k: v + 1 for k, v in state.items()}, other / "hift.pt")  # another vocoder: another upstream
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV_MODEL, str(other))
        with pytest.raises(DigestMismatchError, match="upstream identity"):
            probe_package(pkg, None, TEXT, 0)
    tree = build_manifest(trained.adapter_dir)
    assert set(check_deliverables(trained.home.blobs, "cosyvoice3", tree, trained.best).values()) == {
        "adapter_weights", "adapter_config", "voice_prompt"}  # fmt: skip
    stray = tmp_path / "stray"
    shutil.copytree(trained.adapter_dir, stray)
    (stray / "optimizer.pt").write_bytes(b"x")
    (stray / "prompt.wav").unlink()
    with pytest.raises(ReceiptError, match=r"extra \['optimizer.pt'\], missing roles \['voice_prompt'\]"):
        check_deliverables(trained.home.blobs, "cosyvoice3", build_manifest(stray), trained.best)


def test_init_writes_a_cosyvoice3_pipeline_on_its_own_base(small_corpus: Path, tmp_path: Path) -> None:
    """A newcomer's `voxledger init --backend cosyvoice3`: no base stage, `base: own`, upstream's recipe (stated as unmeasured)."""
    from click.testing import CliRunner

    from voxledger.cli import main
    from voxledger.schemas.evaluation import EvaluationPlan
    from voxledger.schemas.listening import ListeningProtocol
    from voxledger.schemas.pipeline import PipelinePlan
    from voxledger.schemas.promotion import PromotionPolicy
    from voxledger.schemas.training import TrainingPlan

    out = tmp_path / "plans"
    splits = ("--train-split", "target_train", "--dev-split", "target_dev")
    res = CliRunner().invoke(
        main,
        [
            "init",
            str(small_corpus),
            "--out",
            str(out),
            "--backend",
            "cosyvoice3",
            "--target",
            "spk_t",
            "--train-split",
            "target_train",
            "--dev-split",
            "target_dev",
        ],
    )
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["audit.yaml", "eval.yaml", "listening.yaml", "pipeline.yaml", "promote.yaml",
                                                     "train-adapter.yaml"]  # fmt: skip
    pipe = load_plan(out / "pipeline.yaml", PipelinePlan)
    assert pipe.base_training is None and pipe.shipped_base is None and pipe.adapter_training == "train-adapter.yaml"
    train = load_plan(out / "train-adapter.yaml", TrainingPlan)
    assert (train.backend, train.mode, train.new_speaker, train.frames_per_batch) == ("cosyvoice3", "lora", "spk_t", 2000)
    text = (out / "train-adapter.yaml").read_text()
    assert "--base" not in text.splitlines()[0] and "not measured on the released weights" in text
    ev = load_plan(out / "eval.yaml", EvaluationPlan)
    cands = {c.name: c for c in ev.candidates}
    assert cands["adapter"].base == "own" and cands["base"].artifact == "input:adapter" and cands["base"].speaker == "spk_t"
    assert "--bind base" not in (out / "eval.yaml").read_text().splitlines()[0]
    assert load_plan(out / "promote.yaml", PromotionPolicy).baseline_speaker == "spk_t"
    assert load_plan(out / "listening.yaml", ListeningProtocol).sample_rate_hz == 24000  # heard at the model's own rate
    refused = CliRunner().invoke(
        main, ["init", str(small_corpus), "--out", str(tmp_path / "p2"), "--backend", "cosyvoice3", "--base", "train", *splits]
    )
    assert refused.exit_code != 0 and "adapts its own configured model" in refused.output and not (tmp_path / "p2").exists()
