"""Corpus -> training examples for the tiny backend, and a resumable, seeded batch order.

Reads any corpus `load_corpus` reads (voxledger JSONL, Kaldi, the public layouts): text and
audio in any format, rate and channel count (down-mixed and resampled to 16 kHz mono). Phoneme
durations come from the utterance's own alignment file when the manifest names one (column
``alignment``: JSON ``{"sample_rate_hz": 16000, "phonemes": [{"phoneme", "start_sample",
"end_sample"}]}``, as the demo corpus writes) and otherwise from forced alignment against
espeak-ng (`align`).

Phoneme boundaries in samples become frame counts by rounding each boundary to the nearest hop
(256 samples) and pinning the last boundary to the clip's frame count, so durations always sum
to exactly the number of mel frames (a phoneme shorter than half a hop may get 0 frames).

`TinyDataset.batches` is a pure function of ``(epoch, seed)`` over fixed contents: a run resumed
at epoch e, batch k replays the same batches from k on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import soundfile as sf
import soxr

from voxledger.schemas.errors import CorpusError
from voxledger.schemas.manifest import Utterance
from voxledger.stores.memo import DerivedMemo
from voxledger.tasks.backends.tiny.align import Durations, aligner_identity, durations_by_warp, durations_from_file
from voxledger.tasks.backends.tiny.audio import SAMPLE_RATE_HZ, NormStats, frame_count, log_mel
from voxledger.tasks.backends.tiny.config import PAD_ID, TinyTTSConfig
from voxledger.tasks.corpus.audio import DECODE_ERRORS, read_utterance
from voxledger.tasks.corpus.manifests import load_corpus
from voxledger.tasks.corpus.paths import resolve_audio_path
from voxledger.tasks.corpus.records import LoadedCorpus

if TYPE_CHECKING:
    import torch

DEFAULT_FRAMES_PER_BATCH = 3000
LENGTH_JITTER = 0.1  # log-scale noise on lengths before sorting, so batches vary by epoch


@dataclass(frozen=True)
class TinyUtterance:
    """One training example: phoneme ids ``(P,)``, frame durations ``(P,)``, log-mel ``(T, 80)``."""

    id: str
    speaker: str
    phoneme_ids: np.ndarray
    durations: np.ndarray
    mel: np.ndarray

    @property
    def n_frames(self) -> int:
        return int(self.mel.shape[0])


@dataclass(frozen=True)
class TinyBatch:
    """Padded tensors for one step; ``mels`` are normalised, padding is zero / `PAD_ID`."""

    ids: tuple[str, ...]
    phoneme_ids: torch.Tensor  # (B, P) int64
    speaker_ids: torch.Tensor  # (B,) int64
    durations: torch.Tensor  # (B, P) int64
    mels: torch.Tensor  # (B, T, n_mels) float32

    @property
    def n_frames(self) -> int:
        return int(self.durations.sum())


@dataclass(frozen=True)
class CorpusExample:
    """One utterance read for training, before its phonemes are mapped to a model's ids."""

    id: str
    speaker: str
    language: str
    durations: Durations
    mel: np.ndarray


def read_audio_16k(loaded: LoadedCorpus, utt: Utterance) -> np.ndarray:
    """The utterance's samples as mono float32 at 16 kHz (channels averaged, soxr VHQ resampling).

    Raises:
        CorpusError: the file cannot be decoded, or its segment lies outside the recording.
    """
    path = resolve_audio_path(loaded.root, utt.audio, loaded.audio_roots, where=loaded.origins.get(utt.id, ""))
    try:
        data, rng = read_utterance(path, utt)
    except DECODE_ERRORS as exc:
        raise CorpusError(f"{utt.id}: cannot decode {path} ({exc}); re-encode it as WAV or FLAC") from None
    mono = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    if rng.sample_rate_hz != SAMPLE_RATE_HZ:
        mono = soxr.resample(mono, rng.sample_rate_hz, SAMPLE_RATE_HZ, quality="VHQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


# Durations of one process, keyed by what they are computed from: training binds the features
# tree (`corpus_durations`) and then loads the same utterances, and must not align them twice.
_DURATIONS: dict[tuple[object, ...], Durations] = {}
MEMO_KIND = "tiny-durations"
"""The kind of a home memo entry (`voxledger.stores.memo`) holding one utterance's forced alignment."""


def _process_key(loaded: LoadedCorpus, utt: Utterance) -> tuple[object, ...]:
    audio = resolve_audio_path(loaded.root, utt.audio, loaded.audio_roots)
    side = loaded.root / str(utt.extra["alignment"]) if "alignment" in utt.extra else None
    stamp = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in (audio, side) if f is not None and f.is_file()]
    return (tuple(stamp), utt.start_s, utt.end_s, utt.text, utt.language, str(side))


