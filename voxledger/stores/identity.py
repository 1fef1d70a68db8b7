"""Code and environment identity recorded in every receipt.

The code digest is the tree digest of voxledger's own source files (the ``.py`` files and page
assets of its packages, found where Python imports them from, so an editable checkout and an
installed wheel of the same code agree whatever their paths), and any edit changes every cache
key downstream.
"""

from __future__ import annotations

import hashlib
import importlib.util
import platform
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

from voxledger.schemas.base import CodeIdentity, Environment
from voxledger.schemas.canonical import canonical_digest

KEY_PACKAGES = (
    "voxledger",
    "torch",
    "transformers",
    "peft",
    "prefect",
    "pydantic",
    "duckdb",
    "jsonschema",
    "jiwer",
    "faster-whisper",
    "ctranslate2",
    "speechbrain",
    "numpy",
    "scipy",
    "safetensors",
)

PACKAGE_ROOTS = ("voxledger",)
SUBPACKAGES = ("voxledger.schemas", "voxledger.stores", "voxledger.tasks", "voxledger.flows", "voxledger.dashboards")
CODE_SUFFIXES = (".py", ".html", ".js", ".css")


def repo_root() -> Path:
    """The folder holding the package folders (the repository root for an editable install)."""
    import voxledger

    return Path(voxledger.__file__).resolve().parent.parent


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"package {name} is not importable")
    return Path(next(iter(spec.submodule_search_locations)))


@cache
def source_digest() -> str:
    """sha256 over (package-relative path, file sha256) of every source file of the packages."""
    entries: dict[str, str] = {}
    for name in ("voxledger", *SUBPACKAGES):
        base = _package_dir(name)
        prefix = name.replace(".", "/")
        nested = {_package_dir(s).resolve() for s in SUBPACKAGES if s != name and s.startswith(name + ".")}
        for path in sorted(base.rglob("*")):
            if path.suffix not in CODE_SUFFIXES or "__pycache__" in path.parts or not path.is_file():
                continue
            if any(path.resolve().is_relative_to(n) for n in nested):
                continue  # counted under its own package name
            entries[f"{prefix}/{path.relative_to(base).as_posix()}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return canonical_digest(sorted(entries.items()))


@cache
def code_identity() -> CodeIdentity:
    """Source digest plus git commit and dirty flag when the code sits in a git checkout."""
    root = repo_root()
    commit: str | None = None
    dirty: bool | None = None
    try:
        commit = (
            subprocess.run(
                ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            or None
        )
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", *PACKAGE_ROOTS],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        dirty = bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        pass  # not a git checkout (an installed wheel): the source digest still identifies the code
    return CodeIdentity(source_sha256=source_digest(), git_commit=commit, git_dirty=dirty)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@cache
def environment() -> Environment:
    """The environment block of a receipt: versions that can change results, no host names."""
    packages = {name: v for name in KEY_PACKAGES if (v := _version(name)) is not None}
    torch_version = packages.get("torch")
    cuda: str | None = None
    if "torch" in sys.modules:
        cuda = getattr(sys.modules["torch"].version, "cuda", None)
    return Environment(
        python=platform.python_version(),
        platform=f"{platform.system()}-{platform.machine()}",
        packages=packages,
        torch=torch_version,
        cuda=cuda,
        code=code_identity(),
    )
