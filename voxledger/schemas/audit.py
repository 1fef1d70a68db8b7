"""Audit policy (a frozen plan), findings, corpus statistics and the audit receipt."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256
from voxledger.schemas.metrics import AsrSpec, NormaliserName, ValiditySpec

Severity = Literal["error", "warning", "info"]
LeakageKey = Literal["speaker", "recording_id", "text_norm"]

FindingCode = Literal[
    "split_leakage",
    "duplicate_audio",
    "near_duplicate_audio",
    "duplicate_text",
    "manifest_unreadable_line",
    "manifest_invalid_record",
    "duplicate_id",
    "path_escape",
    "audio_missing",
    "audio_unreadable",
    "sample_rate_mismatch",
    "channel_mismatch",
    "duration_out_of_bounds",
    "silence",
    "clipping",
    "dc_offset",
    "non_finite",
    "empty_transcript",
    "control_characters",
    "speaking_rate",
    "asr_disagreement",
    "noisy_audio",
    "empty_corpus",
    "speaker_lookalike",
]


class LeakageRule(Frozen):
    """No value of ``key`` may occur in two groups of splits.

    ``partition`` lists groups of split names that may share values (e.g. base speakers appear
    in both train and dev); every split not listed is a group of its own. Leakage is always an
    error: there is deliberately no severity setting and no switch to turn it off.
    """

    key: LeakageKey
    partition: tuple[tuple[str, ...], ...] = ()


class NearDuplicatePolicy(Frozen):
    """Acoustic fingerprint matching (robust to gain, resampling and re-encoding)."""

    enabled: bool = True
    max_hamming_bits: int = Field(default=12, ge=0, le=15)
    severity: Severity = "warning"


class AsrAgreementPolicy(Frozen):
    """Transcribe each file with a Whisper model; flag CER above a bound, fail a transcript no better than chance.

    ``asr`` names the recogniser and the corpus language (default: the packaged tiny.en, English;
    a Chinese corpus: ``{model_name: whisper-base-ct2, language: zh}``). CER is computed after
    ``normaliser`` (default by language: ``whisper_en`` for English, ``zh`` for Chinese and
    Cantonese, ``basic`` otherwise).
    """

    enabled: bool = False
    max_cer: float = Field(default=0.35, gt=0)
    severity: Severity = "warning"
    # Left out of the canonical form at their defaults, so policies written before them keep their digests.
    fail_chance_ratio: float | None = Field(
        default=None,
        gt=0,
        le=1,
        exclude_if=lambda v: v is None,
        description="a clip above max_cer whose CER is at least this fraction of its median CER against 25 other transcripts "
        "of the corpus is an error: its transcript fits the audio no better than another recording's would",
    )
    beam_size: int = Field(
        default=5, ge=1, le=16, exclude_if=lambda v: v == 5, description="Whisper beam width for this check (1: greedy, fastest)"
    )
    better_fit_margin: float | None = Field(
        default=None,
        gt=0,
        le=1,
        exclude_if=lambda v: v is None,
        description="a clip above max_cer is an error when another transcript of the corpus fits what ASR heard better than "
        "its own by at least this margin (edit distance over the longer text, 0-1): its line belongs to another clip. "
        "Unlike fail_chance_ratio it holds when the recogniser hears the corpus poorly",
    )
    asr: AsrSpec | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="the recogniser and the corpus language; unset: the packaged Whisper tiny.en, English",
    )
    normaliser: NormaliserName | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="text normaliser before CER; unset: whisper_en for English, zh for Chinese or Cantonese, basic otherwise",
    )

    def asr_spec(self) -> AsrSpec:
        """The recogniser this check runs (``beam_size`` applies when set away from its default)."""
        spec = self.asr or AsrSpec()
        return spec if self.beam_size == 5 else spec.model_copy(update={"beam_size": self.beam_size})

    def normaliser_name(self) -> NormaliserName:
        """The normaliser CER is computed after (the policy's, else the language's)."""
        if self.normaliser is not None:
            return self.normaliser
        language = self.asr_spec().language
        return "whisper_en" if language == "en" else "zh" if language in ("zh", "yue") else "basic"


class NoiseScreenPolicy(Frozen):
    """DNSMOS background-noise screen; flags predicted BAK below a bound."""

    enabled: bool = False
    min_bak: float = Field(default=2.5, ge=1, le=5)
    severity: Severity = "warning"


class AuditPolicy(Frozen):
    """Thresholds, group keys and severities of a corpus audit. Every default lives here."""

    kind: Literal["audit_policy"] = "audit_policy"
    name: str
    leakage: tuple[LeakageRule, ...] = Field(min_length=1)
    sample_rate_hz: int = Field(default=16000, gt=0)
    # a floor the training backend needs (cosyvoice3: 16000, upstream drops anything below it);
    # every audited file must have sample_rate_hz, so the floor is checked against it. None: no floor.
    min_sample_rate_hz: int | None = Field(default=None, gt=0)
    channels: int = Field(default=1, ge=1)
    min_duration_s: float = Field(default=0.3, ge=0)
    max_duration_s: float = Field(default=30.0, gt=0)
    validity: ValiditySpec = ValiditySpec()
    duplicate_text_same_speaker: Severity = "warning"
    speaking_rate_severity: Severity = "warning"
    dc_offset_severity: Severity = "warning"
    # a speaker id mixing scripts with look-alike letters ("ѕpk-b1", Cyrillic ѕ) reads as another speaker's id while
    # being a different one: it splits one speaker in two and walks past a speaker leakage partition. Out of the
    # canonical form at its default, so older policies keep their digests.
    speaker_lookalike_severity: Severity = Field(default="error", exclude_if=lambda v: v == "error")
    near_duplicate: NearDuplicatePolicy = NearDuplicatePolicy()
    asr_agreement: AsrAgreementPolicy = AsrAgreementPolicy()
    noise_screen: NoiseScreenPolicy = NoiseScreenPolicy()
    store_audio: bool = True
    # what ``voxledger corpus prepare`` normalises integrated loudness (ITU-R BS.1770) to; None
    # leaves levels alone. Left out of the canonical form when unset, so existing policies keep
    # their digests.
    loudness_lufs: float | None = Field(default=None, ge=-70, le=0, exclude_if=lambda v: v is None)

    @model_validator(mode="after")
    def _check(self) -> AuditPolicy:
        if self.min_duration_s >= self.max_duration_s:
            raise ValueError(f"min_duration_s {self.min_duration_s} must be below max_duration_s {self.max_duration_s}")
        if self.min_sample_rate_hz is not None and self.sample_rate_hz < self.min_sample_rate_hz:
            raise ValueError(
                f"sample_rate_hz {self.sample_rate_hz} is below min_sample_rate_hz {self.min_sample_rate_hz}; "
                f"resample the corpus to at least {self.min_sample_rate_hz} Hz and set sample_rate_hz to match"
            )
        keys = [r.key for r in self.leakage]
        if len(set(keys)) != len(keys):
            raise ValueError(f"leakage keys repeat: {keys}; give each key once")
        return self


class Finding(Frozen):
    """One problem: what, how bad, which utterances, the measured value and the bound."""

    code: FindingCode
    severity: Severity
    utterance_ids: tuple[str, ...] = ()
    message: str
    value: float | None = None
    bound: float | None = None
    file: str | None = None
    line: int | None = None


class SplitStats(Frozen):
    """Size of one split."""

    split: str
    utterances: int
    speakers: int
    hours: float


class CorpusStats(Frozen):
    """Corpus statistics: per split, per speaker, and a duration histogram (1 s bins)."""

    splits: tuple[SplitStats, ...]
    speaker_hours: dict[str, float]
    speaker_utterances: dict[str, int]
    speaker_split_utterances: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="utterances per speaker per split (empty in audits recorded before it was counted)",
    )
    duration_histogram_s: dict[str, int]
    total_hours: float


class ClipAgreement(Frozen):
    """ASR agreement of one clip: what the recogniser heard and the CER against the transcript."""

    utterance_id: str
    heard: str
    cer: float = Field(ge=0)
    language: str
    language_probability: float | None = Field(default=None, exclude_if=lambda v: v is None)


class AsrAgreementResult(Frozen):
    """Every clip's ASR agreement (not only the findings), with the model and text rule that made it."""

    asr: AsrSpec
    normaliser: NormaliserName
    clips: tuple[ClipAgreement, ...]
    median_cer: float | None


class AuditResult(Frozen):
    """What the audit concluded; ``asr_agreement`` holds every clip's CER when that check ran."""

    verdict: Literal["pass", "fail"]
    n_utterances: int
    counts_by_code: dict[str, int]
    counts_by_severity: dict[str, int]
    findings: tuple[Finding, ...]
    stats: CorpusStats
    asr_agreement: AsrAgreementResult | None = Field(default=None, exclude_if=lambda v: v is None)


class AuditParameters(Frozen):
    """Identities bound by the audit."""

    corpus_name: str
    policy_sha256: Sha256
    manifest_sha256: Sha256
    audio_tree_sha256: Sha256


class AuditReceipt(ReceiptBase):
    """A corpus was audited under a policy; training may start only from a passing one."""

    kind: Literal["audit"] = "audit"
    parameters: AuditParameters
    result: AuditResult