def utterance_durations(loaded: LoadedCorpus, utt: Utterance, mel: np.ndarray | None = None) -> Durations:
    """Frames per phoneme of ``utt``: from its alignment file when it has one, else by `align`."""
    key = _process_key(loaded, utt)
    if key not in _DURATIONS:
        side = loaded.root / str(utt.extra["alignment"]) if "alignment" in utt.extra else None
        if side is not None:
            if not side.is_file():
                raise CorpusError(f"{utt.id}: alignment file {side} not found; restore it or drop the 'alignment' column")
            audio = resolve_audio_path(loaded.root, utt.audio, loaded.audio_roots)
            _DURATIONS[key] = durations_from_file(side, len(mel) if mel is not None else _frame_count(loaded, utt, audio))
        else:
            mel = log_mel(read_audio_16k(loaded, utt)) if mel is None else mel
            _DURATIONS[key] = durations_by_warp(mel, utt.text, utt.language)
    return _DURATIONS[key]


def memo_key(utt: Utterance, audio_sha256: str) -> dict[str, object]:
    """What one utterance's forced alignment is computed from: the memo key of its durations."""
    return {
        "aligner": aligner_identity(),
        "audio_sha256": audio_sha256,
        "start_s": utt.start_s,
        "end_s": utt.end_s,
        "text": utt.text,
        "language": utt.language,
    }


def _frame_count(loaded: LoadedCorpus, utt: Utterance, audio: Path) -> int:
    """Mel frames of ``utt`` without decoding it when the header says 16 kHz and it is whole."""
    info = sf.info(str(audio))
    if info.samplerate == SAMPLE_RATE_HZ and not utt.is_segment:
        return frame_count(info.frames)
    return frame_count(len(read_audio_16k(loaded, utt)))


def corpus_durations(
    loaded: LoadedCorpus, audio_sha256: dict[str, str] | None = None, memo: DerivedMemo | None = None
) -> dict[str, Durations]:
    """Durations of every utterance of the corpus (the features tree of a tiny training run).

    With a home's ``memo`` and the digest of each utterance's audio (``audio_sha256``, id ->
    digest, as `audio_digests` gives), an utterance aligned before from the same audio bytes,
    segment, text and language by the same aligner code (`aligner_identity`) is read back instead
    of aligned again, and every new alignment is filed there. Alignment files are read as always.
    """
    utterances = loaded.utterances.utterances
    if memo is None or audio_sha256 is None:
        return {u.id: utterance_durations(loaded, u) for u in utterances}
    aligned = {u.id: (u, _process_key(loaded, u)) for u in utterances if "alignment" not in u.extra and u.id in audio_sha256}
    todo = {uid: memo_key(u, audio_sha256[uid]) for uid, (u, pkey) in aligned.items() if pkey not in _DURATIONS}
    for uid, value in memo.get_many(MEMO_KIND, todo).items():
        _DURATIONS[aligned[uid][1]] = Durations.from_value(value)
        del todo[uid]
    out: dict[str, Durations] = {}
    try:
        for u in utterances:
            out[u.id] = utterance_durations(loaded, u)
    finally:  # what was aligned before a failing utterance is kept for the next attempt
        memo.put_many(MEMO_KIND, {uid: (key, out[uid].to_value()) for uid, key in todo.items() if uid in out})
    return out


def load_examples(corpus_dir: str | Path, splits: tuple[str, ...], speakers: tuple[str, ...] | None = None) -> list[CorpusExample]:
    """Every utterance of ``splits`` (and ``speakers``) in manifest order, any layout `load_corpus` reads.

    Raises:
        CorpusError: no utterance matches, or one cannot be read or aligned.
    """
    loaded = load_corpus(Path(corpus_dir))
    chosen = [u for u in loaded.utterances.utterances if u.split in splits and (speakers is None or u.speaker in speakers)]
    if not chosen:
        raise CorpusError(
            f"{loaded.root}: no utterances in splits {list(splits)}"
            + (f" for speakers {list(speakers)}" if speakers is not None else "")
            + f" (splits present: {sorted(loaded.utterances.splits())})"
        )
    examples = []
    for u in chosen:
        mel = log_mel(read_audio_16k(loaded, u))
        examples.append(CorpusExample(u.id, u.speaker, u.language, utterance_durations(loaded, u, mel), mel))
    return examples


