"""Writers of tiny synthetic corpora in the exact public layouts, each with optional planted flaws.

Every writer returns the folder and the truth: {utterance id: (text, duration_s)}. Flaws:
``leak`` puts one speaker (or, for LJSpeech, one sentence) in two splits, ``unreadable``
replaces one clip with bytes no decoder accepts, ``empty`` blanks one transcript.
"""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

from tests.tasks.corpus.factory import sentence, write_clip

Truth = dict[str, tuple[str, float]]


def _flaws(path: Path, i: int, flaw: str | None, text: str) -> str:
    if flaw == "unreadable" and i == 1:
        path.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk" * 4)
    return "" if flaw == "empty" and i == 2 else text


def ljspeech(root: Path, flaw: str | None = None) -> tuple[Path, Truth]:
    truth: Truth = {}
    files: dict[str, list[str]] = {"metadata_train.csv": [], "metadata_dev.csv": []}
    for i in range(5):
        uid, seconds = f"LJ001-{i:04d}", 1.0 + 0.25 * i
        text = truth["LJ001-0000"][0] if flaw == "leak" and i == 4 else sentence(i, seconds)
        path = write_clip(root / "wavs" / f"{uid}.wav", seconds, seed=i, sample_rate_hz=22050)
        text = _flaws(path, i, flaw, text)
        files["metadata_dev.csv" if i == 4 else "metadata_train.csv"].append(f"{uid}|{text.upper()}|{text}")
        truth[uid] = (text, seconds)
    for name, lines in files.items():
        (root / name).write_text("\n".join(lines) + "\n")
    return root, truth


def libritts(root: Path, flaw: str | None = None) -> tuple[Path, Truth]:
    truth: Truth = {}
    layout = [("train-clean-100", "84", "121123"), ("train-clean-100", "84", "121550"), ("train-clean-100", "174", "50561"),
              ("dev-clean", "174" if flaw == "leak" else "251", "136532"), ("dev-clean", "251", "136532")]  # fmt: skip
    for i, (subset, spk, chapter) in enumerate(layout):
        uid, seconds = f"{spk}_{chapter}_{i:06d}_000000", 1.0 + 0.25 * i
        folder = root / subset / spk / chapter
        path = write_clip(folder / f"{uid}.wav", seconds, seed=i, sample_rate_hz=24000)
        text = _flaws(path, i, flaw, sentence(i, seconds))
        (folder / f"{uid}.normalized.txt").write_text(text)
        (folder / f"{uid}.original.txt").write_text(text.upper())
        truth[uid] = (text, seconds)
    return root, truth


def vctk(root: Path, flaw: str | None = None) -> tuple[Path, Truth]:
    truth: Truth = {}
    for i in range(5):
        spk = ("p225", "p226")[i % 2]
        uid, seconds = f"{spk}_{i + 1:03d}", 1.0 + 0.25 * i
        for mic in ("mic1", "mic2"):
            write_clip(root / "wav48_silence_trimmed" / spk / f"{uid}_{mic}.flac", seconds, seed=i + (100 if mic == "mic2" else 0),
                              sample_rate_hz=48000, fmt="FLAC")  # fmt: skip
        text = _flaws(root / "wav48_silence_trimmed" / spk / f"{uid}_mic1.flac", i, flaw, sentence(i, seconds))
        (root / "txt" / spk).mkdir(parents=True, exist_ok=True)
        (root / "txt" / spk / f"{uid}.txt").write_text(text + "\n")
        truth[uid] = (text, seconds)
    return root, truth


def audiofolder(root: Path, flaw: str | None = None) -> tuple[Path, Truth]:
    truth: Truth = {}
    rows: dict[str, list[dict[str, str]]] = {"train": [], "test": []}
    for i in range(5):
        split = "test" if i >= 3 else "train"
        spk = "s1" if i < 3 or (flaw == "leak" and i == 3) else "s2"
        uid, seconds = f"clip{i}", 1.0 + 0.25 * i
        path = write_clip(root / split / "audio" / f"{uid}.ogg", seconds, seed=i, fmt="OGG")
        text = _flaws(path, i, flaw, sentence(i, seconds))
        rows[split].append({"file_name": f"audio/{uid}.ogg", "transcription": text, "speaker_id": spk, "accent": "x"})
        truth[uid] = (text, seconds)
    (root / "train" / "metadata.csv").write_text(_csv(rows["train"]))
    (root / "test" / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows["test"]))
    return root, truth


def _csv(rows: list[dict[str, str]]) -> str:
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def lhotse(root: Path, flaw: str | None = None) -> tuple[Path, Truth]:
    """Recordings + supervisions per split, written by lhotse itself; the test split's utterances are
    cuts of one longer recording, so segments are exercised too."""
    from lhotse import Recording, RecordingSet, SupervisionSegment, SupervisionSet

    truth: Truth = {}
    root.mkdir(parents=True)
    for split, n in (("train", 3), ("test", 1)):
        recs, sups = [], []
        for i in range(n) if split == "train" else range(3, 4):
            seconds = 1.0 + 0.25 * i if split == "train" else 5.0
            path = write_clip(root / "audio" / f"rec{i}.wav", seconds, seed=i)
            recs.append(Recording.from_file(path, recording_id=f"rec{i}", relative_path_depth=2))
            text = _flaws(path, i, flaw, sentence(i, seconds))
            if split == "train":
                sups.append(SupervisionSegment(id=f"u{i}", recording_id=f"rec{i}", start=0.0, duration=seconds, text=text,
                                               speaker="sa", language="English"))  # fmt: skip
                truth[f"u{i}"] = (text, seconds)
            else:
                for k, (start, dur) in enumerate(((0.5, 1.5), (2.5, 2.0))):
                    uid, t = f"u{i}_{k}", _flaws(path, 9, flaw, sentence(i + 10 * k, dur))
                    sups.append(SupervisionSegment(id=uid, recording_id=f"rec{i}", start=start, duration=dur, text=t,
                                                   speaker="sa" if flaw == "leak" else "sb", language="English"))  # fmt: skip
                    truth[uid] = (t, dur)
        RecordingSet.from_recordings(recs).to_file(root / f"corpus_recordings_{split}.jsonl.gz")
        SupervisionSet.from_segments(sups).to_file(root / f"corpus_supervisions_{split}.jsonl.gz")
    with gzip.open(root / "corpus_recordings_train.jsonl.gz", "rt") as f:
        assert "audio/rec0.wav" in f.read()  # lhotse wrote paths relative to the folder
    return root, truth


WRITERS = {"ljspeech": ljspeech, "libritts": libritts, "vctk": vctk, "audiofolder": audiofolder, "lhotse": lhotse}
RATES = {"ljspeech": 22050, "libritts": 24000, "vctk": 48000, "audiofolder": 16000, "lhotse": 16000}
