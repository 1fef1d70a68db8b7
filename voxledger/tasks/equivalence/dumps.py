"""Read stage dumps written by runtimes: raw little-endian ``.f32``/``.i32``, ``.npy``, ``.npz``.

Raw files carry no header (as C++ ports write them with ``fwrite``): ``.f32`` holds float32
values, ``.i32`` int32 token ids, both little-endian. A raw mel dump is frames x bins, so its row
width comes from ``cols``. In an ``.npz`` archive each named array is one stage.

Shapes are normalised per kind: tokens and pcm become 1-D and mel 2-D by dropping leading axes of
size 1 (``(1, L)`` as ``torch`` emits it equals the ``(L,)`` a C++ port writes); any other shape is
an error. Arrays come back in their stored dtype (so reports show it). Every bad input is
an ``EquivalenceError`` naming the stage and the file.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from voxledger.schemas.equivalence import FLOAT_KINDS, StageKind
from voxledger.schemas.errors import EquivalenceError

RAW_DTYPES: dict[str, np.dtype] = {".f32": np.dtype("<f4"), ".i32": np.dtype("<i4")}
DUMP_SUFFIXES: tuple[str, ...] = (".f32", ".i32", ".npy", ".npz")
_NDIM = {"tokens": 1, "pcm": 1, "mel": 2}


@dataclass(frozen=True)
class DumpSource:
    """Where one stage lives: a file, or a named array inside an ``.npz`` archive."""

    path: Path
    member: str | None = None

    @property
    def label(self) -> str:
        return f"{self.path}[{self.member}]" if self.member else str(self.path)


@dataclass(frozen=True)
class DumpIndex:
    """The dumps of one directory by stage name, and the entries that are not dumps."""

    stages: dict[str, list[DumpSource]] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)


def discover_dumps(directory: Path | str) -> DumpIndex:
    """Index the stage dumps directly inside ``directory`` (not recursive).

    A file ``<stage>.f32|.i32|.npy`` is one stage; every array of an ``.npz`` file is a stage
    named by the array. Raises ``EquivalenceError`` if the directory is missing or an ``.npz``
    cannot be opened.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise EquivalenceError(f"dump directory {directory} does not exist or is not a directory")
    index = DumpIndex()
    for entry in sorted(directory.iterdir()):
        if not entry.is_file() or entry.suffix not in DUMP_SUFFIXES:
            index.other.append(entry.name)
        elif entry.suffix == ".npz":
            for member in _npz_members(entry):
                index.stages.setdefault(member, []).append(DumpSource(entry, member))
        else:
            index.stages.setdefault(entry.stem, []).append(DumpSource(entry))
    return index


def load_dump(
    path: Path | str,
    *,
    kind: StageKind,
    cols: int | None = None,
    stage: str | None = None,
    member: str | None = None,
) -> np.ndarray:
    """Read one stage dump and check it is usable for a ``kind`` stage.

    Args:
        path: a ``.f32``, ``.i32``, ``.npy`` or ``.npz`` file.
        kind: the stage kind; decides the allowed dtype and shape.
        cols: row width for raw files (mel bins; logits vocabulary), also checked against the
            last axis of ``.npy``/``.npz`` arrays.
        stage: stage name used in messages (default: the npz member, else the file stem).
        member: array name inside an ``.npz`` (default: ``stage``, else ``kind``).

    Returns: the array in its stored dtype (``.i32`` -> int32, ``.f32`` -> float32), native byte
        order, shape normalised for ``kind``; float values are finite everywhere.

    Raises: ``EquivalenceError`` naming stage and file for a missing, empty, truncated or
    unreadable file, a wrong dtype or shape, or NaN/Inf values.
    """
    path = Path(path)
    if path.suffix == ".npz":
        member = member or stage or kind
    stage = stage or member or path.stem
    where = f"stage {stage!r} ({path})"
    if not path.is_file():
        raise EquivalenceError(f"{where}: dump file does not exist or is not a regular file")
    if path.suffix in RAW_DTYPES:
        array = _read_raw(path, kind, cols, where)
    elif path.suffix == ".npy":
        array = _read_npy(path, where)
    elif path.suffix == ".npz":
        where = f"stage {stage!r} ({path}[{member}])"
        array = _read_npz_member(path, member or kind, where)
    else:
        raise EquivalenceError(f"{where}: unsupported suffix {path.suffix!r}; use one of {', '.join(DUMP_SUFFIXES)}")
    return conform_array(array, kind=kind, cols=cols, where=where)