def to_utterance(example: CorpusExample, config: TinyTTSConfig) -> TinyUtterance:
    """Map an example's phonemes to ``config``'s ids; CorpusError names an unknown phoneme."""
    try:
        ids = [config.phoneme_id(p) for p in example.durations.phonemes]
    except KeyError as exc:
        raise CorpusError(f"{example.id}: {exc.args[0]}") from None
    frames = example.durations.frames
    if int(frames.sum()) != len(example.mel):
        raise CorpusError(f"{example.id}: durations cover {int(frames.sum())} frames, the audio has {len(example.mel)}")
    return TinyUtterance(
        id=example.id, speaker=example.speaker, phoneme_ids=np.asarray(ids, dtype=np.int64), durations=frames, mel=example.mel
    )


def load_utterances(corpus_dir: str | Path, splits: tuple[str, ...], config: TinyTTSConfig) -> list[TinyUtterance]:
    """Every utterance of ``splits`` in manifest order as model inputs; CorpusError when there are none."""
    return [to_utterance(e, config) for e in load_examples(corpus_dir, splits)]


class TinyDataset:
    """Fixed utterances + normalisation -> deterministic length-grouped batches."""

    def __init__(
        self,
        utterances: list[TinyUtterance],
        config: TinyTTSConfig,
        norm_stats: NormStats,
        frames_per_batch: int = DEFAULT_FRAMES_PER_BATCH,
    ) -> None:
        unknown = sorted({u.speaker for u in utterances} - set(config.speakers))
        if unknown:
            raise CorpusError(
                f"speakers {unknown} are not in the model config {list(config.speakers)}; "
                "add them (TinyTTS.add_speaker) before building the dataset"
            )
        self.utterances = utterances
        self.frames_per_batch = frames_per_batch
        import torch  # here, not at import: reading durations for a stage's features tree needs none

        self._speaker_ids = [config.speakers.index(u.speaker) for u in utterances]
        self._mels = [torch.from_numpy(norm_stats.normalize(u.mel)) for u in utterances]

    def batch_plan(self, epoch: int, seed: int) -> list[list[int]]:
        """Utterance indices per batch for ``epoch`` under ``seed`` (pure, deterministic).

        Utterances are sorted by length times a random factor within +-``LENGTH_JITTER``, cut
        greedily into batches of at most ``frames_per_batch`` padded frames, and the batches
        shuffled: similar lengths share a batch, yet batch membership changes every epoch.
        """
        rng = np.random.default_rng([seed, epoch])
        lengths = np.array([u.n_frames for u in self.utterances], dtype=np.float64)
        jitter = np.exp(rng.uniform(-LENGTH_JITTER, LENGTH_JITTER, size=len(lengths)))
        plan: list[list[int]] = []
        batch: list[int] = []
        longest = 0.0
        for i in np.argsort(lengths * jitter, kind="stable").tolist():
            longest_with = max(longest, lengths[i])
            if batch and longest_with * (len(batch) + 1) > self.frames_per_batch:
                plan.append(batch)
                batch, longest_with = [], lengths[i]
            batch.append(i)
            longest = longest_with
        plan.append(batch)
        return [plan[i] for i in rng.permutation(len(plan))]

    def collate(self, indices: list[int]) -> TinyBatch:
        """Pad the given utterances into one `TinyBatch`."""
        utts = [self.utterances[i] for i in indices]
        n_ph = max(len(u.phoneme_ids) for u in utts)
        n_fr = max(u.n_frames for u in utts)
        import torch

        phonemes = torch.full((len(utts), n_ph), PAD_ID, dtype=torch.long)
        durations = torch.zeros((len(utts), n_ph), dtype=torch.long)
        mels = torch.zeros((len(utts), n_fr, self._mels[0].shape[1]))
        for row, (i, u) in enumerate(zip(indices, utts, strict=True)):
            phonemes[row, : len(u.phoneme_ids)] = torch.from_numpy(u.phoneme_ids)
            durations[row, : len(u.durations)] = torch.from_numpy(u.durations)
            mels[row, : u.n_frames] = self._mels[i]
        return TinyBatch(
            ids=tuple(u.id for u in utts),
            phoneme_ids=phonemes,
            speaker_ids=torch.tensor([self._speaker_ids[i] for i in indices]),
            durations=durations,
            mels=mels,
        )

    def batches(self, epoch: int, seed: int) -> list[TinyBatch]:
        """All batches of ``epoch`` in order: ``collate`` over `batch_plan`."""
        return [self.collate(b) for b in self.batch_plan(epoch, seed)]
