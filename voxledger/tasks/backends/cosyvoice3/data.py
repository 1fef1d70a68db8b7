"""Prepared parquet -> training examples, seeded batches, and upstream's padded batch dict.

`load_examples` does what upstream's data pipeline does before batching: drop audio below
16 kHz (``processor.resample``'s ``min_sample_rate``), tokenize ``text`` and ``instruct`` with
the model's tokenizer (``allowed_special`` from the yaml) and filter by length, counting every dropped utterance by reason (nothing is dropped silently). `collate`
builds the dict upstream's ``processor.padding`` yields and ``CosyVoice3LM.forward`` reads:
``text_token``/``_len``, ``speech_token``/``_len``, ``instruct_token``/``_len`` (padded with
0, lengths int32), L2-normalised ``utt_embedding``/``spk_embedding`` and ``embedding`` (the
utterance embedding: upstream's ``use_spk_embedding: False``), rows ordered by audio length,
longest first. ``speech_feat``/``whisper_feat`` are not built: the LLM does not read them when
``speech_token`` is present.

`batch_indices` is a pure function of (examples, frames_per_batch, epoch, seed): a seeded
permutation, stably sorted in windows of 500 by length, packed so that (longest x count)
frames stay within the budget (upstream's shuffle -> sort -> dynamic batch), then the batches
themselves shuffled. That last step is not upstream's: with fewer than 500 utterances (typical
for a new voice) the sort would otherwise give the same batches in the same order every epoch.
Frames are mel frames at 50 fps, two per speech token, as upstream counts ``speech_feat``.
"""

from __future__ import annotations

import io
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import soundfile as sf
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from voxledger.tasks.backends.cosyvoice3.compat import MIN_SAMPLE_RATE_HZ
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Options

SORT_WINDOW = 500
TOKEN_MEL_RATIO = 2
COLUMNS = ["utt", "audio_data", "text", "spk", "utt_embedding", "spk_embedding", "speech_token", "instruct"]


@dataclass(frozen=True)
class Example:
    """One utterance ready for the LLM."""

    utt: str
    speaker: str
    text: str
    duration_s: float
    text_token: tuple[int, ...]
    instruct_token: tuple[int, ...]
    speech_token: tuple[int, ...]
    utt_embedding: np.ndarray
    spk_embedding: np.ndarray

    @property
    def frames(self) -> int:
        return TOKEN_MEL_RATIO * len(self.speech_token)


@dataclass(frozen=True)
class LoadedExamples:
    """Kept examples (file order) and the count of dropped ones per reason."""

    examples: list[Example]
    dropped: dict[str, int]


def _drop_reason(ex: Example, opts: CosyVoice3Options) -> str | None:
    frames_10ms = ex.duration_s * 100
    if ex.duration_s < opts.min_duration_s:
        return "shorter_than_min_duration"
    if ex.duration_s > opts.max_duration_s:
        return "longer_than_max_duration"
    if len(ex.text_token) < opts.min_text_tokens:
        return "too_few_text_tokens"
    if len(ex.text_token) > opts.max_text_tokens:
        return "too_many_text_tokens"
    if not ex.speech_token:
        return "no_speech_tokens"
    if frames_10ms > 0 and len(ex.text_token) / frames_10ms < opts.min_tokens_per_frame:
        return "text_rate_below_min"
    if frames_10ms > 0 and len(ex.text_token) / frames_10ms > opts.max_tokens_per_frame:
        return "text_rate_above_max"
    return None


