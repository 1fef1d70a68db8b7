"""The Mandarin demo corpus: espeak-ng's Mandarin (``cmn``) voices reading everyday sentences.

The same design as the English demo corpus (``demo``), whose rendering, file writers and split
scheme it reuses: three base voices read the ``train`` and ``dev`` sentences; one held-out target
voice reads ``target_train``, ``target_dev`` and ``test``; no sentence is in two splits. Audio is
16 kHz mono PCM16 peak-normalised to -1 dBFS, every utterance has its phoneme alignment, and two
builds of the same size give byte-identical trees. Manifest rows say ``"language": "zh"``, and so
does ``corpus.json``. Ids look like ``zh-b1_s0042`` (speaker, line of the sentence file).

The sentences (``data/mandarin_sentences.txt``) are plain statements and questions about daily
life, weather, food, travel and work, in simplified characters with no digits, Latin letters or
inner punctuation, written for this corpus. espeak-ng's ``cmn`` dictionary reads every one of them.

Alignments: espeak-ng reports Mandarin phonemes with their start samples just as it does English
ones (initials, finals and nasal codas such as ``tS;h``, ``'iE``, ``N``; ``_|`` between some
syllables, ``_:`` at a pause), so the alignments are as exact as the English ones. Tones are not
in the phoneme names: 今 (tone 1) and 气 (tone 4) both report the vowel ``'i``.

``flawed=True`` plants one problem of each kind listed in ``plant_problems``, written to
``planted.json`` like the English corpus's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import soundfile as sf

from voxledger.tasks.corpus import espeak
from voxledger.tasks.corpus.demo import (
    PEAK_DBFS,
    SAMPLE_RATE_HZ,
    SPLITS,
    CorpusSize,
    DemoCorpusInfo,
    DemoVoice,
    PlantedProblem,
    Utterance,
    assign_sentences,
    generator_sha256,
    manifest_row,
    normalise,
    plan_utterances,
    split_utterances,
    to_pcm16,
    utterance_id,
    write_corpus,
    write_utterance,
    write_wav,
)
from voxledger.tasks.corpus.demo_flaws import CLIP_GAIN, write_planted

LANGUAGE = "zh"
SENTENCES_FILE = "data/mandarin_sentences.txt"
ORDER_SALT = "voxledger-demo-corpus-zh"
GENERATOR = "voxledger.tasks.corpus.demo_zh"
_CODE_FILES = ("demo_zh.py", "demo.py", "demo_flaws.py", "espeak.py", "_espeak_native.py", SENTENCES_FILE)
# Sentences per split; the file holds 165, so every size leaves some unused for planting.
SPLIT_SENTENCES: dict[str, dict[str, int]] = {
    "full": {"train": 60, "dev": 8, "target_train": 30, "target_dev": 8, "test": 20},
    "small": {"train": 30, "dev": 4, "target_train": 15, "target_dev": 4, "test": 10},
    "tiny": {"train": 3, "dev": 1, "target_train": 2, "target_dev": 1, "test": 2},
}

# Chosen by what Whisper base (multilingual, the packaged model the Mandarin audit and evaluation use)
# can hear of espeak-ng's Mandarin, told the language, beam 5, no repeated 3-grams: median CER over
# 6 sentences at 130 / 175 words per minute: cmn+f3@70 0.23 / 0.35, cmn+f2@50 0.32 / 0.64,
# cmn+f4@60 0.47 / 0.65, cmn+m3@40 0.61 (130), cmn+m7@40 0.64 / 0.80, cmn+f1@50 0.71 / 0.78, cmn@50
# 0.90 (175). The male voices are heard worst; espeak's Mandarin at its default rate is too fast for
# this model, so every voice reads at 130. (Measured with the voices at rate 130 by
# `python -m pytest -q -s -m slow tests/tasks/test_demo_corpus_zh.py -k whisper`.)
VOICES: tuple[DemoVoice, ...] = (
    DemoVoice("zh-b1", "cmn+f2", 50, "base", LANGUAGE, 130),  # Mandarin, female 2
    DemoVoice("zh-b2", "cmn+f4", 60, "base", LANGUAGE, 130),  # Mandarin, female 4, higher
    DemoVoice("zh-b3", "cmn+m3", 40, "base", LANGUAGE, 130),  # Mandarin, male 3, lower
    DemoVoice("zh-t1", "cmn+f3", 70, "target", LANGUAGE, 130),  # Mandarin, female 3, highest: held out
)


@cache
def mandarin_sentences() -> tuple[str, ...]:
    """Every sentence, in file order (index = line, used in utterance ids)."""
    path = resources.files("voxledger.tasks.corpus").joinpath(SENTENCES_FILE)
    return tuple(line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def mandarin_order() -> list[int]:
    """Sentence indices in the fixed order the splits are cut from (salted sha256 of the text)."""
    sentences = mandarin_sentences()

    def key(index: int) -> str:
        return hashlib.sha256(f"{ORDER_SALT}:{sentences[index]}".encode()).hexdigest()

    return sorted(range(len(sentences)), key=key)


def assign_mandarin_sentences(size: CorpusSize) -> tuple[dict[str, list[int]], list[int]]:
    """Sentence indices per split (disjoint, sorted) and the unused rest, in demo order."""
    return assign_sentences(size, mandarin_order(), SPLIT_SENTENCES)


def corpus_document(size: CorpusSize, flawed: bool, rows: list[dict[str, object]], splits: dict[str, list[int]]) -> dict[str, object]:
    """The ``corpus.json`` document: generator identity, language, size, voices and split sizes."""
    return {
        "generator": GENERATOR,
        "generator_sha256": generator_sha256(_CODE_FILES),
        "espeak_ng_version": espeak.espeak_info()["version"],
        "language": LANGUAGE,
        "size": size,
        "flawed": flawed,
        "sample_rate_hz": SAMPLE_RATE_HZ,
        "peak_dbfs": PEAK_DBFS,
        "sentence_source": "everyday Mandarin sentences in simplified characters, written for this corpus",
        "voices": [{"name": v.speaker, "espeak_voice": v.espeak_voice, "pitch": v.pitch, "role": v.role} for v in VOICES],
        "split_sentences": {split: len(splits[split]) for split in SPLITS},
        "split_utterances": split_utterances(rows),
        "utterances": len(rows),
    }


def build_mandarin_corpus(out_dir: Path, *, size: CorpusSize = "full", flawed: bool = False) -> DemoCorpusInfo:
    """Build the Mandarin demo corpus into ``out_dir`` atomically (a temporary sibling, then rename).

    Raises CorpusError if ``out_dir`` exists and is not an empty directory, ValueError for an
    unknown size. Deterministic: the same size and ``flawed`` give byte-identical trees.
    """
    if size not in SPLIT_SENTENCES:
        raise ValueError(f"size must be one of {sorted(SPLIT_SENTENCES)}, got {size!r}")
    out_dir = Path(out_dir)
    splits, unused = assign_mandarin_sentences(size)
    plant = (lambda root, rows: plant_problems(root, rows, unused)) if flawed else None
    utts = plan_utterances(splits, VOICES, mandarin_sentences())
    rows, planted = write_corpus(out_dir, utts, plant, lambda rows: corpus_document(size, flawed, rows, splits))
    return DemoCorpusInfo(out_dir, size, flawed, len(rows), split_utterances(rows), VOICES, planted)


def _first(rows: list[dict[str, object]], speaker: str, split: str) -> dict[str, object]:
    return next(r for r in rows if r["speaker"] == speaker and r["split"] == split)


def _voice(speaker: object) -> DemoVoice:
    return next(v for v in VOICES if v.speaker == speaker)


def _closest_in_length(text: str, candidates: list[int]) -> int:
    """The candidate sentence nearest ``text`` in length (first in order on a tie), so a wrong
    transcript keeps a plausible speaking rate and only listening can tell."""
    sentences = mandarin_sentences()
    return min(candidates, key=lambda i: abs(len(sentences[i]) - len(text)))


def plant_problems(root: Path, rows: list[dict[str, object]], unused: list[int]) -> list[PlantedProblem]:
    """Plant one problem of each kind into the corpus at ``root`` (rows are edited and extended in
    place), each on its own utterances; write ``planted.json``; return what was planted.

    - ``asr_disagreement``: a base ``train`` row whose text is another sentence of the file (one in
      no split, of about the same length): the wrong transcript only an ASR check can hear.
    - ``split_leakage``: the target voice reads two unused sentences in base ``train``.
    - ``duplicate_audio``: a base ``dev`` wav copied to a new ``train`` id with an unused sentence.
    - ``clipping``: a base ``train`` file amplified x4 and clipped at full scale.
    - ``silence``: a ``target_train`` file replaced by digital silence of the same length.
    - ``sample_rate_mismatch``: a base ``dev`` file written at espeak's 22,050 Hz, claimed 16 kHz.
    - ``empty_transcript``: a base ``train`` row whose text is ``""``.

    All are errors. ``unused`` are sentence indices in no split, in demo order.
    """
    if len(unused) < 4:
        raise ValueError(f"planting needs 4 unused sentences, this size leaves {len(unused)}")
    sentences = mandarin_sentences()
    mislabelled, clipped = _first(rows, "zh-b2", "train"), _first(rows, "zh-b1", "train")
    emptied, silent = _first(rows, "zh-b3", "train"), _first(rows, "zh-t1", "target_train")
    resampled, source = _first(rows, "zh-b2", "dev"), _first(rows, "zh-b3", "dev")
    wrong = _closest_in_length(str(mislabelled["text"]), unused[3:])
    target = next(v for v in VOICES if v.role == "target")
    leaked = [Utterance(utterance_id(target.speaker, i), i, sentences[i], target, "train") for i in sorted(unused[1:3])]
    rows.extend(write_utterance(root, utt) for utt in leaked)
    copy = Utterance(utterance_id("zh-b3", unused[0]), unused[0], sentences[unused[0]], _voice("zh-b3"), "train")
    rows.append(_copy_audio(root, source, copy))
    _rewrite(root, clipped, lambda pcm: to_pcm16(pcm / 32767.0 * CLIP_GAIN))
    _rewrite(root, silent, lambda pcm: bytes(pcm.nbytes))
    _write_native_rate(root, resampled)
    mislabelled["text"], emptied["text"] = sentences[wrong], ""
    planted = [
        PlantedProblem("asr_disagreement", (str(mislabelled["id"]),), "error"),
        PlantedProblem("split_leakage", tuple(utt.id for utt in leaked), "error"),
        PlantedProblem("duplicate_audio", (str(source["id"]), copy.id), "error"),
        PlantedProblem("clipping", (str(clipped["id"]),), "error"),
        PlantedProblem("silence", (str(silent["id"]),), "error"),
        PlantedProblem("sample_rate_mismatch", (str(resampled["id"]),), "error"),
        PlantedProblem("empty_transcript", (str(emptied["id"]),), "error"),
    ]
    return write_planted(root, planted)


def _copy_audio(root: Path, source: dict[str, object], copy: Utterance) -> dict[str, object]:
    """Copy ``source``'s wav and alignment byte for byte to ``copy``'s id; return its row."""
    audio, alignment = root / "wavs" / f"{copy.id}.wav", root / "alignments" / f"{copy.id}.json"
    audio.write_bytes((root / str(source["audio"])).read_bytes())
    alignment.write_bytes((root / str(source["alignment"])).read_bytes())
    return manifest_row(copy, sf.info(str(audio)).frames)


def _rewrite(root: Path, row: dict[str, object], change: Callable[[np.ndarray], bytes]) -> None:
    """Replace a row's wav by ``change(int16 samples) -> PCM16 bytes`` at the same rate."""
    path = root / str(row["audio"])
    pcm, rate = sf.read(str(path), dtype="int16")
    write_wav(path, change(pcm), rate)


def _write_native_rate(root: Path, row: dict[str, object]) -> None:
    voice = _voice(row["speaker"])
    spoken = espeak.synthesize(str(row["text"]), voice.espeak_voice, voice.pitch, voice.rate_wpm)
    write_wav(root / str(row["audio"]), to_pcm16(normalise(spoken.audio)), spoken.sample_rate_hz)
