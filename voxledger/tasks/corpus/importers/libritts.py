"""LibriTTS / LibriTTS-R layout: ``<subset>/<speaker>/<chapter>/<utt>.wav`` beside
``<utt>.normalized.txt``. ``src`` is the folder holding the subsets (each subset becomes a split:
``train-clean-100``, ``dev-clean``, ...) or one subset folder itself."""

from __future__ import annotations

from pathlib import Path

from voxledger.schemas.errors import CorpusError
from voxledger.tasks.corpus.importers.common import label, read_text, require_folder
from voxledger.tasks.corpus.records import LoadedCorpus, RecordSink


def _is_subset(path: Path) -> bool:
    return any(True for _ in path.glob("*/*/*.normalized.txt"))


def looks_like(src: Path) -> bool:
    return src.is_dir() and (_is_subset(src) or any(_is_subset(p) for p in src.iterdir() if p.is_dir()))


def load(src: Path) -> LoadedCorpus:
    """Read LibriTTS(-R): one utterance per ``.wav``; a wav without ``.normalized.txt`` is an issue.

    Raises:
        CorpusError: no ``<speaker>/<chapter>/*.normalized.txt`` under ``src``.
    """
    src = require_folder(src, "a LibriTTS corpus is a folder of <subset>/<speaker>/<chapter>/ folders")
    subsets = [src] if _is_subset(src) else sorted(p for p in src.iterdir() if p.is_dir() and _is_subset(p))
    if not subsets:
        raise CorpusError(
            f"{src}: no <speaker>/<chapter>/*.normalized.txt found; point at a LibriTTS subset folder or the folder above them"
        )
    sink = RecordSink(src)
    files: list[Path] = []
    for subset in subsets:
        for wav in sorted(subset.glob("*/*/*.wav")):
            _utterance(sink, src, subset.name, wav, files)
    return sink.build(tuple(files))


def _utterance(sink: RecordSink, src: Path, split: str, wav: Path, files: list[Path]) -> None:
    txt = wav.with_name(wav.stem + ".normalized.txt")
    where = label(txt, src)
    if not txt.is_file():
        sink.issue("manifest_invalid_record", label(wav, src), 1, f"no transcript {txt.name} beside {wav.name}; add it or remove the wav")
        return
    files.append(txt)
    text = read_text(txt, src)
    if text is None:
        sink.issue("manifest_unreadable_line", where, 1, "not UTF-8; re-encode as UTF-8")
        return
    speaker, chapter = wav.parent.parent.name, wav.parent.name
    sink.add({"id": wav.stem, "audio": label(wav, src), "text": text, "speaker": speaker, "split": split, "chapter": chapter}, where, 1)
