"""The boundary to a CosyVoice checkout: preflight, identity digests, imports, strict weight loading.

Preflight checks every file the backend needs and raises once, listing each missing file and
how to get it. It then digests what decides the results: every ``.py`` file of the upstream
packages we import (``cosyvoice/`` and ``third_party/Matcha-TTS/matcha/``), the model yaml,
``llm.pt`` / ``flow.pt`` / ``hift.pt``, both ONNX feature extractors and the tokenizer files
of ``CosyVoice-BlankEN`` (its weight files are skipped: the strict ``llm.pt`` load overwrites
every parameter). `UpstreamIdentity.identity_sha256` is the digest of those digests, so an
edited checkout or a different weight file changes it; the git commit is recorded beside it
but not part of it (two commits with identical sources behave identically).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import pydoc
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from voxledger.schemas.base import Frozen, Sha256
from voxledger.schemas.canonical import canonical_digest, sha256_hex
from voxledger.schemas.errors import TrainingError, UpstreamError
from voxledger.stores.hashing import StatCache, hash_files
from voxledger.tasks.backends.cosyvoice3.compat import LM_DTYPE, lm_dtypes, to_lm_dtype
from voxledger.tasks.backends.cosyvoice3.config import (
    DEFAULT_MODEL_SUBDIR,
    ENV_MODEL,
    CosyVoice3Config,
)
from voxledger.tasks.backends.cosyvoice3.manifest import load_manifest

CHECKOUT_FILES = (
    "cosyvoice/__init__.py",
    "cosyvoice/cli/cosyvoice.py",
    "cosyvoice/cli/model.py",
    "cosyvoice/cli/frontend.py",
    "cosyvoice/llm/llm.py",
    "cosyvoice/tokenizer/tokenizer.py",
    "third_party/Matcha-TTS/matcha/__init__.py",
)
SOURCE_ROOTS = ("cosyvoice", "third_party/Matcha-TTS/matcha")
_MANIFEST = load_manifest()
ONNX_FILES = ("campplus.onnx", "speech_tokenizer_v3.onnx")  # configurable paths (`CosyVoice3Config`), checked apart
MODEL_FILES = tuple(f for f in _MANIFEST.folder_list("files") if f not in ONNX_FILES)
TOKENIZER_DIR = _MANIFEST.folder_list("qwen_dir")[0]
TOKENIZER_FILES = _MANIFEST.folder_list("qwen_files")  # the Qwen2 folder: tokenizer files and the bf16 weights
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
CHECKPOINT_COUNTERS = ("epoch", "step")  # upstream's save_model mixes these ints into the state dict
UNUSED_PARTS = ("flow", "hift", "hifigan")  # not built for LLM training (as upstream train.py does)
TIED_METADATA = "tied"  # safetensors metadata of a merged export: JSON {alias key: stored key} (tied weights stored once)


class UpstreamIdentity(Frozen):
    """What the checkout and model folder are, by content."""

    checkout_commit: str | None
    sources_sha256: Sha256
    source_files: int
    files_sha256: dict[str, Sha256]
    text_frontend: dict[str, str | None]

    @property
    def identity_sha256(self) -> str:
        """Digest of sources, files and the text front end (the commit excluded: equal sources behave equally)."""
        return canonical_digest({"sources": self.sources_sha256, "files": self.files_sha256, "text_frontend": self.text_frontend})


TTSFRD_RESOURCE = "pretrained_models/CosyVoice-ttsfrd/resource"  # where upstream's frontend.py initialises ttsfrd from


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def text_frontend(checkout: Path) -> dict[str, str | None]:
    """The text normaliser upstream's ``CosyVoiceFrontEnd`` will use here, as it chooses one.

    ttsfrd when it is installed and its resource folder is in the checkout, else wetext when it
    is installed, else none (text goes to the tokenizer un-normalised). It changes what the
    model is fed for numbers, dates and symbols, so it is part of the identity.
    """
    if importlib.util.find_spec("ttsfrd") is not None and (checkout / TTSFRD_RESOURCE).is_dir():
        return {"name": "ttsfrd", "version": _dist_version("ttsfrd")}
    if importlib.util.find_spec("wetext") is not None:
        return {"name": "wetext", "version": _dist_version("wetext")}
    return {"name": "none", "version": None}


def missing_files(config: CosyVoice3Config) -> list[str]:
    """Every missing file of the checkout and model folder (and a set ``onnx_path``), each with its fix."""
    problems: list[str] = []
    fetch = "clone it with `git clone --recursive https://github.com/FunAudioLLM/CosyVoice` (or run `git submodule update --init --recursive` in it)"
    get_model = (
        f"download Fun-CosyVoice3-0.5B into {config.model_dir} (default <checkout>/{DEFAULT_MODEL_SUBDIR}) or point {ENV_MODEL} at it"
    )
    if not config.checkout_dir.is_dir():
        return [f"CosyVoice checkout {config.checkout_dir} is not a folder; {fetch}"]
    problems += [f"{config.checkout_dir / f} is missing; {fetch}" for f in CHECKOUT_FILES if not (config.checkout_dir / f).is_file()]
    if not config.model_dir.is_dir():
        return [*problems, f"model folder {config.model_dir} is not a folder; {get_model}"]
    problems += [f"{config.model_dir / f} is missing; {get_model}" for f in MODEL_FILES if not (config.model_dir / f).is_file()]
    problems += [
        f"{config.model_dir / TOKENIZER_DIR / f} is missing (Qwen2 tokenizer / weights); {get_model}"
        for f in TOKENIZER_FILES
        if not (config.model_dir / TOKENIZER_DIR / f).is_file()
    ]
    for what, path in (("campplus speaker-embedding ONNX", config.campplus_path), ("speech tokenizer ONNX", config.speech_tokenizer_path)):
        if not path.is_file():
            problems.append(f"{what} {path} is missing; it ships with Fun-CosyVoice3-0.5B ({get_model})")
    if os.environ.get("onnx_path"):
        problems.append(
            "environment variable onnx_path is set: upstream then extracts speech tokens online inside the "
            "model; voxledger precomputes them, so unset onnx_path"
        )
    return problems


def git_commit(checkout: Path) -> str | None:
    """HEAD of the checkout when it is a git work tree (None otherwise or without git)."""
    if not (checkout / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def source_digest(checkout: Path) -> tuple[str, int]:
    """sha256 over (relative path, sha256) of every upstream ``.py`` file we may import."""
    entries = []
    for top in SOURCE_ROOTS:
        for path in sorted((checkout / top).rglob("*.py")):
            if "__pycache__" not in path.parts:
                entries.append([path.relative_to(checkout).as_posix(), sha256_hex(path.read_bytes())])
    return canonical_digest(entries), len(entries)


def _identity_files(config: CosyVoice3Config) -> dict[str, Path]:
    files = {name: config.model_dir / name for name in MODEL_FILES}
    files["campplus.onnx"] = config.campplus_path
    files["speech_tokenizer_v3.onnx"] = config.speech_tokenizer_path
    for path in sorted((config.model_dir / TOKENIZER_DIR).iterdir()):
        if path.is_file() and path.suffix not in WEIGHT_SUFFIXES:
            files[f"{TOKENIZER_DIR}/{path.name}"] = path
    return files


def preflight(config: CosyVoice3Config) -> UpstreamIdentity:
    """Check every needed file, then digest the checkout and the model folder.

    Raises:
        TrainingError: listing every missing file (and a set ``onnx_path``) with how to fix it.
    """
    problems = missing_files(config)
    if problems:
        raise TrainingError("CosyVoice3 preflight failed:\n- " + "\n- ".join(problems))
    sources, count = source_digest(config.checkout_dir)
    files = _identity_files(config)
    digests = hash_files(list(files.values()), cache=StatCache(config.cache_dir / "stat-cache.sqlite"))
    return UpstreamIdentity(
        checkout_commit=git_commit(config.checkout_dir),
        sources_sha256=sources,
        source_files=count,
        files_sha256={name: digests[path] for name, path in sorted(files.items())},
        text_frontend=text_frontend(config.checkout_dir),
    )


def pip_fix(module: str) -> str:
    """The install command for a missing third-party module of upstream's import set."""
    top = module.split(".", 1)[0]
    pip: dict[str, str] = _MANIFEST.imports["pip_names"]  # type: ignore[assignment]
    flags: dict[str, str] = _MANIFEST.imports.get("pip_flags", {})  # type: ignore[assignment]
    return " ".join(filter(None, ["pip install", flags.get(top), f"'{pip.get(top, top)}'"]))


