"""``voxledger cosyvoice3 scaffold``: a random-weights model folder in Fun-CosyVoice3-0.5B's layout.

Built with upstream's own classes from a checkout, at the real widths (Qwen2 hidden 896 /
intermediate 4864 / 14 heads / vocabulary 151936, DiT dim 1024, HiFT as released); only the
layer counts shrink (``layers``: the Qwen2 layers and the DiT depth, each at most its released
count). It lets a user check an environment end to end, and CI run upstream's real code through
every stage, without the released weights (which cannot be downloaded here). Its audio is noise.

What is written, as the released folder holds it:

- ``cosyvoice3.yaml``: upstream's ``examples/libritts/cosyvoice3/conf/cosyvoice3.yaml`` with the
  DiT ``depth`` changed (and a first comment line saying so);
- ``CosyVoice-BlankEN/``: a transformers-4.x ``config.json`` (``"torch_dtype": "bfloat16"``),
  ``model.safetensors`` in bf16 (the tied LM head not stored), and a byte-level BPE tokenizer
  (``vocab.json``, ``merges.txt``, ``tokenizer_config.json``) that ``AutoTokenizer`` loads
  offline as a ``Qwen2Tokenizer``: 256 byte tokens, merges trained on a fixed English text,
  filler up to Qwen2's 151643 regular tokens, so ``<|endoftext|>`` is 151643 and upstream's
  ``CosyVoice3Tokenizer`` gives ``<|endofprompt|>`` 151646 as with the real tokenizer;
- ``llm.pt``, ``flow.pt``, ``hift.pt``: fp32 state dicts of the modules HyperPyYAML builds from
  that yaml (the yaml's ``__set_seed`` values replaced by the scaffold's seed for the build);
  ``llm.pt``'s Qwen2 part is the fp32 model BlankEN was rounded from (a fine-tuned LM in fp32,
  off the bf16 grid, as released);
- ``campplus.onnx`` / ``speech_tokenizer_v3.onnx``: stand-ins with upstream's signatures,
  written by `onnxproto` (no ``onnx`` package needed): Kaldi fbank ``input (1, T, 80)`` ->
  ``embedding (1, 192)``; whisper log-mel ``feats (1, 128, T)`` and ``feats_length (1,)`` int32
  -> ``indices (1, ceil(T / 4))`` int64 in [0, 6561) (25 Hz tokens);
- ``scaffold.json``: canonical JSON marking the folder as random weights (seed, layers, the
  checkout's commit and source digest, versions, every file's sha256). The preflight warns
  when it finds one.

``spk2info.pt`` is not written: ``CosyVoice3`` reads it only when it exists (speaker ids of
``inference_sft``, which CosyVoice3 does not use). Same arguments, same environment: same bytes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import random
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from voxledger.schemas.canonical import canonical_bytes
from voxledger.schemas.errors import UpstreamError
from voxledger.stores.hashing import sha256_file
from voxledger.tasks.backends.cosyvoice3 import manifest, onnxproto, upstream
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config

FORMAT = "voxledger-cosyvoice3-scaffold/1"
SCAFFOLD_FILE = "scaffold.json"
UPSTREAM_YAML = "examples/libritts/cosyvoice3/conf/cosyvoice3.yaml"
QWEN_LAYERS, DIT_DEPTH = 24, 22  # the released counts (Qwen2-0.5B; the yaml's DiT depth)
MAX_LAYERS = max(QWEN_LAYERS, DIT_DEPTH)
TEXT_VOCAB = 151936
QWEN_REGULAR_TOKENS = 151643  # ids below are BPE tokens; <|endoftext|>, <|im_start|>, <|im_end|> follow
QWEN_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
BPE_MERGES = 700
MAX_FIXES_NAMED = 4  # more missing modules than this: the message names them and the one install command
# CosyVoice-BlankEN's config.json as transformers 4.x writes it (Qwen2-0.5B widths); layer counts are set per scaffold
QWEN_CONFIG_4X: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643,
    "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02, "intermediate_size": 4864,
    "max_position_embeddings": 32768, "max_window_layers": QWEN_LAYERS, "model_type": "qwen2", "num_attention_heads": 14,
    "num_hidden_layers": QWEN_LAYERS, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.40.1",
    "use_cache": True, "use_sliding_window": False, "vocab_size": TEXT_VOCAB,
}  # fmt: skip
_CONFIG_ONLY_4X = ("architectures", "torch_dtype", "transformers_version")
_SEED_LINE = re.compile(r"^(__set_seed\d+: !apply:[\w.]+ \[)1986(\])\s*$", re.MULTILINE)
_DEPTH_LINE = re.compile(r"^(\s+depth: )22(\s*)$", re.MULTILINE)
# the text the byte-level BPE's merges are learnt from (fixed: the merges are part of the scaffold's bytes)
BPE_TEXT = (
    "You are a helpful assistant. The quick brown fox jumps over the lazy dog. "
    "She sells sea shells by the sea shore, and the shells she sells are surely sea shells. "
    "A short test sentence for the speech model, read slowly and clearly. "
    "Numbers like one, two, three and twenty seven are spelled out before they are spoken. "
    "The weather today is bright and windy, with a chance of rain later in the evening. "
    "Please call me back when you have a moment; I would like to talk about the project. "
    "Every training run records what it read, what it wrote and which code it ran. "
    "Listening tests compare two voices sentence by sentence, without telling which is which. "
    "It was the best of times, it was the worst of times, it was the age of wisdom. "
    "Good morning, good afternoon and good night: thank you for listening to this recording."
)
BUILD_IMPORTS = ("hyperpyyaml", "omegaconf", "einops", "x_transformers", "conformer", "diffusers", "whisper", "tiktoken",
                 "hydra", "lightning", "matplotlib", "gdown", "wget", "inflect", "modelscope", "pyworld", "tokenizers")  # fmt: skip


class _Rng:
    """Seeded numpy generators for the ONNX stand-ins, one stream per name."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def normal(self, stream: int, shape: tuple[int, ...], scale: float) -> np.ndarray:
        return (np.random.default_rng([self.seed, stream]).standard_normal(shape) * scale).astype(np.float32)


