"""``voxledger cosyvoice3 preflight``: checkout, model folder and installed versions against the manifest."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from pydantic import ValidationError

from voxledger.cli import main
from voxledger.schemas.audit import AuditPolicy
from voxledger.tasks.backends.cosyvoice3 import features
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.backends.cosyvoice3.environment import check_environment
from voxledger.tasks.backends.cosyvoice3.manifest import load_manifest

from .fake_model import FAKE_TREE
from .test_upstream_errors import _reduce_mean_graph

HANDLED = {"qwen-bf16-autodtype", "decode-short-mask", "torchaudio-torchcodec", "min-window-eos"}  # torch 2.13 / tf 5.24 / ta 2.11


def test_fake_setup_has_no_file_or_source_findings_and_every_known_incompatibility_is_reported(fake_config: CosyVoice3Config) -> None:
    report = check_environment(fake_config)
    ids = {f.id for f in report.findings}
    assert not ids & {"missing-file", "source-drift", "qwen-dtype"}
    assert {i.id for i in load_manifest().incompatibilities} == HANDLED and HANDLED <= ids
    assert all(f.fix for f in report.findings) and report.versions["transformers"] == "5.24.0"


def test_drift_and_missing_weights_are_named(fake_config: CosyVoice3Config, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    shutil.copytree(FAKE_TREE, checkout, ignore=shutil.ignore_patterns("__pycache__"))
    llm_py = checkout / "cosyvoice" / "llm" / "llm.py"
    llm_py.write_text(llm_py.read_text().replace("def forward_one_step(self, xs", "def forward_one_step(self, inputs"))
    model = tmp_path / "model"
    shutil.copytree(fake_config.model_dir, model)
    (model / "CosyVoice-BlankEN" / "model.safetensors").unlink()
    found = check_environment(CosyVoice3Config(checkout_dir=checkout, model_dir=model)).findings
    drift = [f.message for f in found if f.id == "source-drift"]
    assert len(drift) == 1 and "Qwen2Encoder.forward_one_step(self, inputs, masks, cache)" in drift[0]
    assert [f.message for f in found if f.id == "missing-file" and "model.safetensors" in f.message]


def test_cli_prints_each_incompatibility_with_its_fix_and_fails_on_errors(fake_config: CosyVoice3Config, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["cosyvoice3", "preflight", str(FAKE_TREE), str(tmp_path / "nowhere")])
    assert result.exit_code != 0 and "missing-file" in result.output and "fix:" in result.output
    assert "decode-short-mask" in result.output and "TrainingError: cosyvoice3 preflight" in result.output
    js = runner.invoke(main, ["cosyvoice3", "preflight", str(FAKE_TREE), str(fake_config.model_dir), "--json", "--python", sys.executable])
    assert '"interpreter-not-implemented"' in js.output and '"manifest_commit": "ace7c47"' in js.output
    assert '"interpreter-pins"' in js.output  # this interpreter is not upstream's torch 2.3.1 / transformers 4.51.3


def test_sixteen_khz_floor_in_the_audit_policy_and_channel_handling() -> None:
    leak = [{"key": "speaker"}]
    assert AuditPolicy(name="p", leakage=leak).min_sample_rate_hz is None  # default: no floor, as before
    with pytest.raises(ValidationError, match="below min_sample_rate_hz 16000"):
        AuditPolicy(name="p", leakage=leak, sample_rate_hz=8000, min_sample_rate_hz=16000)
    stereo = torch.stack([torch.linspace(-1, 1, 24000), torch.zeros(24000)])
    assert torch.equal(
        features.embedding_input_16k(stereo, 24000), features.to_16k(stereo[:1], 24000)
    )  # channel 0, as extract_embedding.py
    assert torch.allclose(features.token_input_16k(stereo, 24000), features.to_16k(stereo, 24000).mean(dim=0, keepdim=True))


def _site(tmp_path: Path, files: dict[str, str]) -> Path:
    """A scratch directory put first on the target interpreter's path (PYTHONPATH), holding ``files``."""
    site = tmp_path / "site"
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text, encoding="utf-8")
    return site


def _linked_model(src: Path, dst: Path, drop: str) -> Path:
    """The model folder as symlinks, without ``drop`` (a download that missed one file)."""
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if path.is_dir():
            (dst / rel).mkdir(parents=True, exist_ok=True)
        elif rel.as_posix() != drop:
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            (dst / rel).symlink_to(path)
    return dst