def conform_array(array: np.ndarray, *, kind: StageKind, cols: int | None, where: str) -> np.ndarray:
    """Check dtype, shape and finiteness of an in-memory stage array; ``where`` prefixes errors."""
    if array.size == 0:
        raise EquivalenceError(f"{where}: the dump is empty (shape {array.shape}); nothing to compare")
    if array.ndim == 0:
        raise EquivalenceError(f"{where}: the dump is a scalar; a stage needs at least one axis")
    if kind in FLOAT_KINDS:
        if not np.issubdtype(array.dtype, np.floating):
            raise EquivalenceError(
                f"{where}: dtype {array.dtype} but a {kind} stage needs floating point values; "
                f"dump float32 (or check the stage kind in the plan)"
            )
    elif not np.issubdtype(array.dtype, np.integer) or not np.can_cast(array.dtype, np.int64):
        raise EquivalenceError(f"{where}: dtype {array.dtype} but a tokens stage needs integer ids; dump int32")
    array = _normalise_shape(array, kind, cols, where)
    if kind in FLOAT_KINDS:
        check_finite(array, where)
    return array


def check_finite(array: np.ndarray, where: str) -> None:
    """Raise ``EquivalenceError`` with the NaN/Inf counts and the first bad index, if any."""
    bad = ~np.isfinite(array)
    if not bad.any():
        return
    first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), array.shape))
    n_nan = int(np.isnan(array).sum())
    n_inf = int(bad.sum()) - n_nan
    raise EquivalenceError(
        f"{where}: {n_nan} NaN and {n_inf} Inf values among {array.size}; first at index {first} "
        f"(value {array[first]}); fix the runtime that produced it before comparing"
    )


def _read_raw(path: Path, kind: StageKind, cols: int | None, where: str) -> np.ndarray:
    dtype = RAW_DTYPES[path.suffix]
    wanted = ".i32" if kind == "tokens" else ".f32"
    if path.suffix != wanted:
        needs = "int32 ids (.i32)" if kind == "tokens" else "float32 values (.f32)"
        raise EquivalenceError(
            f"{where}: a {path.suffix} file holds {dtype.name} values but a {kind} stage needs "
            f"{needs}; dump the right type or fix the stage kind in the plan"
        )
    size = path.stat().st_size
    if size == 0:
        raise EquivalenceError(f"{where}: the file is empty (0 bytes); nothing to compare")
    if size % dtype.itemsize:
        raise EquivalenceError(
            f"{where}: {size} bytes is not a multiple of {dtype.itemsize} "
            f"(one {dtype.name} value); the file is truncated or not a raw {path.suffix} dump"
        )
    n_values = size // dtype.itemsize
    if cols is not None and n_values % cols:
        raise EquivalenceError(
            f"{where}: {n_values} values is not a whole number of rows of {cols} "
            f"({n_values % cols} left over); the file is truncated or cols={cols} is wrong"
        )
    try:
        values = np.fromfile(path, dtype=dtype)
    except OSError as exc:
        raise EquivalenceError(f"{where}: cannot read: {exc}") from exc
    values = values.astype(dtype.newbyteorder("="), copy=False)
    return values.reshape(-1, cols) if cols is not None else values


def _read_npy(path: Path, where: str) -> np.ndarray:
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise EquivalenceError(f"{where}: not a readable .npy file: {exc}") from exc
    if not isinstance(loaded, np.ndarray):
        raise EquivalenceError(f"{where}: expected a .npy array, found {type(loaded).__name__}")
    return loaded


def _npz_members(path: Path) -> list[str]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return list(archive.files)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, AttributeError) as exc:
        raise EquivalenceError(f"archive {path}: not a readable .npz file: {exc}") from exc


def _read_npz_member(path: Path, member: str, where: str) -> np.ndarray:
    try:
        with np.load(path, allow_pickle=False) as archive:
            if member not in archive.files:
                raise EquivalenceError(f"{where}: no array named {member!r} in the archive; it holds {archive.files}")
            return np.asarray(archive[member])
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, AttributeError) as exc:
        raise EquivalenceError(f"{where}: not a readable .npz member: {exc}") from exc


def _normalise_shape(array: np.ndarray, kind: StageKind, cols: int | None, where: str) -> np.ndarray:
    ndim = _NDIM.get(kind)
    if ndim is not None:
        while array.ndim > ndim and array.shape[0] == 1:
            array = array[0]
        if array.ndim != ndim:
            layout = "1-D" if ndim == 1 else "2-D (frames x bins)"
            raise EquivalenceError(f"{where}: shape {array.shape} but a {kind} stage is {layout}; reshape the dump")
    if cols is not None and array.shape[-1] != cols:
        hint = ""
        if kind == "mel" and array.shape[0] == cols:
            hint = " (it looks like bins x frames: transpose it to frames x bins)"
        raise EquivalenceError(f"{where}: shape {array.shape} has {array.shape[-1]} values per row, expected cols={cols}{hint}")
    return array