def _fail(message: str) -> UpstreamError:
    return UpstreamError(f"cosyvoice3 scaffold: {message}")


def missing_imports() -> list[str]:
    """Upstream's modules the build imports that do not import here, each as ``module (pip install ...)``.

    Imported for real (the build needs them next): a module that is present but fails to import
    (a hidden or broken install) counts as missing, named by the module that is not found.
    """
    missing: list[str] = []
    for name in BUILD_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            top = (exc.name or name).split(".", 1)[0] if isinstance(exc, ModuleNotFoundError) else name
            fix = "pip install tokenizers" if top == "tokenizers" else upstream.pip_fix(top)
            entry = f"{top} ({fix})"
            if entry not in missing:
                missing.append(entry)
    return missing


def check_target(out_dir: Path) -> None:
    """Refuse a target that is a file, a non-empty folder or under a file (nothing is ever overwritten)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise _fail(f"{out_dir} exists and is not a folder; give a new or empty folder")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise _fail(f"{out_dir} is not empty; give a new or empty folder (a scaffold never overwrites files)")
    parent = next((p for p in out_dir.absolute().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise _fail(f"{out_dir}: {parent} is a file, not a folder; give a folder path")


def check_checkout(checkout: Path) -> str:
    """The upstream yaml's text; raises naming a missing file or the missing imports with their install commands."""
    problems = upstream.missing_files(CosyVoice3Config(checkout_dir=checkout, model_dir=checkout / "__no_model__"))
    problems = [p for p in problems if "__no_model__" not in p and "onnx_path" not in p]
    if problems:
        raise _fail("; ".join(problems))
    yaml = checkout / UPSTREAM_YAML
    if not yaml.is_file():
        raise _fail(f"{yaml} is missing; the scaffold adapts upstream's CosyVoice3 recipe yaml (use FunAudioLLM/CosyVoice at ace7c47)")
    missing = missing_imports()
    if missing:
        names = [m.split(" ", 1)[0] for m in missing]
        each = f" ({'; '.join(m.split(' (', 1)[1].rstrip(')') for m in missing)})" if len(missing) <= MAX_FIXES_NAMED else ""
        raise _fail(
            f"upstream's import set is incomplete in {sys.executable}: missing {', '.join(names)}{each}; install all of it with "
            f"pip install -c constraints.txt 'voxledger[cosyvoice3]' && {upstream.pip_fix('whisper')} (docs/cosyvoice3.md)"
        )
    return yaml.read_text(encoding="utf-8")


def adapt_yaml(text: str, dit_depth: int) -> str:
    """Upstream's recipe yaml with the DiT depth set (the released folder's yaml is that recipe)."""
    new, n = _DEPTH_LINE.subn(rf"\g<1>{dit_depth}\g<2>", text)
    if n != 1 or "llm_input_size: 896" not in text:
        raise _fail(f"{UPSTREAM_YAML} is not upstream's CosyVoice3 yaml at ace7c47 (no single 'depth: 22' / 'llm_input_size: 896')")
    head = f"# voxledger cosyvoice3 scaffold: random weights, not a trained model. Upstream's {UPSTREAM_YAML} with DiT depth {dit_depth}.\n"
    return head + new


