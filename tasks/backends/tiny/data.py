"""Corpus -> training examples for the tiny backend, and a resumable, seeded batch order.

Reads the demo corpus layout: ``manifest.jsonl`` rows with ``id``, ``audio``, ``speaker``,
``split`` and ``alignment`` (paths relative to the corpus root), 16 kHz wavs, and alignment JSON
``{"sample_rate_hz": 16000, "phonemes": [{"phoneme", "start_sample", "end_sample"}]}``.

Phoneme boundaries in samples become frame counts by rounding each boundary to the nearest hop
(256 samples) and pinning the last boundary to the clip's frame count, so durations always sum
to exactly the number of mel frames (a phoneme shorter than half a hop may get 0 frames).

`TinyDataset.batches` is a pure function of ``(epoch, seed)`` over fixed contents: a run resumed
at epoch e, batch k replays the same batches from k on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from voxledger.schemas.errors import CorpusError
from voxledger.tasks.backends.tiny.audio import (
    HOP_LENGTH,
    SAMPLE_RATE_HZ,
    NormStats,
    frame_count,
    log_mel,
)
from voxledger.tasks.backends.tiny.model import PAD_ID, TinyTTSConfig

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


def frame_durations(end_samples: list[int], n_frames: int) -> np.ndarray:
    """Frames per phoneme from phoneme end positions (samples), summing exactly to ``n_frames``."""
    ends = np.floor(np.asarray(end_samples, dtype=np.float64) / HOP_LENGTH + 0.5).astype(np.int64)
    ends = np.maximum.accumulate(np.clip(ends, 0, n_frames))
    ends[-1] = n_frames
    return np.diff(ends, prepend=0)


def read_manifest(corpus_dir: Path, splits: tuple[str, ...]) -> list[dict[str, object]]:
    """Manifest rows whose ``split`` is in ``splits``, in file order."""
    path = corpus_dir / "manifest.jsonl"
    if not path.is_file():
        raise CorpusError(f"{path} not found; build the corpus first (build_demo_corpus)")
    rows = []
    for line_no, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{path}:{line_no}: not JSON ({exc}); fix or rebuild") from None
        if row.get("split") in splits:
            rows.append(row)
    return rows


def load_utterance(corpus_dir: Path, row: dict[str, object], config: TinyTTSConfig) -> TinyUtterance:
    """Read one manifest row's audio and alignment into a `TinyUtterance`."""
    wav_path = corpus_dir / str(row["audio"])
    align_path = corpus_dir / str(row["alignment"])
    wave, rate = sf.read(wav_path, dtype="float32", always_2d=False)
    if rate != SAMPLE_RATE_HZ or wave.ndim != 1:
        raise CorpusError(
            f"{wav_path}: {rate} Hz, shape {wave.shape}; the tiny backend needs mono 16000 Hz"
        )
    alignment = json.loads(align_path.read_text())
    if alignment.get("sample_rate_hz") != SAMPLE_RATE_HZ or not alignment.get("phonemes"):
        raise CorpusError(f"{align_path}: needs sample_rate_hz 16000 and a non-empty phoneme list")
    segments = alignment["phonemes"]
    try:
        ids = [config.phoneme_id(seg["phoneme"]) for seg in segments]
    except KeyError as exc:
        raise CorpusError(f"{align_path}: {exc.args[0]}") from None
    mel = log_mel(wave)
    durations = frame_durations([int(seg["end_sample"]) for seg in segments], frame_count(len(wave)))
    return TinyUtterance(
        id=str(row["id"]), speaker=str(row["speaker"]),
        phoneme_ids=np.asarray(ids, dtype=np.int64), durations=durations, mel=mel,
    )


def load_utterances(
    corpus_dir: str | Path, splits: tuple[str, ...], config: TinyTTSConfig
) -> list[TinyUtterance]:
    """Every utterance of ``splits`` in manifest order; raises CorpusError when there are none."""
    root = Path(corpus_dir)
    utterances = [load_utterance(root, row, config) for row in read_manifest(root, splits)]
    if not utterances:
        raise CorpusError(f"{root}/manifest.jsonl has no rows in splits {list(splits)}")
    return utterances


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
        phonemes = torch.full((len(utts), n_ph), PAD_ID, dtype=torch.long)
        durations = torch.zeros((len(utts), n_ph), dtype=torch.long)
        mels = torch.zeros((len(utts), n_fr, self._mels[0].shape[1]))
        for row, (i, u) in enumerate(zip(indices, utts)):
            phonemes[row, : len(u.phoneme_ids)] = torch.from_numpy(u.phoneme_ids)
            durations[row, : len(u.durations)] = torch.from_numpy(u.durations)
            mels[row, : u.n_frames] = self._mels[i]
        return TinyBatch(
            ids=tuple(u.id for u in utts), phoneme_ids=phonemes,
            speaker_ids=torch.tensor([self._speaker_ids[i] for i in indices]),
            durations=durations, mels=mels,
        )

    def batches(self, epoch: int, seed: int) -> list[TinyBatch]:
        """All batches of ``epoch`` in order: ``collate`` over `batch_plan`."""
        return [self.collate(b) for b in self.batch_plan(epoch, seed)]
