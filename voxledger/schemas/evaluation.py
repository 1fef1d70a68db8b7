"""Frozen evaluation plans, generation rows, observations and the evaluation receipt."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue, model_validator

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256
from voxledger.schemas.metrics import (
    CHARACTER_LANGUAGES,
    AnySpeakerSpec,
    AsrSpec,
    ContentGateSpec,
    MosSpec,
    SpeakerSpec,
    TextMetricSpec,
    ValiditySpec,
    WhisperLanguage,
)
from voxledger.schemas.profiles import ProfileName
from voxledger.schemas.training import BackendName

Runtime = Literal["base", "adapter", "merged", "merged_export", "recordings"]
MetricName = Literal[
    "wer",
    "cer",
    "speaker_sim",
    "predicted_mos_ovrl",
    "predicted_mos_sig",
    "predicted_mos_bak",
    "duration_s",
    "expected_duration_ratio",
    "silence_fraction",
    "clipping_fraction",
    "content_gate_pass",
    "anchor_hit_rate",
    "rtf",
]
INVALID_RATE = "invalid_rate"
"""One observation per generation row, 1 when the generation failed (no valid audio), else 0: measured by
the evaluation itself, not an extractor, so a failed generation is a gate metric like any other."""
LOWER_IS_BETTER: frozenset[str] = frozenset({"wer", "cer", "silence_fraction", "clipping_fraction", "rtf", INVALID_RATE})
METRIC_RANGES: dict[str, tuple[float | None, float | None]] = {
    "wer": (0.0, None),
    "cer": (0.0, None),
    "speaker_sim": (-1.0, 1.0),
    "predicted_mos_ovrl": (1.0, 5.0),
    "predicted_mos_sig": (1.0, 5.0),
    "predicted_mos_bak": (1.0, 5.0),
    "duration_s": (0.0, None),
    "expected_duration_ratio": (0.0, None),
    "silence_fraction": (0.0, 1.0),
    "clipping_fraction": (0.0, 1.0),
    "content_gate_pass": (0.0, 1.0),
    "anchor_hit_rate": (0.0, 1.0),
    "rtf": (0.0, None),
    INVALID_RATE: (0.0, 1.0),
}
"""The range each metric's values can take (None: unbounded on that side); no interval leaves it."""
PROPORTION_METRICS: frozenset[str] = frozenset({"content_gate_pass", INVALID_RATE})
"""0/1 outcomes per row: Wilson intervals for their rates, Newcombe for paired differences."""


def metric_range(metric: str) -> tuple[float | None, float | None]:
    """The range of ``metric`` (``wer:whisper_en`` -> the range of ``wer``); unbounded when unknown."""
    return METRIC_RANGES.get(metric.split(":", 1)[0], (None, None))


class Anchor(Frozen):
    """A lexical anchor: a surface form that must be spoken, and the ASR forms accepted for it."""

    surface: str = Field(min_length=1)
    accepted: tuple[str, ...] = Field(min_length=1)


class Prompt(Frozen):
    """One thing to say; ``recording`` is the held-out ground truth (corpus-relative path).

    ``language`` (a Whisper code) overrides the ASR spec's for this prompt: what the recogniser is
    told and which unit the content gate counts (``by_language``).
    """

    id: str = Field(min_length=1)
    category: str = Field(min_length=1)
    text: str = Field(min_length=1)
    instruction: str | None = None
    anchors: tuple[Anchor, ...] = ()
    recording: str | None = None
    language: WhisperLanguage | None = Field(default=None, exclude_if=lambda v: v is None)


OWN_BASE = "own"
"""``Candidate.base`` for a backend whose base is its own configured model, not a stored tree."""


