"""Problems planted in the flawed demo corpus, one of each kind the audit must report.

Each problem touches its own utterances, and the rest of the corpus stays clean:

- ``split_leakage``: the target voice reads two otherwise unused sentences in base ``train``.
- ``duplicate_audio``: a base ``dev`` wav copied byte for byte to a new ``train`` id. The new
  row carries an otherwise unused sentence as its text, so only the audio bytes give it away
  (no sentence or speaker crosses a split because of it).
- ``clipping``: a base ``train`` file amplified x4 and clipped at full scale.
- ``silence``: a ``target_train`` file replaced by digital silence of the same length.
- ``sample_rate_mismatch``: a base ``dev`` file written at espeak's native 22,050 Hz; its
  manifest row still claims 16,000 Hz, as a mislabelled file would.
- ``empty_transcript``: a base ``train`` row whose text is ``""``.

All are errors. ``planted.json`` lists them as
``[{"code", "utterance_ids", "expected_severity"}, ...]`` in the order above.
"""

from __future__ import annotations

import json
import shutil
import wave
from pathlib import Path

import numpy as np

from voxledger.tasks.corpus import espeak
from voxledger.tasks.corpus.demo import (
    VOICES,
    PlantedProblem,
    Utterance,
    manifest_row,
    normalise,
    to_pcm16,
    utterance_id,
    write_utterance,
    write_wav,
)
from voxledger.tasks.corpus.sentences import harvard_sentences

CLIP_GAIN = 4.0


def _first(rows: list[dict[str, object]], speaker: str, split: str) -> dict[str, object]:
    return next(r for r in rows if r["speaker"] == speaker and r["split"] == split)


def _read_pcm(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2"), w.getframerate()


def _spoken(row: dict[str, object]) -> Utterance:
    """The Utterance a clean manifest row was rendered from."""
    voice = next(v for v in VOICES if v.speaker == row["speaker"])
    index = int(str(row["id"]).rsplit("_s", 1)[1])
    return Utterance(str(row["id"]), index, str(row["text"]), voice, str(row["split"]))


def _leak_target(root: Path, rows: list[dict[str, object]], sentences: list[int]) -> list[str]:
    target = next(v for v in VOICES if v.role == "target")
    text = harvard_sentences()
    leaked = [Utterance(utterance_id(target.speaker, i), i, text[i], target, "train") for i in sentences]
    rows.extend(write_utterance(root, utt) for utt in leaked)
    return [utt.id for utt in leaked]


def _duplicate(root: Path, rows: list[dict[str, object]], sentence: int) -> list[str]:
    source = _first(rows, "spk-b4", "dev")
    voice = next(v for v in VOICES if v.speaker == source["speaker"])
    copy = Utterance(utterance_id(voice.speaker, sentence), sentence, harvard_sentences()[sentence], voice, "train")
    shutil.copyfile(root / str(source["audio"]), root / "wavs" / f"{copy.id}.wav")
    shutil.copyfile(root / str(source["alignment"]), root / "alignments" / f"{copy.id}.json")
    pcm, _ = _read_pcm(root / str(source["audio"]))
    rows.append(manifest_row(copy, pcm.size))
    return [str(source["id"]), copy.id]


def _clip(root: Path, row: dict[str, object]) -> None:
    pcm, rate = _read_pcm(root / str(row["audio"]))
    write_wav(root / str(row["audio"]), to_pcm16(pcm / 32767.0 * CLIP_GAIN), rate)


def _silence(root: Path, row: dict[str, object]) -> None:
    pcm, rate = _read_pcm(root / str(row["audio"]))
    write_wav(root / str(row["audio"]), bytes(pcm.nbytes), rate)


def _native_rate(root: Path, row: dict[str, object]) -> None:
    utt = _spoken(row)
    spoken = espeak.synthesize(utt.text, utt.voice.espeak_voice, utt.voice.pitch, utt.voice.rate_wpm)
    write_wav(root / str(row["audio"]), to_pcm16(normalise(spoken.audio)), spoken.sample_rate_hz)


def plant_problems(root: Path, rows: list[dict[str, object]], unused: list[int]) -> list[PlantedProblem]:
    """Plant every problem into the corpus at ``root`` (rows are edited and extended in place);
    write ``planted.json``; return what was planted. ``unused`` are sentences in no split."""
    if len(unused) < 3:
        raise ValueError(f"planting needs 3 unused sentences, this size leaves {len(unused)}")
    clipped = _first(rows, "spk-b1", "train")
    silent = _first(rows, "spk-t1", "target_train")
    resampled = _first(rows, "spk-b2", "dev")
    emptied = _first(rows, "spk-b3", "train")
    leaked = _leak_target(root, rows, sorted(unused[1:3]))
    duplicated = _duplicate(root, rows, unused[0])
    _clip(root, clipped)
    _silence(root, silent)
    _native_rate(root, resampled)
    emptied["text"] = ""
    planted = [
        PlantedProblem("split_leakage", tuple(leaked), "error"),
        PlantedProblem("duplicate_audio", tuple(duplicated), "error"),
        PlantedProblem("clipping", (str(clipped["id"]),), "error"),
        PlantedProblem("silence", (str(silent["id"]),), "error"),
        PlantedProblem("sample_rate_mismatch", (str(resampled["id"]),), "error"),
        PlantedProblem("empty_transcript", (str(emptied["id"]),), "error"),
    ]
    return write_planted(root, planted)


def write_planted(root: Path, planted: list[PlantedProblem]) -> list[PlantedProblem]:
    """Write ``planted.json`` (what the audit must find) and return ``planted``."""
    doc = [{"code": p.code, "utterance_ids": list(p.utterance_ids), "expected_severity": p.expected_severity} for p in planted]
    (root / "planted.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return planted