def _build_text(yaml_text: str, seed: int) -> str:
    text, n = _SEED_LINE.subn(rf"\g<1>{seed}\g<2>", yaml_text)
    if n == 0:
        raise _fail(f"{UPSTREAM_YAML} has no __set_seed entries; it is not upstream's CosyVoice3 yaml at ace7c47")
    return text


@contextmanager
def _global_rngs_kept() -> Iterator[None]:
    """The yaml reseeds python, numpy and torch: give this process its generators back afterwards."""
    py, npy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)


def _qwen_config(layers: int) -> dict[str, Any]:
    return {**QWEN_CONFIG_4X, "num_hidden_layers": layers, "max_window_layers": layers}


def _write_tokenizer(qwen_dir: Path) -> None:
    """A byte-level BPE in Qwen2's files; ids of the specials as in Qwen2 (filler tokens keep the regular range)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + BPE_MERGES, initial_alphabet=alphabet, show_progress=False)
    bpe.train_from_iterator([BPE_TEXT], trainer)
    model = json.loads(bpe.to_str())["model"]
    vocab: dict[str, int] = dict(sorted(model["vocab"].items(), key=lambda kv: kv[1]))
    vocab.update({f"<|scaffold_unused_{i}|>": i for i in range(len(vocab), QWEN_REGULAR_TOKENS)})
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (qwen_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    (qwen_dir / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{m}\n" for m in merges), encoding="utf-8")
    special = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": {str(QWEN_REGULAR_TOKENS + i): {"content": t, **special} for i, t in enumerate(QWEN_SPECIAL)},
        "additional_special_tokens": list(QWEN_SPECIAL[1:]),
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": QWEN_SPECIAL[0],
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": QWEN_SPECIAL[0],
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (qwen_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")


def _write_qwen(qwen_dir: Path, layers: int, seed: int) -> dict[str, torch.Tensor]:
    """BlankEN (bf16 safetensors, 4.x config); returns the fp32 state it was rounded from (llm.pt's Qwen2 part)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = _qwen_config(layers)
    torch.manual_seed(seed)
    model: torch.nn.Module = Qwen2ForCausalLM(Qwen2Config(**{k: v for k, v in cfg.items() if k not in _CONFIG_ONLY_4X}))
    state: dict[str, torch.Tensor] = model.to(torch.float32).state_dict()
    tied = {"lm_head.weight"} if cfg["tie_word_embeddings"] else set()
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in state.items() if k not in tied}, str(qwen_dir / "model.safetensors"),
              metadata={"format": "pt"})  # fmt: skip
    (qwen_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return state


def _fp32(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().float() if v.is_floating_point() else v.detach() for k, v in state.items()}


def _write_modules(model_dir: Path, yaml_text: str, seed: int, qwen_fp32: dict[str, torch.Tensor], checkout: Path) -> None:
    """Build the yaml's llm, flow and hift with upstream's classes; save their fp32 state dicts."""
    upstream.import_upstream(checkout)
    from hyperpyyaml import load_hyperpyyaml

    with upstream.upstream_code(f"building {UPSTREAM_YAML} from {checkout}"):
        parts = load_hyperpyyaml(_build_text(yaml_text, seed), overrides={"qwen_pretrain_path": str(model_dir / upstream.TOKENIZER_DIR)})
    llm = _fp32(parts["llm"].state_dict())
    prefix = "llm.model."
    qwen_keys = {k for k in llm if k.startswith(prefix)}
    if qwen_keys != {prefix + k for k in qwen_fp32}:
        raise _fail(f"upstream's Qwen2Encoder holds {sorted(qwen_keys)[:3]}..., not the Qwen2 model's keys; is the checkout at ace7c47?")
    llm.update({prefix + k: v for k, v in qwen_fp32.items()})  # tied entries stay one tensor (stored once)
    torch.save(llm, model_dir / "llm.pt")
    torch.save(_fp32(parts["flow"].state_dict()), model_dir / "flow.pt")
    torch.save(_fp32(parts["hift"].state_dict()), model_dir / "hift.pt")


def _write_onnx(model_dir: Path, seed: int) -> None:
    """The two feature extractors' stand-ins, with upstream's input / output signatures (see the module doc)."""
    rng, v, node, F, I32, I64 = _Rng(seed), onnxproto.value_info, onnxproto.Node, onnxproto.FLOAT, onnxproto.INT32, onnxproto.INT64
    campplus = onnxproto.model(
        "scaffold_campplus",
        [node("ReduceMean", ("input",), ("mean",), {"axes": [1], "keepdims": 0}), node("MatMul", ("mean", "w"), ("embedding",))],
        [v("input", F, (1, "T", 80))],
        [v("embedding", F, (1, 192))],
        [onnxproto.tensor("w", rng.normal(1, (80, 192), 0.1))],
        producer="voxledger-cosyvoice3-scaffold",
    )
    consts = [
        onnxproto.tensor("w", rng.normal(2, (128, 1), 128**-0.5)),
        onnxproto.tensor("axis", np.array([2], dtype=np.int64)),
        onnxproto.tensor("scale", np.array(1000.0, dtype=np.float32)),
        onnxproto.tensor("codes", np.array(6561, dtype=np.int64)),
    ]
    tokenizer = onnxproto.model(
        "scaffold_speech_tokenizer_v3",
        [
            node("AveragePool", ("feats",), ("pooled",), {"kernel_shape": [4], "strides": [4], "ceil_mode": 1}),
            node("Transpose", ("pooled",), ("frames",), {"perm": [0, 2, 1]}),
            node("MatMul", ("frames", "w"), ("proj",)),
            node("Squeeze", ("proj", "axis"), ("flat",)),
            node("Abs", ("flat",), ("mag",)),
            node("Mul", ("mag", "scale"), ("scaled",)),
            node("Floor", ("scaled",), ("floored",)),
            node("Cast", ("floored",), ("ints",), {"to": I64}),
            node("Mod", ("ints", "codes"), ("indices",)),
        ],
        [v("feats", F, (1, 128, "T")), v("feats_length", I32, (1,))],
        [v("indices", I64, (1, "N"))],
        consts,
        producer="voxledger-cosyvoice3-scaffold",
    )
    (model_dir / "campplus.onnx").write_bytes(campplus)
    (model_dir / "speech_tokenizer_v3.onnx").write_bytes(tokenizer)


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in ("torch", "transformers", "tokenizers", "safetensors", "HyperPyYAML"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def read_scaffold(model_dir: Path) -> dict[str, Any] | None:
    """The folder's ``scaffold.json`` (None when it is no scaffold; unreadable counts as a scaffold of unknown make)."""
    path = model_dir / SCAFFOLD_FILE
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"format": "unreadable"}
    return value if isinstance(value, dict) else {"format": "unreadable"}


def scaffold(out_dir: Path, layers: int, checkout: Path, seed: int = 0) -> dict[str, Any]:
    """Write the scaffold into ``out_dir`` (new or empty; written beside it, then moved in); return ``scaffold.json``'s content.

    Raises:
        UpstreamError: a bad target, a checkout without upstream's files, or a missing module of
            upstream's import set (each named with its install command); nothing is left behind.
    """
    if not 1 <= layers <= MAX_LAYERS:
        raise _fail(f"--layers {layers} is outside 1..{MAX_LAYERS} (Qwen2-0.5B has {QWEN_LAYERS} layers, the DiT {DIT_DEPTH})")
    if not 0 <= seed < 2**32:
        raise _fail(f"--seed {seed} is outside 0..{2**32 - 1}")
    check_target(out_dir)
    yaml_source = check_checkout(checkout)
    qwen_layers, dit_depth = min(layers, QWEN_LAYERS), min(layers, DIT_DEPTH)
    yaml_text = adapt_yaml(yaml_source, dit_depth)
    out_dir.absolute().parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.absolute().parent))
    try:
        qwen_dir = work / upstream.TOKENIZER_DIR
        qwen_dir.mkdir()
        (work / "cosyvoice3.yaml").write_text(yaml_text, encoding="utf-8")
        _write_tokenizer(qwen_dir)
        with _global_rngs_kept(), torch.no_grad():
            qwen_fp32 = _write_qwen(qwen_dir, qwen_layers, seed)
            _write_modules(work, yaml_text, seed, qwen_fp32, checkout)
        _write_onnx(work, seed)
        sources, count = upstream.source_digest(checkout)
        files = sorted(p for p in work.rglob("*") if p.is_file())
        info: dict[str, Any] = {
            "format": FORMAT,
            "random_weights": True,
            "note": "random weights built with upstream's classes at the released widths; not a trained model, its audio is noise",
            "seed": seed,
            "layers": {"requested": layers, "qwen2": qwen_layers, "dit": dit_depth},
            "checkout": {
                "commit": upstream.git_commit(checkout),
                "manifest_commit": manifest.load_manifest().upstream["commit"],
                "sources_sha256": sources,
                "source_files": count,
                "yaml": UPSTREAM_YAML,
            },
            "versions": _versions(),
            "files": {p.relative_to(work).as_posix(): sha256_file(p) for p in files},
        }
        (work / SCAFFOLD_FILE).write_bytes(canonical_bytes(info))
        umask = os.umask(0)
        os.umask(umask)
        for path in [work, *work.rglob("*")]:  # mkdtemp's 0700 and safetensors' 0600 would make the folder private
            path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)
        if out_dir.is_dir():
            out_dir.rmdir()  # empty (checked); the rename below puts the whole folder in place at once
        os.replace(work, out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return info
