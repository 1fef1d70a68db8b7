"""`voxledger cosyvoice3 scaffold` without upstream's import set: ONNX stand-ins, tokenizer, refusals, preflight mark.

The whole build (upstream's classes from a real checkout, the cosyvoice3 extra) is in
`test_real_chain.py`; these parts need only voxledger's own dependencies.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from click.testing import CliRunner

from voxledger.cli import main
from voxledger.schemas.canonical import canonical_bytes
from voxledger.tasks.backends.cosyvoice3 import onnxproto, scaffold
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.backends.cosyvoice3.environment import check_environment
from voxledger.tasks.backends.cosyvoice3.features import onnx_signature_problems

from .fake_model import ASSETS


def _fake_assets(name: str) -> bytes:
    """The fake tree's two graphs (made with the onnx package, build_onnx.py), described again for `onnxproto`."""
    node, v, F = onnxproto.Node, onnxproto.value_info, onnxproto.FLOAT
    if name == "campplus.onnx":
        w = (np.random.RandomState(0).randn(80, 192) * 0.1).astype(np.float32)
        return onnxproto.model(
            "fake_campplus",
            [node("ReduceMean", ("fbank",), ("mean",), {"axes": [1], "keepdims": 0}), node("MatMul", ("mean", "w"), ("embedding",))],
            [v("fbank", F, (1, "T", 80))],
            [v("embedding", F, (1, 192))],
            [onnxproto.tensor("w", w)],
            producer="voxledger-test-fixture",
        )
    w = (np.random.RandomState(1).randn(128, 1) / np.sqrt(128)).astype(np.float32)
    consts = [onnxproto.tensor("w", w), onnxproto.tensor("axis", np.array([2], dtype=np.int64)),
              onnxproto.tensor("scale", np.array(1000.0, dtype=np.float32)), onnxproto.tensor("codes", np.array(6561, dtype=np.int64))]  # fmt: skip
    nodes = [node("AveragePool", ("feats",), ("pooled",), {"kernel_shape": [4], "strides": [4], "ceil_mode": 1}),
             node("Transpose", ("pooled",), ("frames",), {"perm": [0, 2, 1]}), node("MatMul", ("frames", "w"), ("proj",)),
             node("Squeeze", ("proj", "axis"), ("flat",)), node("Abs", ("flat",), ("mag",)), node("Mul", ("mag", "scale"), ("scaled",)),
             node("Floor", ("scaled",), ("floored",)), node("Cast", ("floored",), ("ints",), {"to": onnxproto.INT64}),
             node("Mod", ("ints", "codes"), ("indices",))]  # fmt: skip
    return onnxproto.model("fake_speech_tokenizer_v3", nodes, [v("feats", F, (1, 128, "T")), v("feats_length", onnxproto.INT32, (1,))],
                           [v("indices", onnxproto.INT64, (1, "N"))], consts, producer="voxledger-test-fixture")  # fmt: skip


@pytest.mark.parametrize("name", ["campplus.onnx", "speech_tokenizer_v3.onnx"])
def test_onnx_writer_gives_the_onnx_packages_bytes(name: str) -> None:
    assert _fake_assets(name) == (ASSETS / name).read_bytes()


def test_onnx_stand_ins_have_upstreams_signatures_and_follow_the_seed(tmp_path: Path) -> None:
    for seed in (0, 1):
        (tmp_path / str(seed)).mkdir()
        scaffold._write_onnx(tmp_path / str(seed), seed)
    sessions = {}
    for kind, name in (("campplus", "campplus.onnx"), ("speech_tokenizer", "speech_tokenizer_v3.onnx")):
        sessions[kind] = onnxruntime.InferenceSession(str(tmp_path / "0" / name), providers=["CPUExecutionProvider"])
        assert onnx_signature_problems(sessions[kind], kind, tmp_path / name) == []
        assert (tmp_path / "0" / name).read_bytes() != (tmp_path / "1" / name).read_bytes()
    assert [i.name for i in sessions["speech_tokenizer"].get_inputs()] == ["feats", "feats_length"]
    assert [i.name for i in sessions["campplus"].get_inputs()] == ["input"]
    feats = np.random.default_rng(0).standard_normal((1, 128, 301)).astype(np.float32)
    (tokens,) = sessions["speech_tokenizer"].run(None, {"feats": feats, "feats_length": np.array([301], dtype=np.int32)})
    assert tokens.shape == (1, math.ceil(301 / 4)) and tokens.dtype == np.int64 and 0 <= tokens.min() and tokens.max() < 6561
    assert len(np.unique(tokens)) > 20  # not a constant: prompts give varied speech tokens
    (emb,) = sessions["campplus"].run(None, {"input": feats[:, :80, :].transpose(0, 2, 1).copy()})
    assert emb.shape == (1, 192) and np.isfinite(emb).all()


