"""LJSpeech layout: ``metadata.csv`` (``id|raw text|normalised text``, no header, ``|``-separated)
and ``wavs/<id>.wav``. One speaker (named after the folder). ``metadata_<split>.csv`` files, when
present, name their own splits (``metadata.csv`` beside them is ``train``); a corpus with
``metadata.csv`` alone is split by `assign_splits` (no clip or sentence crosses splits)."""

from __future__ import annotations

from pathlib import Path

from voxledger.schemas.errors import CorpusError
from voxledger.tasks.corpus.importers.common import assign_splits, require_folder
from voxledger.tasks.corpus.records import LoadedCorpus, RecordSink


def _metadata_files(src: Path) -> list[Path]:
    return sorted(p for p in src.glob("metadata*.csv") if p.name == "metadata.csv" or p.name.startswith("metadata_"))


def looks_like(src: Path) -> bool:
    files = _metadata_files(src) if src.is_dir() else []
    if not files or not (src / "wavs").is_dir():
        return False
    with open(files[0], "rb") as f:
        return b"|" in f.readline()


def _split_of(path: Path) -> str:
    return "train" if path.name == "metadata.csv" else path.stem.removeprefix("metadata_")


def load(src: Path) -> LoadedCorpus:
    """Read an LJSpeech-style folder.

    Raises:
        CorpusError: no ``metadata*.csv``, or a line without the ``id|text`` columns.
    """
    src = require_folder(src, "an LJSpeech corpus is a folder with metadata.csv and wavs/")
    files = _metadata_files(src)
    if not files:
        raise CorpusError(f"{src}/metadata.csv is missing; an LJSpeech corpus has metadata.csv (id|text|normalised text) and wavs/")
    sink = RecordSink(src)
    speaker = src.name.split("-")[0] or "speaker"
    for path in files:
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                _line(sink, raw, path.name, lineno, speaker, _split_of(path))
    loaded = sink.build(tuple(files))
    return assign_splits(loaded) if [p.name for p in files] == ["metadata.csv"] else loaded


def _line(sink: RecordSink, raw: bytes, name: str, lineno: int, speaker: str, split: str) -> None:
    try:
        text = raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        sink.issue("manifest_unreadable_line", name, lineno, f"not UTF-8 at byte {exc.start}; re-encode as UTF-8")
        return
    if not text.strip():
        return
    cols = text.split("|")
    if len(cols) < 2:
        raise CorpusError(
            f"{name}:{lineno}: expected 'id|text' or 'id|text|normalised text' columns, got {text[:60]!r}; separate the columns with '|'"
        )
    uid = cols[0].strip()
    transcript = cols[2] if len(cols) > 2 and cols[2].strip() else cols[1]
    sink.add({"id": uid, "audio": f"wavs/{uid}.wav", "text": transcript.strip(), "speaker": speaker, "split": split}, name, lineno)