class Candidate(Frozen):
    """A system under test: backend, artifact and every inference setting.

    ``artifact`` and ``base`` are a sha256 (a stored tree), ``alias:NAME`` or ``alias:LINE:NAME``
    (resolved through the model line's alias history at run time) or ``input:NAME`` (bound by the caller at run time); the resolved
    digests are recorded in the evaluation receipt. ``base: own`` (`OWN_BASE`) is the backend's own
    configured base model (cosyvoice3's model folder, bound by the training run's backend identity).
    """

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    backend: BackendName | Literal["recordings"]
    runtime: Runtime
    artifact: str | None = None
    base: str | None = None
    speaker: str | None = None
    settings: dict[str, JsonValue] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Candidate:
        if self.runtime == "recordings":
            if self.backend != "recordings":
                raise ValueError(f"candidate {self.name}: runtime 'recordings' needs backend 'recordings'")
        elif self.artifact is None or self.speaker is None:
            raise ValueError(f"candidate {self.name}: a synthesising candidate needs 'artifact' and 'speaker'")
        if self.runtime in ("adapter", "merged") and self.base is None:
            raise ValueError(f"candidate {self.name}: runtime {self.runtime!r} needs 'base' (the model the adapter was trained on)")
        return self


class MetricSuite(Frozen):
    """Which extractors run, each a named, versioned spec."""

    asr: AsrSpec = AsrSpec()
    text: tuple[TextMetricSpec, ...] = (TextMetricSpec(normaliser="whisper_en"), TextMetricSpec(normaliser="basic"))
    speaker: AnySpeakerSpec | None = SpeakerSpec()
    mos: MosSpec | None = MosSpec()
    validity: ValiditySpec = ValiditySpec()
    content_gate: ContentGateSpec = ContentGateSpec()


IntervalMethod = Literal["cluster_t", "cluster_bootstrap_t"]
TestMethod = Literal["cluster_t"]
RecordedInterval = Literal["cluster_t", "cluster_bootstrap_t", "wilson", "newcombe_paired", "clopper_pearson"]
"""What an interval in a receipt was computed with: the plan's method, or the proportion method
(``wilson`` for a 0/1 metric's rate, ``newcombe_paired`` for a paired difference of rates)."""
Multiplicity = Literal["holm", "fdr_bh"]
MIN_PROMPTS: dict[str, int] = {"cluster_t": 5, "cluster_bootstrap_t": 5}
"""Fewest prompts (independent units) each method needs; docs/statistics.md gives the reasons."""


class StatisticsSettings(Frozen):
    """How intervals and paired tests are computed; the prompt is the independent unit.

    ``interval``: ``cluster_t`` is a t interval on prompt means (df = prompts - 1);
    ``cluster_bootstrap_t`` a studentized bootstrap resampling prompts (better for skewed
    metrics with many prompts). ``test``: ``cluster_t`` is a one-sample t test on per-prompt mean
    deltas. Seeds are nested in prompts and averaged within each prompt first.
    ``multiplicity``: how the p-values of one evaluation's comparisons (its family) are adjusted:
    ``holm`` (familywise error, the default) or ``fdr_bh`` (Benjamini-Hochberg false discovery
    rate). ``failure_threshold`` and ``failure_rule``: which prompts count as failed in the
    two-part comparison of error rates: under ``level`` a side fails a prompt whose mean error rate
    (WER, CER) reaches the threshold; under ``increase`` a side fails a prompt on which its error
    rate exceeds the other side's by at least the threshold (a catastrophic prompt, defined against
    the pair, so a model whose per-prompt error rates are high and noisy does not "fail" prompts by
    noise alone).
    """

    bootstrap_resamples: int = Field(default=2000, ge=100)
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    bootstrap_seed: int = 0
    cluster: Literal["prompt"] = "prompt"
    interval: IntervalMethod = "cluster_t"
    test: TestMethod = "cluster_t"
    # fields added after the first release are left out of the canonical form at their default,
    # so the digests of plans written before them do not change
    multiplicity: Multiplicity = Field(default="holm", exclude_if=lambda v: v == "holm")
    failure_threshold: float = Field(default=0.5, gt=0, exclude_if=lambda v: v == 0.5)
    failure_rule: Literal["level", "increase"] = Field(default="level", exclude_if=lambda v: v == "level")

    def min_units(self) -> int:
        """Fewest prompts the chosen interval and test need."""
        return max(MIN_PROMPTS[self.interval], MIN_PROMPTS[self.test])