HIDE_HYDRA = "raise ModuleNotFoundError(\"No module named 'hydra'\", name='hydra')\n"  # an environment without hydra-core
OLD_TRITON = '__version__ = "2.3.1"\n'  # triton 2.3.1's top level as torch 2.13 finds it: none of the modules it needs


@pytest.mark.parametrize(
    ("broken", "finding", "named"),
    [
        ("hydra-missing", "missing-module", ["module hydra is not installed", "pip install 'hydra-core==1.3.2'"]),
        ("triton-breaks-torch", "triton-breaks-imports", ["triton 2.3.1", "transformers.models.qwen2.modeling_qwen2", "pip uninstall -y triton"]),
        ("one-input-tokenizer", "onnx-signature", ["has 1 input(s)", "SPEECH_TOKENIZER_ONNX"]),
        ("float-logits-tokenizer", "onnx-signature", ["returns float32 1x100 (not integer codes)", "SPEECH_TOKENIZER_ONNX"]),
        ("model-safetensors-missing", "missing-file", ["CosyVoice-BlankEN/model.safetensors is missing"]),
        ("transformers-outside-range", "transformers-version", ["transformers 4.30.0 is outside the tested range", "pip install transformers==5.24.0"]),
    ],
)  # fmt: skip
def test_preflight_fails_naming_the_cause_in_broken_environments(
    broken: str, finding: str, named: list[str], fake_config: CosyVoice3Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, onnx = fake_config.model_dir, []
    if broken == "hydra-missing":
        monkeypatch.setenv("PYTHONPATH", str(_site(tmp_path, {"hydra/__init__.py": HIDE_HYDRA})))
    elif broken == "triton-breaks-torch":
        site = _site(tmp_path, {"triton/__init__.py": OLD_TRITON, "triton-2.3.1.dist-info/METADATA": "Name: triton\nVersion: 2.3.1\n"})
        monkeypatch.setenv("PYTHONPATH", str(site))
    elif broken == "one-input-tokenizer":
        onnx = ["--speech-tokenizer-onnx", str(fake_config.campplus_path)]  # campplus has one input
    elif broken == "float-logits-tokenizer":  # upstream's two inputs, but float logits out instead of integer codes
        onnx = ["--speech-tokenizer-onnx", str(_reduce_mean_graph(tmp_path / "speech_tokenizer_v3.onnx", "speech_tokenizer"))]
    elif broken == "model-safetensors-missing":
        model = _linked_model(fake_config.model_dir, tmp_path / "model", "CosyVoice-BlankEN/model.safetensors")
    else:
        site = _site(tmp_path, {"transformers-4.30.0.dist-info/METADATA": "Name: transformers\nVersion: 4.30.0\n"})
        monkeypatch.setenv("PYTHONPATH", str(site))
    result = CliRunner().invoke(main, ["cosyvoice3", "preflight", str(FAKE_TREE), str(model), *onnx])
    assert result.exit_code != 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith(f"[ERROR] {finding}:")]
    block = result.output[result.output.index(lines[0]) :] if lines else ""
    assert lines and all(text in block for text in named), result.output
    assert finding in result.output.splitlines()[-1]  # the summary names it too


def test_looking_up_the_backend_imports_no_peft_or_transformers() -> None:
    """A training stage looks its backend up to build its cache key before it knows it is cached:
    PEFT (and with it transformers, ~4.5 s of imports) loads only where an adapter is attached,
    read or merged."""
    import json
    import subprocess

    probe = (
        "import json, sys\nfrom voxledger.tasks.backends.base import get_backend\nget_backend('cosyvoice3')\n"
        "print('PROBE ' + json.dumps(sorted(m for m in ('peft', 'transformers') if m in sys.modules)))\n"
        "from voxledger.tasks.backends.cosyvoice3 import lora\n"
        "print('PROBE ' + json.dumps(sorted(m for m in ('peft', 'transformers') if m in sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    seen = [json.loads(line.removeprefix("PROBE ")) for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert seen == [[], ["peft", "transformers"]], done.stderr[-3000:]


def test_a_probe_past_its_limit_is_a_finding_naming_the_setting(
    fake_config: CosyVoice3Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOXLEDGER_COSYVOICE_PROBE_TIMEOUT_S", "0.01")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # another probe key: not served from this process's earlier probes
    report = check_environment(fake_config)
    failed = [f for f in report.findings if f.id == "probe-failed"]
    assert failed and "ran past 0.01 s" in failed[0].message and "raise VOXLEDGER_COSYVOICE_PROBE_TIMEOUT_S" in failed[0].message
