"""VCTK 0.92 layout: ``txt/<spk>/<spk>_<n>.txt`` and ``wav48_silence_trimmed/<spk>/<spk>_<n>_mic1.flac``
(the first microphone; ``mic2`` is the same speech from a second microphone and is not read).
The older release (``wav48/<spk>/<spk>_<n>.wav``) is read too. VCTK names no splits: `assign_splits`
gives one in which every reading of a sentence (by any speaker) lands in the same split."""

from __future__ import annotations

from pathlib import Path

from voxledger.schemas.errors import CorpusError
from voxledger.tasks.corpus.importers.common import assign_splits, label, read_text, require_folder
from voxledger.tasks.corpus.records import LoadedCorpus, RecordSink

AUDIO_LAYOUTS = (("wav48_silence_trimmed", "_mic1.flac"), ("wav48", ".wav"))


def looks_like(src: Path) -> bool:
    return src.is_dir() and (src / "txt").is_dir() and any((src / d).is_dir() for d, _ in AUDIO_LAYOUTS)


def load(src: Path) -> LoadedCorpus:
    """Read VCTK: one utterance per transcript; a transcript without audio is an issue.

    Raises:
        CorpusError: no ``txt/`` or no audio folder.
    """
    src = require_folder(src, "a VCTK corpus is a folder with txt/ and wav48_silence_trimmed/")
    audio = next(((d, suffix) for d, suffix in AUDIO_LAYOUTS if (src / d).is_dir()), None)
    if not (src / "txt").is_dir() or audio is None:
        raise CorpusError(f"{src}: expected txt/ and wav48_silence_trimmed/ (or wav48/); this is not a VCTK folder")
    folder, suffix = audio
    sink = RecordSink(src)
    txts = sorted((src / "txt").glob("*/*.txt"))
    for txt in txts:
        speaker, uid = txt.parent.name, txt.stem
        wav = src / folder / speaker / f"{uid}{suffix}"
        where = label(txt, src)
        if not wav.is_file():
            sink.issue(
                "manifest_invalid_record", where, 1, f"no audio {label(wav, src)} for this transcript; add it or remove the transcript"
            )
            continue
        text = read_text(txt, src)
        if text is None:
            sink.issue("manifest_unreadable_line", where, 1, "not UTF-8; re-encode as UTF-8")
            continue
        sink.add({"id": uid, "audio": label(wav, src), "text": text, "speaker": speaker, "split": "train"}, where, 1)
    return assign_splits(sink.build(tuple(txts)))
