"""Code and environment identity recorded in every receipt.

The code digest is the tree digest of voxledger's own source files (the ``.py`` files of its
packages), so two checkouts with the same code agree whatever their paths, and any edit changes
every cache key downstream.
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

from voxledger.schemas.base import CodeIdentity, Environment
from voxledger.schemas.canonical import canonical_digest

KEY_PACKAGES = (
    "voxledger", "torch", "transformers", "peft", "prefect", "pydantic", "duckdb", "jsonschema",
    "jiwer", "faster-whisper", "ctranslate2", "speechbrain", "numpy", "scipy", "safetensors",
)  # fmt: skip

PACKAGE_ROOTS = ("voxledger", "schemas", "stores", "tasks", "flows", "dashboards")


def repo_root() -> Path:
    """The folder holding the package folders (the repository root for an editable install)."""
    import voxledger

    return Path(voxledger.__file__).resolve().parent.parent


@cache
def source_digest() -> str:
    """sha256 over (relative path, file sha256) of every package source file."""
    root = repo_root()
    entries = []
    for top in PACKAGE_ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            entries.append([path.relative_to(root).as_posix(), hashlib.sha256(path.read_bytes()).hexdigest()])
    return canonical_digest(entries)


@cache
def code_identity() -> CodeIdentity:
    """Source digest plus git commit and dirty flag when the code sits in a git checkout."""
    root = repo_root()
    commit: str | None = None
    dirty: bool | None = None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip() or None
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", *PACKAGE_ROOTS],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
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
