"""Configuration from the environment, plan options, and the preflight's checks and digests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from voxledger.schemas.errors import PlanError, SettingsError, TrainingError
from voxledger.settings import setting_fields
from voxledger.tasks.backends.base import get_backend
from voxledger.tasks.backends.cosyvoice3.backend import CosyVoice3Backend
from voxledger.tasks.backends.cosyvoice3.config import (
    CosyVoice3Config,
    CosyVoice3Options,
    instruct_text,
)
from voxledger.tasks.backends.cosyvoice3.upstream import CHECKOUT_FILES, UpstreamIdentity, preflight

from .fake_model import FAKE_TREE


def test_registry_returns_the_backend_and_env_config_needs_a_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(get_backend("cosyvoice3"), CosyVoice3Backend)
    for field in setting_fields():
        if field.group == "cosyvoice":  # this machine's own checkout must not leak in
            monkeypatch.delenv(field.env, raising=False)
    with pytest.raises(TrainingError, match="VOXLEDGER_COSYVOICE_DIR"):
        CosyVoice3Config.from_env()
    monkeypatch.setenv("VOXLEDGER_COSYVOICE_DIR", str(tmp_path))
    monkeypatch.setenv("VOXLEDGER_COSYVOICE_DEVICE", "cuda:1")
    cfg = CosyVoice3Config.from_env()
    assert cfg.model_dir == tmp_path / "pretrained_models/Fun-CosyVoice3-0.5B"
    assert cfg.campplus_path == cfg.model_dir / "campplus.onnx" and cfg.device == "cuda:1"
    assert cfg.speech_tokenizer_path.name == "speech_tokenizer_v3.onnx"
    monkeypatch.setenv("VOXLEDGER_COSYVOICE_MODEL_DIR", str(tmp_path / "model"))
    assert CosyVoice3Config.from_env().campplus_path == tmp_path / "model" / "campplus.onnx"
    monkeypatch.setenv("VOXLEDGER_COSYVOICE_DEVICE", "tpu")
    with pytest.raises(SettingsError, match="VOXLEDGER_COSYVOICE_DEVICE='tpu' is not auto, cpu, cuda or cuda:N"):
        CosyVoice3Config.from_env()


def test_plan_options_are_a_closed_set_and_instructs_end_with_the_marker() -> None:
    assert CosyVoice3Options.from_plan_model("p", {}).max_text_tokens == 200
    with pytest.raises(PlanError, match="valid keys"):
        CosyVoice3Options.from_plan_model("p", {"max_text_token": 10})
    assert instruct_text(None) == "You are a helpful assistant.<|endofprompt|>"
    assert instruct_text("Speak slowly.") == "You are a helpful assistant. Speak slowly.<|endofprompt|>"
    assert instruct_text("Custom.<|endofprompt|>") == "Custom.<|endofprompt|>"


def test_preflight_lists_every_missing_file_with_a_fix(tmp_path: Path) -> None:
    checkout, model = tmp_path / "CosyVoice", tmp_path / "model"
    (checkout / "cosyvoice").mkdir(parents=True)
    (checkout / "cosyvoice" / "__init__.py").write_text("")
    model.mkdir()
    (model / "llm.pt").write_bytes(b"x")
    with pytest.raises(TrainingError) as err:
        preflight(CosyVoice3Config(checkout_dir=checkout, model_dir=model, work_dir=tmp_path / "w"))
    text = str(err.value)
    assert text.count("\n- ") == (len(CHECKOUT_FILES) - 1) + 3 + 5 + 2  # sources, yaml/flow/hift, BlankEN files, two ONNX
    assert "Matcha-TTS" in text and "git submodule update --init --recursive" in text
    assert "flow.pt is missing" in text and "llm.pt is missing" not in text
    assert "VOXLEDGER_COSYVOICE_MODEL_DIR" in text


def test_preflight_refuses_online_feature_mode(fake_config: CosyVoice3Config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("onnx_path", "/somewhere")
    with pytest.raises(TrainingError, match="unset onnx_path"):
        preflight(fake_config)


def _copy(fake_config: CosyVoice3Config, dest: Path) -> CosyVoice3Config:
    shutil.copytree(FAKE_TREE, dest / "checkout", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(fake_config.model_dir, dest / "model")
    return CosyVoice3Config(checkout_dir=dest / "checkout", model_dir=dest / "model", work_dir=dest / "work")


def test_identity_changes_with_sources_and_weights_not_with_location(fake_config: CosyVoice3Config, tmp_path: Path) -> None:
    original = preflight(fake_config)
    assert original.source_files == 21  # 18 .py files in the fake cosyvoice/, 3 in matcha/
    assert set(original.files_sha256) >= {"llm.pt", "flow.pt", "hift.pt", "cosyvoice3.yaml", "campplus.onnx",
                                          "speech_tokenizer_v3.onnx", "CosyVoice-BlankEN/vocab.json"}  # fmt: skip
    assert not any(name.endswith(".safetensors") for name in original.files_sha256)  # overwritten by llm.pt: not identity
    copy = _copy(fake_config, tmp_path)
    moved = preflight(copy)
    assert moved.identity_sha256 == original.identity_sha256  # paths are not identity
    llm_py = copy.checkout_dir / "cosyvoice" / "llm" / "llm.py"
    llm_py.write_text(llm_py.read_text() + "\n# edited\n")
    edited = preflight(copy)
    assert edited.sources_sha256 != original.sources_sha256 and edited.identity_sha256 != original.identity_sha256
    with open(copy.model_dir / "hift.pt", "ab") as f:
        f.write(b"\0")
    assert preflight(copy).files_sha256["hift.pt"] != original.files_sha256["hift.pt"]


def test_the_text_front_end_in_use_is_part_of_the_identity(
    fake_config: CosyVoice3Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = preflight(fake_config)
    assert plain.text_frontend == {"name": "none", "version": None}
    site = tmp_path / "site"  # wetext installed: upstream's frontend normalises text with it
    (site / "wetext").mkdir(parents=True)
    (site / "wetext" / "__init__.py").write_text("class Normalizer: ...\n")
    (site / "wetext-0.1.8.dist-info").mkdir()
    (site / "wetext-0.1.8.dist-info" / "METADATA").write_text("Name: wetext\nVersion: 0.1.8\n")
    monkeypatch.syspath_prepend(str(site))
    with_wetext = preflight(fake_config)
    assert with_wetext.text_frontend == {"name": "wetext", "version": "0.1.8"}
    assert with_wetext.identity_sha256 != plain.identity_sha256
    # ttsfrd wins when installed with its resource folder in the checkout, as upstream chooses
    (site / "ttsfrd").mkdir()
    (site / "ttsfrd" / "__init__.py").write_text("")
    copy = _copy(fake_config, tmp_path / "copy")
    assert preflight(copy).text_frontend["name"] == "wetext"  # no resource folder: upstream falls back
    (copy.checkout_dir / "pretrained_models" / "CosyVoice-ttsfrd" / "resource").mkdir(parents=True)
    assert preflight(copy).text_frontend == {"name": "ttsfrd", "version": None}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_is_recorded_but_not_part_of_the_identity(fake_config: CosyVoice3Config, tmp_path: Path) -> None:
    copy = _copy(fake_config, tmp_path)
    assert preflight(copy).checkout_commit is None
    git = ["git", "-C", str(copy.checkout_dir), "-c", "user.email=t@example.org", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "fixture"], check=True)
    ident = preflight(copy)
    assert ident.checkout_commit is not None and len(ident.checkout_commit) == 40
    assert ident.identity_sha256 == UpstreamIdentity(**{**ident.model_dump(), "checkout_commit": None}).identity_sha256


# sha256sum of the committed fixture graphs, as written by fixture_assets/build_onnx.py (onnx 1.23.2)
FIXTURE_ONNX_SHA256 = {
    "campplus.onnx": "3485e42a6ed0417e5d65a9597ce700caed2fef80bb740ebdb534e382804ea48d",
    "speech_tokenizer_v3.onnx": "6851aca13dcaaafcedddeffd4c3d1ad8c575153737507ce9facac4cb1d87b151",
}


def test_fixture_onnx_graphs_are_the_committed_ones(fake_config: CosyVoice3Config) -> None:
    files = preflight(fake_config).files_sha256
    assert {name: files[name] for name in FIXTURE_ONNX_SHA256} == FIXTURE_ONNX_SHA256


def test_what_the_backend_cannot_do_yet_is_refused_by_name(tmp_path: Path) -> None:
    """A base plan: a clear refusal, never a silent stub (packaging, the stage split and init are `test_stages.py`'s)."""
    import json

    from voxledger.schemas.errors import BackendCapabilityError

    backend = get_backend("cosyvoice3")
    assert backend.inference_settings() == (24000, {"mode": "zero_shot", "text_frontend": True, "speed": 1.0})
    assert "upstream_sha256" in backend.component_note()
    assert set(backend.deliverables().values()) == {"adapter_weights", "adapter_config", "voice_prompt"}
    assert [s.name for s in backend.synthesis_stages()] == ["speech_tokens", "llm_logits", "mel", "pcm"]
    with pytest.raises(BackendCapabilityError, match="backend cosyvoice3 trains LoRA adapters only"):
        backend.plan_recipe("full")
    recipe = backend.plan_recipe("lora")  # upstream's batch and clip, the lr stated as unmeasured
    assert recipe.frames_per_batch == 2000 and recipe.optim["max_grad_norm"] == 5.0 and "not measured" in recipe.note
    with pytest.raises(TrainingError, match="no adapter_config.json"):
        backend.adapter_speaker(tmp_path)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"new_speaker": "spk"}))
    assert backend.adapter_speaker(tmp_path) == "spk"