def test_tokenizer_loads_offline_with_qwen2s_special_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        scaffold._write_tokenizer(tmp_path / d)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["merges.txt", "tokenizer_config.json", "vocab.json"]
    assert all((tmp_path / "a" / p).read_bytes() == (tmp_path / "b" / p).read_bytes() for p in ("merges.txt", "vocab.json"))
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "a"))
    assert type(tok).__name__ == "Qwen2Tokenizer" and tok.convert_tokens_to_ids("<|endoftext|>") == 151643
    # what upstream's CosyVoice3Tokenizer does next (cosyvoice/tokenizer/tokenizer.py): its first added tokens
    tok.add_special_tokens({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                            "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|endofprompt|>", "[breath]"]})  # fmt: skip
    text = "You are a helpful assistant.<|endofprompt|>The quick fox, 27 émigrés."
    ids = tok([text], return_tensors="pt")["input_ids"][0].tolist()
    assert 151646 in ids and len(ids) < len(text.encode()) - 20  # one id for the marker; merges shorten the rest
    assert tok.decode(ids) == text


def _run(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["cosyvoice3", "scaffold", *args])
    return res.exit_code, res.output


def test_bad_targets_and_layers_are_one_line_and_write_nothing(tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine", encoding="utf-8")
    a_file = tmp_path / "file"
    a_file.write_text("x", encoding="utf-8")
    checkout = tmp_path / "nothing"
    cases = [
        ([str(busy), "--layers", "1", "--checkout", str(checkout)], [f"{busy} is not empty"]),
        ([str(a_file), "--layers", "1", "--checkout", str(checkout)], [f"{a_file} exists and is not a folder"]),
        ([str(a_file / "sub"), "--layers", "1", "--checkout", str(checkout)], [f"{a_file} is a file"]),
        ([str(tmp_path / "new"), "--layers", "0", "--checkout", str(checkout)], ["--layers 0 is outside 1..24"]),
        (
            [str(tmp_path / "new"), "--layers", "1", "--checkout", str(checkout)],
            [f"CosyVoice checkout {checkout} is not a folder", "git clone"],
        ),
    ]
    for args, named in cases:
        code, out = _run(args)
        assert code != 0 and out.startswith("Error: UpstreamError: cosyvoice3 scaffold: ") and out.count("\n") == 1, out
        assert all(n in out for n in named) and "Traceback" not in out and "defect" not in out, out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy", "file"] and (busy / "keep.txt").read_text(encoding="utf-8") == "mine"


def test_missing_imports_are_named_with_their_install_commands(
    real_checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for hidden in ("whisper", "hydra"):
        monkeypatch.setitem(sys.modules, hidden, None)  # an environment where they do not import
    code, out = _run([str(tmp_path / "new"), "--layers", "1", "--checkout", str(real_checkout)])
    assert code != 0 and out.count("\n") == 1, out
    missing = scaffold.missing_imports()  # whisper and hydra, and the rest of the extra where it is not installed
    assert "whisper (pip install --no-deps --no-build-isolation 'openai-whisper==20231117')" in missing
    assert "hydra (pip install 'hydra-core==1.3.2')" in missing
    assert f"missing {', '.join(m.split(' ', 1)[0] for m in missing)}" in out and "[... " not in out
    assert "pip install -c constraints.txt 'voxledger[cosyvoice3]' && pip install --no-deps --no-build-isolation" in out
    assert not (tmp_path / "new").exists() and list(tmp_path.iterdir()) == []


def test_no_checkout_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOXLEDGER_COSYVOICE_DIR", raising=False)
    code, out = _run([str(tmp_path / "new"), "--layers", "1"])
    assert code != 0 and "pass --checkout PATH or set VOXLEDGER_COSYVOICE_DIR" in out and out.count("\n") == 1


def test_preflight_warns_that_a_scaffold_is_random_weights(fake_config: CosyVoice3Config, tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(fake_config.model_dir, model)
    config = CosyVoice3Config(checkout_dir=fake_config.checkout_dir, model_dir=model, work_dir=tmp_path / "work")
    assert [f for f in check_environment(config).findings if f.id == "scaffold-model"] == []
    (model / scaffold.SCAFFOLD_FILE).write_bytes(canonical_bytes({"format": scaffold.FORMAT, "random_weights": True, "seed": 7,
                                                                 "layers": {"requested": 2, "qwen2": 2, "dit": 2}}))  # fmt: skip
    report = check_environment(config)
    (warn,) = [f for f in report.findings if f.id == "scaffold-model"]
    assert warn.severity == "warning" and "random weights, seed 7, Qwen2 layers 2, DiT depth 2" in warn.message
    assert warn not in report.errors and json.loads((model / scaffold.SCAFFOLD_FILE).read_text())["seed"] == 7
