"""Corpus preparation: the transform, each derived file bound to its source, and the receipt."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256


class PrepareTransform(Frozen):
    """What ``corpus prepare`` does to every utterance, in order: cut (segments), down-mix by
    channel mean, resample (soxr, very high quality), normalise loudness, write 16-bit WAV."""

    sample_rate_hz: int = Field(gt=0)
    channels: Literal[1] = 1
    resampler: Literal["soxr_vhq"] = "soxr_vhq"
    loudness_lufs: float | None = None
    peak_ceiling: float = Field(default=0.999, gt=0, le=1)
    subtype: Literal["PCM_16"] = "PCM_16"


class DerivedFile(Frozen):
    """One derived file: the source recording's digest and sample range, what was done, the result."""

    utterance_id: str
    source_sha256: Sha256
    source_start_sample: int = Field(ge=0)
    source_stop_sample: int = Field(gt=0)
    source_sample_rate_hz: int = Field(gt=0)
    source_channels: int = Field(ge=1)
    gain_db: float
    derived_sha256: Sha256


class PrepareParameters(Frozen):
    """Identities bound by the preparation (never paths or audio roots)."""

    corpus_name: str
    policy_sha256: Sha256
    source_manifest_sha256: Sha256
    source_audio_tree_sha256: Sha256
    transform: PrepareTransform


class PrepareResult(Frozen):
    """Counts of what changed; the per-file bindings are the ``derivations`` subject (JSONL)."""

    n_utterances: int = Field(ge=0)
    n_cut: int = Field(ge=0)
    n_resampled: int = Field(ge=0)
    n_downmixed: int = Field(ge=0)
    n_loudness_normalised: int = Field(ge=0)
    n_peak_limited: int = Field(ge=0)
    hours: float = Field(ge=0)


class PrepareReceipt(ReceiptBase):
    """A corpus was turned into a derived corpus that meets a policy; subjects: the derived
    manifest, the manifest file, its audio tree, and the per-file derivations."""

    kind: Literal["corpus_prepare"] = "corpus_prepare"
    parameters: PrepareParameters
    result: PrepareResult


class MaterialiseParameters(Frozen):
    """What ``corpus materialise`` was asked to do (the commands themselves are the ``commands`` subject)."""

    source_name: str
    timeout_s: float = Field(gt=0)


class MaterialiseResult(Frozen):
    """How many pipe commands ran and what the copied data directory holds."""

    n_commands: int = Field(ge=1)
    n_files: int = Field(ge=1)
    seconds: float = Field(ge=0)


class MaterialiseReceipt(ReceiptBase):
    """``wav.scp`` pipe commands were run once, without a shell; subjects: the copied data directory
    (a tree whose wav.scp names the files they wrote) and ``commands`` (JSONL: per line the argument
    vector, working directory, program path and sha256, output digest, format and length)."""

    kind: Literal["pipe_materialise"] = "pipe_materialise"
    parameters: MaterialiseParameters
    result: MaterialiseResult