EXTRA = "cosyvoice3"
NOT_IN_EXTRA_WHY = {
    "whisper": "openai-whisper's sdist does not build in pip's isolated environment and its dependencies pull triton, "
    "after which torch 2.13 cannot import transformers' Qwen2",
}


def extra_distributions() -> set[str]:
    """Distribution names (lower case) the installed voxledger's ``cosyvoice3`` extra installs (empty when voxledger is not installed)."""
    from packaging.requirements import Requirement

    try:
        requires = importlib.metadata.requires("voxledger") or []
    except importlib.metadata.PackageNotFoundError:
        return set()
    wanted = set()
    for line in requires:
        req = Requirement(line)
        if req.marker is not None and req.marker.evaluate({"extra": EXTRA}) and not req.marker.evaluate({"extra": ""}):
            wanted.add(req.name.lower())
    return wanted


def install_fix(module: str) -> str:
    """`pip_fix`, and whether the ``cosyvoice3`` extra installs the module too, as it is: only where it does."""
    top = module.split(".", 1)[0]
    pip: dict[str, str] = _MANIFEST.imports["pip_names"]  # type: ignore[assignment]
    dist = re.split(r"[=<>!~ \[]", pip.get(top, top), maxsplit=1)[0].lower()
    if dist in extra_distributions():
        return f"{pip_fix(module)} (or all of them: pip install 'voxledger[{EXTRA}]')"
    why = NOT_IN_EXTRA_WHY.get(top, "it is not part of it")
    return f"{pip_fix(module)} (the {EXTRA} extra does not install {dist}: {why})"


