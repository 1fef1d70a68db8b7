"""Failures inside upstream's code or files become one `UpstreamError` naming the module or file and the fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from voxledger.schemas.errors import UpstreamError, VoxledgerError
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.backends.cosyvoice3.features import FeatureExtractor

from .fake_model import FAKE_TREE

REPO = Path(__file__).resolve().parents[4]

# run in a fresh interpreter: this process has already imported the fake tree's ``cosyvoice``
BUILD_LLM = """
import json, sys
from pathlib import Path
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.backends.cosyvoice3.upstream import build_llm
try:
    build_llm(CosyVoice3Config(checkout_dir=Path(sys.argv[1]), model_dir=Path(sys.argv[2]), work_dir=Path(sys.argv[3])))
    print(json.dumps({"type": None}))
except Exception as exc:
    print(json.dumps({"type": type(exc).__name__, "voxledger": type(exc).__module__ == "voxledger.schemas.errors", "message": str(exc)}))
"""


def run_build_llm(checkout: Path, config: CosyVoice3Config, pythonpath: list[Path]) -> dict[str, object]:
    inherited = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, pythonpath), str(REPO), *inherited])}
    out = subprocess.run(
        [sys.executable, "-c", BUILD_LLM, str(checkout), str(config.model_dir), str(config.cache_dir)],
        capture_output=True, text=True, env=env, timeout=300, check=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def hide(site: Path, module: str) -> Path:
    """A path entry that makes ``module`` unimportable, as in an environment without it."""
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n")
    return site


def test_a_missing_module_behind_a_yaml_tag_names_the_module_and_the_install(fake_config: CosyVoice3Config, tmp_path: Path) -> None:
    # upstream's tokenizer.py imports whisper at module level; hyperpyyaml's pydoc.locate then raises
    # pydoc.ErrorDuringImport, which is no ImportError and used to end as "a defect in voxledger"
    checkout = tmp_path / "CosyVoice"
    shutil.copytree(FAKE_TREE, checkout, ignore=shutil.ignore_patterns("__pycache__"))
    tok = checkout / "cosyvoice" / "tokenizer" / "tokenizer.py"
    source = tok.read_text(encoding="utf-8").replace(
        "from __future__ import annotations\n",
        "from __future__ import annotations\n\nfrom whisper.tokenizer import Tokenizer  # as upstream\n",
        1,
    )
    tok.write_text(source, encoding="utf-8")
    result = run_build_llm(checkout, fake_config, [hide(tmp_path / "site", "whisper")])
    assert result["type"] == "UpstreamError" and result["voxledger"], result
    message = str(result["message"])
    assert "importing upstream module cosyvoice.tokenizer.tokenizer" in message
    assert "'whisper'" in message and "pip install --no-deps --no-build-isolation 'openai-whisper==20231117'" in message
    assert "defect" not in message and "\n" not in message


def test_a_missing_submodule_is_named_as_an_incomplete_checkout(fake_config: CosyVoice3Config, tmp_path: Path) -> None:
    checkout = tmp_path / "CosyVoice"
    shutil.copytree(FAKE_TREE, checkout, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(checkout / "third_party" / "Matcha-TTS" / "matcha")  # submodule not initialised
    result = run_build_llm(checkout, fake_config, [])
    assert result["type"] == "UpstreamError", result
    assert "matcha.utils.audio.mel_spectrogram" in str(result["message"])
    assert "git submodule update --init --recursive" in str(result["message"])


def test_a_one_input_speech_tokenizer_is_named_with_the_file_and_the_fix(fake_config: CosyVoice3Config) -> None:
    # campplus.onnx has one float input: used as the speech tokenizer, upstream's get_inputs()[1] is an IndexError
    with pytest.raises(UpstreamError) as info:
        FeatureExtractor(fake_config.campplus_path, fake_config.campplus_path)
    message = str(info.value)
    assert (
        str(fake_config.campplus_path) in message and "has 1 input(s)" in message and "upstream feeds a speech_tokenizer model 2" in message
    )
    assert "VOXLEDGER_COSYVOICE_SPEECH_TOKENIZER_ONNX" in message
    assert isinstance(info.value, VoxledgerError)
    FeatureExtractor(fake_config.campplus_path, fake_config.speech_tokenizer_path)  # the right files pass


def test_an_unreadable_onnx_file_is_named(fake_config: CosyVoice3Config, tmp_path: Path) -> None:
    bad = tmp_path / "speech_tokenizer_v3.onnx"
    bad.write_bytes(b"version https://git-lfs.github.com/spec/v1\n")  # an LFS pointer instead of the graph
    with pytest.raises(UpstreamError, match=r"speech_tokenizer ONNX .*speech_tokenizer_v3.onnx does not load"):
        FeatureExtractor(fake_config.campplus_path, bad)


def _reduce_mean_graph(path: Path, kind: str) -> Path:
    """A graph with upstream's inputs for ``kind`` whose output is the features' mean over one axis: for campplus
    (1, 80) floats instead of a 192-wide embedding, for the speech tokenizer (1, T) float logits instead of codes."""
    from voxledger.tasks.backends.cosyvoice3 import onnxproto as op

    if kind == "campplus":
        inputs = [op.value_info("input", op.FLOAT, (1, "T", 80))]
    else:
        inputs = [op.value_info("feats", op.FLOAT, (1, 128, "T")), op.value_info("feats_length", op.INT32, (1,))]
    out = "embedding" if kind == "campplus" else "indices"
    node = op.Node("ReduceMean", ("input" if kind == "campplus" else "feats",), (out,), {"axes": [1], "keepdims": 0})
    shape: tuple[int | str, ...] = (1, 80) if kind == "campplus" else (1, "T")
    path.write_bytes(op.model("bad", [node], inputs, [op.value_info(out, op.FLOAT, shape)], [], producer="test"))
    return path


def test_onnx_outputs_upstream_cannot_read_are_refused_naming_the_file(fake_config: CosyVoice3Config, tmp_path: Path) -> None:
    campplus = _reduce_mean_graph(tmp_path / "campplus.onnx", "campplus")
    with pytest.raises(UpstreamError, match=r"campplus.onnx returns float32 1x80; upstream reads a speaker embedding of 192 floats"):
        FeatureExtractor(campplus, fake_config.speech_tokenizer_path)
    tokenizer = _reduce_mean_graph(tmp_path / "speech_tokenizer_v3.onnx", "speech_tokenizer")
    with pytest.raises(UpstreamError, match=r"returns float32 1x100 \(not integer codes\); .*VOXLEDGER_COSYVOICE_SPEECH_TOKENIZER_ONNX"):
        FeatureExtractor(fake_config.campplus_path, tokenizer)


def test_the_install_fix_says_what_the_extra_installs_as_it_is() -> None:
    import tomllib

    from voxledger.tasks.backends.cosyvoice3 import upstream

    extra = tomllib.loads((Path(__file__).resolve().parents[4] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {r.split("==")[0].lower() for r in extra["cosyvoice3"]}
    assert upstream.extra_distributions() == names  # the installed metadata is this checkout's pyproject
    whisper = upstream.install_fix("whisper.tokenizer")
    assert whisper.startswith("pip install --no-deps --no-build-isolation 'openai-whisper==20231117'")
    assert "the cosyvoice3 extra does not install openai-whisper" in whisper and "voxledger[cosyvoice3]" not in whisper
    assert upstream.install_fix("tiktoken").endswith("(or all of them: pip install 'voxledger[cosyvoice3]')")