class EvaluationPlan(Frozen):
    """A pre-registered evaluation: prompts x seeds x candidates, metrics and statistics."""

    kind: Literal["evaluation_plan"] = "evaluation_plan"
    name: str
    prompts: tuple[Prompt, ...] = Field(min_length=1)
    seeds: tuple[int, ...] = Field(min_length=1)
    candidates: tuple[Candidate, ...] = Field(min_length=1)
    baseline: str
    speaker_references: dict[str, str] = Field(default_factory=dict)
    metrics: MetricSuite = MetricSuite()
    statistics: StatisticsSettings = StatisticsSettings()
    profile: ProfileName | None = Field(default=None, exclude_if=lambda v: v is None)
    """A published protocol to sit beside (`voxledger.schemas.profiles`): the receipt lists every difference."""

    @model_validator(mode="after")
    def _check(self) -> EvaluationPlan:
        names = [c.name for c in self.candidates]
        ids = [p.id for p in self.prompts]
        problems = []
        if len(set(names)) != len(names):
            problems.append(f"candidate names repeat: {names}")
        if len(set(ids)) != len(ids):
            problems.append("prompt ids repeat")
        if self.baseline not in names:
            problems.append(f"baseline {self.baseline!r} is not a candidate ({names})")
        if any(c.runtime == "recordings" for c in self.candidates):
            missing = [p.id for p in self.prompts if p.recording is None]
            if missing:
                problems.append(f"a 'recordings' candidate needs a recording for every prompt; missing: {missing[:5]}")
        problems += self._language_problems()
        if self.metrics.speaker is not None:
            need = {f"{p.id}:{s}" for p in self.prompts for s in self.seeds}
            missing_refs = sorted(need - set(self.speaker_references))
            if missing_refs:
                problems.append(f"speaker_references must assign a reference to every prompt:seed; missing {missing_refs[:5]}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def prompt_language(self, prompt: Prompt) -> str:
        """The language the recogniser is told for ``prompt`` (its own, else the ASR spec's; may be ``detect``)."""
        return prompt.language or self.metrics.asr.language

    def _language_problems(self) -> list[str]:
        asr, gate = self.metrics.asr, self.metrics.content_gate
        problems = []
        foreign = sorted({p.language for p in self.prompts if p.language not in (None, "en")})
        if asr.english_only and foreign:
            problems.append(f"prompts in {foreign} need a multilingual ASR model; metrics.asr.model_name {asr.model_name} is English only")
        languages = {self.prompt_language(p) for p in self.prompts}
        if gate.unit == "word" and languages & CHARACTER_LANGUAGES:
            problems.append(
                f"prompts in {sorted(languages & CHARACTER_LANGUAGES)} have no words to count: "
                "set metrics.content_gate.unit to by_language (or char) and its text_metric normaliser to zh"
            )
        if gate.unit == "by_language" and "detect" in languages:
            problems.append("content_gate unit by_language needs each prompt's language: give prompts a language or the ASR spec one")
        return problems


class Generation(Frozen):
    """One (candidate, prompt, seed) attempt; a failure stays as an invalid row with its error."""

    candidate: str
    prompt_id: str
    seed: int
    valid: bool
    audio_sha256: Sha256 | None = None
    sample_rate_hz: int | None = None
    native_audio_sha256: Sha256 | None = None
    """The clip at the rate the backend produced it, kept when that rate is above the metrics' 16 kHz (listening
    packets are rendered from it: a 24 kHz model is heard at 24 kHz)."""
    native_sample_rate_hz: int | None = None
    duration_s: float | None = None
    wall_s: float = 0.0
    rtf: float | None = None
    peak_rss_mb: float | None = None
    error: str | None = None


class Observation(Frozen):
    """One sample x metric value with the identity of the extractor that produced it."""

    candidate: str
    prompt_id: str
    category: str
    seed: int
    metric: str
    value: float
    extractor_sha256: Sha256


class Interval(Frozen):
    """A mean over prompts with a confidence interval; ``low``/``high`` are None when not estimable.

    ``mean`` weights every prompt equally (the mean of per-prompt means); ``n`` counts rows,
    ``units`` the prompts the interval rests on; ``note`` says why an interval is missing;
    ``fallback`` says when the plan's method left the metric's range and a bounded one replaced it.
    """

    mean: float
    low: float | None
    high: float | None
    n: int
    method: RecordedInterval
    unit: Literal["prompt"] = "prompt"
    units: int
    note: str | None = None
    fallback: str | None = None


class PairedTest(Frozen):
    """A test of ``mean delta = 0`` at the level of the unit; ``p_value`` is None when not estimable.

    ``p_adjusted`` is ``p_value`` adjusted over ``family`` (``family_size`` estimable tests, with
    ``adjustment``): every comparison of one evaluation forms one family.
    """

    method: TestMethod
    unit: Literal["prompt"] = "prompt"
    units: int
    statistic: float | None
    p_value: float | None
    note: str | None = None
    p_adjusted: float | None = None
    adjustment: Multiplicity | None = None
    family: str | None = None
    family_size: int | None = None


class FailureSplit(Frozen):
    """Two-part comparison of an error rate: failed prompts, and the metric over the prompts kept.

    A side fails a prompt when its mean error rate there reaches ``threshold``. ``rate_delta`` is
    the difference of failure rates (candidate - baseline, Newcombe paired interval, inside
    [-1, 1]); ``kept`` is the paired delta over prompts neither side failed.
    """

    threshold: float
    prompts: int
    candidate_failed: int
    baseline_failed: int
    rate_delta: Interval
    kept: Interval
    new_failures: Interval | None = Field(default=None, exclude_if=lambda v: v is None)
    """The rate of prompts the candidate failed and the baseline did not (Clopper-Pearson at the plan's
    confidence, exact): its upper end bounds the failure-rate increase from above, and unlike
    ``rate_delta`` it can pass a useful margin at a few dozen prompts (``new_failure_rate_high``)."""


class CandidateSummary(Frozen):
    """Per candidate: metric means with CIs, overall and per category; invalid-output rate."""

    candidate: str
    n_rows: int
    invalid_rate: float
    content_gate_fail_rate: float
    overall: dict[str, Interval]
    by_category: dict[str, dict[str, Interval]]
    micro_wer: dict[str, float]


class Comparison(Frozen):
    """Paired delta (candidate - baseline) on one metric: shared (prompt, seed) pairs, averaged per prompt."""

    candidate: str
    baseline: str
    metric: str
    delta: Interval
    test: PairedTest
    n_pairs: int
    lower_is_better: bool
    failures: FailureSplit | None = None


class EvaluationResult(Frozen):
    """Summaries and comparisons; no composite score. ``not_compared`` says why a metric is absent.

    ``profile`` is the published protocol the plan named and ``deviations`` every way this run
    differs from it (empty with no profile); ``failures`` says how failed generations were counted.
    """

    summaries: tuple[CandidateSummary, ...]
    comparisons: tuple[Comparison, ...]
    not_compared: dict[str, str] = Field(default_factory=dict)
    profile: ProfileName | None = Field(default=None, exclude_if=lambda v: v is None)
    deviations: tuple[str, ...] = Field(default=(), exclude_if=lambda v: not v)
    failures: str | None = Field(default=None, exclude_if=lambda v: v is None)


class ResolvedCandidate(Frozen):
    """A candidate with its artifacts resolved to digests."""

    name: str
    runtime: Runtime
    artifact_sha256: Sha256 | None
    base_sha256: Sha256 | None


class EvaluationParameters(Frozen):
    """Plan identity, resolved candidates and extractor identities."""

    plan_sha256: Sha256
    plan_name: str
    candidates: tuple[ResolvedCandidate, ...]
    extractors: dict[str, Sha256]
    extractor_specs: dict[str, dict[str, JsonValue]]
    n_generations: int
    n_observations: int


class EvaluationReceipt(ReceiptBase):
    """An evaluation run; subjects are the generation rows and observations (JSON blobs)."""

    kind: Literal["evaluation"] = "evaluation"
    parameters: EvaluationParameters
    result: EvaluationResult