def load_examples(
    files: tuple[Path, ...], tokenizer: Any, allowed_special: Any, opts: CosyVoice3Options, speakers: tuple[str, ...] | None = None
) -> LoadedExamples:
    """Read parquet rows, tokenize, filter; ``speakers`` restricts to those voices (counted)."""
    kept: list[Example] = []
    dropped: Counter[str] = Counter()
    for path in files:
        for row in pq.read_table(path, columns=COLUMNS).to_pylist():
            if speakers is not None and row["spk"] not in speakers:
                dropped["speaker_not_in_plan"] += 1
                continue
            info = sf.info(io.BytesIO(row["audio_data"]))
            if info.samplerate < MIN_SAMPLE_RATE_HZ:  # upstream's processor.resample drops these (min_sample_rate)
                dropped[f"sample_rate_below_{MIN_SAMPLE_RATE_HZ}_hz"] += 1
                continue
            ex = Example(
                utt=row["utt"],
                speaker=row["spk"],
                text=row["text"],
                duration_s=info.frames / info.samplerate,
                text_token=tuple(tokenizer.encode(row["text"], allowed_special=allowed_special)),
                instruct_token=tuple(tokenizer.encode(row["instruct"], allowed_special=allowed_special)),
                speech_token=tuple(row["speech_token"]),
                utt_embedding=np.asarray(row["utt_embedding"], dtype=np.float32),
                spk_embedding=np.asarray(row["spk_embedding"], dtype=np.float32),
            )
            reason = _drop_reason(ex, opts)
            if reason is None:
                kept.append(ex)
            else:
                dropped[reason] += 1
    return LoadedExamples(kept, dict(sorted(dropped.items())))


def batch_indices(examples: list[Example], frames_per_batch: int, epoch: int, seed: int, *, shuffle: bool = True) -> list[tuple[int, ...]]:
    """Index groups of one epoch; a pure function of its arguments."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(examples)) if shuffle else np.arange(len(examples))
    stream: list[int] = []
    for start in range(0, len(order), SORT_WINDOW):  # stable sort: equal lengths keep the shuffled order
        stream += sorted((int(i) for i in order[start : start + SORT_WINDOW]), key=lambda i: examples[i].frames)
    batches: list[tuple[int, ...]] = []
    buf: list[int] = []
    longest = 0
    for i in stream:
        longest = max(longest, examples[i].frames)
        if buf and longest * (len(buf) + 1) > frames_per_batch:
            batches.append(tuple(buf))
            buf, longest = [], examples[i].frames
        buf.append(i)
    if buf:
        batches.append(tuple(buf))
    return [batches[i] for i in rng.permutation(len(batches))] if shuffle else batches


def _padded(seqs: list[tuple[int, ...]]) -> tuple[torch.Tensor, torch.Tensor]:
    tensors = [torch.tensor(s, dtype=torch.int64) for s in seqs]
    return pad_sequence(tensors, batch_first=True, padding_value=0), torch.tensor([len(s) for s in seqs], dtype=torch.int32)


def collate(examples: list[Example]) -> dict[str, Any]:
    """Upstream's padded batch dict for ``CosyVoice3LM.forward(batch, device)``."""
    exs = sorted(examples, key=lambda e: -e.duration_s)
    batch: dict[str, Any] = {"utts": [e.utt for e in exs], "text": [e.text for e in exs]}
    for name, seqs in (
        ("text_token", [e.text_token for e in exs]),
        ("speech_token", [e.speech_token for e in exs]),
        ("instruct_token", [e.instruct_token for e in exs]),
    ):
        batch[name], batch[f"{name}_len"] = _padded(seqs)
    batch["utt_embedding"] = F.normalize(torch.from_numpy(np.stack([e.utt_embedding for e in exs])), dim=1)
    batch["spk_embedding"] = F.normalize(torch.from_numpy(np.stack([e.spk_embedding for e in exs])), dim=1)
    batch["embedding"] = batch["utt_embedding"]
    return batch


def audio_bytes(files: tuple[Path, ...], utt: str) -> tuple[bytes, str]:
    """The original audio bytes of ``utt`` and its corpus-relative path, from the parquet."""
    for path in files:
        for row in pq.read_table(path, columns=["utt", "audio_data", "wav"]).to_pylist():
            if row["utt"] == utt:
                return row["audio_data"], row["wav"]
    raise KeyError(f"utterance {utt!r} is not in {[p.name for p in files]}")


def batch_frames(batch: dict[str, Any]) -> tuple[int, int]:
    """(mel frames at 50 fps, utterances) of a collated batch."""
    return TOKEN_MEL_RATIO * int(batch["speech_token_len"].sum()), len(batch["utts"])