def upstream_failure(exc: BaseException, what: str) -> UpstreamError:
    """One clear error for an import failure inside upstream's code (``what``: the step that failed).

    hyperpyyaml's ``pydoc.locate`` wraps an import error of the module a yaml tag names in
    ``pydoc.ErrorDuringImport`` (not an ImportError); it is unwrapped to name that module and
    the module that is missing.
    """
    where, cause = what, exc
    if isinstance(exc, pydoc.ErrorDuringImport) and exc.value is not None:
        where, cause = f"{what}: importing upstream module {exc.filename}", exc.value
    preflight_hint = "then check the environment with `voxledger cosyvoice3 preflight CHECKOUT MODEL_DIR`"
    if isinstance(cause, ModuleNotFoundError) and cause.name:
        top = cause.name.split(".", 1)[0]
        if top in ("cosyvoice", "matcha"):
            fix = "the checkout is incomplete: run `git submodule update --init --recursive` in it (Matcha-TTS)"
        else:
            fix = install_fix(cause.name)
        return UpstreamError(f"{where} failed: upstream needs module {cause.name!r}, which is not installed; {fix}, {preflight_hint}")
    missing = re.fullmatch(r"There is no such \w+ as ([\w.]+)", str(cause))  # hyperpyyaml: pydoc.locate found nothing
    if missing:
        name = missing.group(1)
        fix = (
            "the Matcha-TTS submodule is missing: run `git submodule update --init --recursive` in the checkout"
            if name.startswith("matcha.")
            else f"the checkout does not define it: use FunAudioLLM/CosyVoice at {_MANIFEST.upstream['commit']} (the model yaml names it)"
        )
        return UpstreamError(f"{where} failed: the yaml names {name}, which is not importable; {fix}, {preflight_hint}")
    return UpstreamError(
        f"{where} failed inside upstream's code: {type(cause).__name__}: {cause}; check that the checkout is "
        f"FunAudioLLM/CosyVoice at {_MANIFEST.upstream['commit']} with its submodule, {preflight_hint}"
    )


@contextmanager
def upstream_code(what: str) -> Iterator[None]:
    """Turn an import failure inside upstream's code into `UpstreamError` (never 'a defect in voxledger')."""
    try:
        yield
    except (ImportError, pydoc.ErrorDuringImport) as exc:
        raise upstream_failure(exc, what) from exc


def import_upstream(checkout: Path) -> Any:
    """Import ``cosyvoice`` from ``checkout`` (and ``matcha`` from its submodule); return the module.

    Raises:
        TrainingError: ``cosyvoice`` is already imported from somewhere else in this process.
    """
    root = checkout.resolve()
    for path in (root / "third_party" / "Matcha-TTS", root):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    with upstream_code(f"importing cosyvoice from {root}"):
        import cosyvoice

    where = Path(cosyvoice.__file__).resolve().parent
    if where != root / "cosyvoice":
        raise TrainingError(
            f"module cosyvoice is already imported from {where}, not from the configured checkout {root}; use one checkout per process"
        )
    return cosyvoice


