"""Hugging Face ``audiofolder`` layout: ``metadata.csv`` (header row) or ``metadata.jsonl`` with a
``file_name`` column naming each audio file relative to the metadata file, a transcript column
(``text``, ``transcription``, ``sentence`` or ``normalized_text``) and optionally ``speaker_id``
/ ``speaker``. Metadata in ``src`` is split ``train``; metadata in ``src/<split>/`` names its split.
Other columns are kept in ``extra``."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from voxledger.schemas.errors import CorpusError
from voxledger.tasks.corpus.importers.common import label, require_folder
from voxledger.tasks.corpus.records import LoadedCorpus, RecordSink

METADATA = ("metadata.csv", "metadata.jsonl")
TEXT_COLUMNS = ("text", "transcription", "sentence", "normalized_text")
SPEAKER_COLUMNS = ("speaker_id", "speaker", "client_id")


def _metadata_files(src: Path) -> list[Path]:
    here = [src / n for n in METADATA if (src / n).is_file()]
    below = [p / n for p in sorted(src.iterdir()) if p.is_dir() for n in METADATA if (p / n).is_file()]
    return here + below


def _has_file_name(path: Path) -> bool:
    with open(path, "rb") as f:
        first = f.readline()
    return b"file_name" in first


def looks_like(src: Path) -> bool:
    return src.is_dir() and any(_has_file_name(p) for p in _metadata_files(src))


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """(line, row) pairs; a row that cannot be parsed is a message string instead."""
    with open(path, encoding="utf-8", newline="") as f:
        if path.suffix == ".csv":
            reader = csv.DictReader(f)
            for row in reader:
                yield reader.line_num, row
            return
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as exc:
                    yield lineno, f"not valid JSON ({exc.msg} at column {exc.colno})"


def _columns(path: Path, first: dict[str, Any], src: Path) -> tuple[str, str | None]:
    where = f"{label(path, src)}:1"
    if "file_name" not in first:
        raise CorpusError(f"{where}: no file_name column (columns: {', '.join(first)}); name the audio column file_name")
    text = next((c for c in TEXT_COLUMNS if c in first), None)
    if text is None:
        raise CorpusError(f"{where}: no transcript column (columns: {', '.join(first)}); add one named {' or '.join(TEXT_COLUMNS)}")
    return text, next((c for c in SPEAKER_COLUMNS if c in first), None)


def load(src: Path) -> LoadedCorpus:
    """Read an audiofolder dataset.

    Raises:
        CorpusError: no metadata file, or one without a ``file_name`` or transcript column.
    """
    src = require_folder(src, "an audiofolder dataset is a folder with metadata.csv or metadata.jsonl")
    files = _metadata_files(src)
    if not files:
        raise CorpusError(f"{src}: no metadata.csv or metadata.jsonl (here or in a split folder); add one with a file_name column")
    sink = RecordSink(src)
    for path in files:
        split = "train" if path.parent == src else path.parent.name
        _read(sink, src, path, split)
    return sink.build(tuple(files))


def _read(sink: RecordSink, src: Path, path: Path, split: str) -> None:
    where = label(path, src)
    columns: tuple[str, str | None] | None = None
    try:
        for lineno, row in _rows(path):
            if isinstance(row, str) or not isinstance(row, dict):
                sink.issue(
                    "manifest_unreadable_line", where, lineno, row if isinstance(row, str) else "a metadata line must be a JSON object"
                )
                continue
            columns = columns or _columns(path, row, src)
            text_col, speaker_col = columns
            rel = label(path.parent / str(row["file_name"]), src)
            extra = {k: v for k, v in row.items() if k not in ("file_name", text_col, speaker_col)}
            record = {
                **extra,
                "id": Path(str(row["file_name"])).stem,
                "audio": rel,
                "text": str(row.get(text_col) or ""),
                "speaker": str(row[speaker_col]) if speaker_col and row.get(speaker_col) else src.name,
                "split": split,
            }
            sink.add(record, where, lineno)
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{where}: not UTF-8 at byte {exc.start}; re-encode the file as UTF-8") from None