def load_model_yaml(config: CosyVoice3Config, *, build_unused: bool = False) -> dict[str, Any]:
    """The model folder's ``cosyvoice3.yaml`` through HyperPyYAML, as upstream loads it.

    ``qwen_pretrain_path`` points at ``<model_dir>/CosyVoice-BlankEN``; unless ``build_unused``,
    the flow and vocoder entries are overridden to None so they are not built (upstream's
    train.py does the same). Loading the yaml reseeds the global RNGs (its ``__set_seed``
    entries): reseed afterwards.
    """
    import_upstream(config.checkout_dir)
    from hyperpyyaml import load_hyperpyyaml

    path = config.model_dir / "cosyvoice3.yaml"
    text = path.read_text(encoding="utf-8")
    top = set(re.findall(r"^([A-Za-z_]\w*)\s*:", text, flags=re.MULTILINE))
    if "qwen_pretrain_path" not in top or "llm" not in top:
        raise TrainingError(f"{path} has no top-level 'llm' or 'qwen_pretrain_path' entry; it is not a CosyVoice3 model yaml")
    overrides: dict[str, Any] = {"qwen_pretrain_path": str(config.model_dir / TOKENIZER_DIR)}
    if not build_unused:
        overrides.update({k: None for k in UNUSED_PARTS if k in top})
    with upstream_code(f"loading {path}"):
        return dict(load_hyperpyyaml(text, overrides=overrides))


def qwen_config_dtype(qwen_dir: Path) -> str | None:
    """The dtype a Qwen2 folder's ``config.json`` declares (``torch_dtype`` in 4.x, ``dtype`` in 5.x)."""
    try:
        cfg = json.loads((qwen_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = cfg.get("torch_dtype", cfg.get("dtype"))
    return str(value) if value is not None else None


def check_lm_dtype(llm: torch.nn.Module, where: str) -> None:
    """Raise unless every LM parameter is `LM_DTYPE` (the backend's one dtype policy)."""
    found = lm_dtypes(llm)
    if found != {LM_DTYPE}:
        raise TrainingError(
            f"{where}: the CosyVoice3 LM holds parameters of dtypes {sorted(map(str, found))}; the backend keeps "
            f"it in {LM_DTYPE} (cast it with compat.to_lm_dtype before loading weights)"
        )


def build_llm(config: CosyVoice3Config) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The upstream ``CosyVoice3LM`` built from the yaml, cast to `LM_DTYPE`, weights not yet loaded.

    Upstream's ``Qwen2Encoder`` loads ``CosyVoice-BlankEN`` in the checkpoint's dtype (bf16 under
    transformers 5.x); the cast makes the LM one dtype before ``llm.pt`` is loaded into it.

    Raises:
        TrainingError: the yaml's ``llm`` is not a ``cosyvoice.llm.llm.CosyVoice3LM``.
    """
    configs = load_model_yaml(config)
    with upstream_code("importing cosyvoice.llm.llm"):
        from cosyvoice.llm.llm import CosyVoice3LM

    llm = configs["llm"]
    if not isinstance(llm, CosyVoice3LM):
        raise TrainingError(
            f"{config.model_dir / 'cosyvoice3.yaml'}: 'llm' is a {type(llm).__name__}, not CosyVoice3LM; "
            "use the Fun-CosyVoice3-0.5B model folder"
        )
    to_lm_dtype(llm)
    check_lm_dtype(llm, f"{config.model_dir / 'cosyvoice3.yaml'}")
    return llm, configs


def read_llm_state(path: Path) -> dict[str, torch.Tensor]:
    """An LLM state dict from ``llm.pt`` (torch, weights only) or ``llm.safetensors`` (tied keys restored).

    Upstream training checkpoints carry int ``epoch``/``step`` entries: they are dropped. Any
    other non-tensor entry is an error.
    """
    if path.suffix == ".safetensors":
        raw = load_file(str(path))
        with safe_open(str(path), framework="pt") as f:
            tied = json.loads((f.metadata() or {}).get(TIED_METADATA, "{}"))
        for alias, kept in sorted(tied.items()):
            if alias in raw or kept not in raw:
                raise TrainingError(f"{path}: tied entry {alias} -> {kept} does not fit its tensors; re-export it")
            raw[alias] = raw[kept]  # one tensor under both names, as in llm.pt
    else:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    state = {k: v for k, v in raw.items() if not (k in CHECKPOINT_COUNTERS and isinstance(v, int | float))}
    odd = sorted(k for k, v in state.items() if not isinstance(v, torch.Tensor))
    if odd:
        raise TrainingError(f"{path}: entries {odd[:5]} are not tensors; expected an LLM state dict (upstream llm.pt)")
    return state


def load_llm_strict(llm: torch.nn.Module, state: dict[str, torch.Tensor], source: Path) -> None:
    """``load_state_dict(strict=True)`` with an error that names the file and the differing keys."""
    expected = set(llm.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise TrainingError(
            f"{source} does not fit the CosyVoice3LM of the model yaml: {len(missing)} missing keys "
            f"{missing[:5]}, {len(unexpected)} unexpected keys {unexpected[:5]}"
        )
    llm.load_state_dict(state, strict=True)
