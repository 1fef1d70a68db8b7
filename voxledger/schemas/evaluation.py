"""Frozen evaluation plans, generation rows, observations and the evaluation receipt."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue, model_validator

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256
from voxledger.schemas.metrics import (
    AsrSpec,
    ContentGateSpec,
    MosSpec,
    SpeakerSpec,
    TextMetricSpec,
    ValiditySpec,
)
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
LOWER_IS_BETTER: frozenset[str] = frozenset({"wer", "cer", "silence_fraction", "clipping_fraction", "rtf"})


class Anchor(Frozen):
    """A lexical anchor: a surface form that must be spoken, and the ASR forms accepted for it."""

    surface: str = Field(min_length=1)
    accepted: tuple[str, ...] = Field(min_length=1)


class Prompt(Frozen):
    """One thing to say; ``recording`` is the held-out ground truth (corpus-relative path)."""

    id: str = Field(min_length=1)
    category: str = Field(min_length=1)
    text: str = Field(min_length=1)
    instruction: str | None = None
    anchors: tuple[Anchor, ...] = ()
    recording: str | None = None


class Candidate(Frozen):
    """A system under test: backend, artifact and every inference setting.

    ``artifact`` and ``base`` are a sha256 (a stored tree), ``alias:NAME`` (resolved through the
    alias history at run time) or ``input:NAME`` (bound by the caller at run time); the resolved
    digests are recorded in the evaluation receipt.
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
    speaker: SpeakerSpec | None = SpeakerSpec()
    mos: MosSpec | None = MosSpec()
    validity: ValiditySpec = ValiditySpec()
    content_gate: ContentGateSpec = ContentGateSpec()


IntervalMethod = Literal["cluster_t", "cluster_bootstrap_t"]
TestMethod = Literal["cluster_t"]
MIN_PROMPTS: dict[str, int] = {"cluster_t": 5, "cluster_bootstrap_t": 5}
"""Fewest prompts (independent units) each method needs; docs/statistics.md gives the reasons."""


class StatisticsSettings(Frozen):
    """How intervals and paired tests are computed; the prompt is the independent unit.

    ``interval``: ``cluster_t`` is a t interval on prompt means (df = prompts - 1);
    ``cluster_bootstrap_t`` a studentized bootstrap resampling prompts (better for skewed
    metrics with many prompts). ``test``: ``cluster_t`` is a one-sample t test on per-prompt mean
    deltas. Seeds are nested in prompts and averaged within each prompt first.
    """

    bootstrap_resamples: int = Field(default=2000, ge=100)
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    bootstrap_seed: int = 0
    cluster: Literal["prompt"] = "prompt"
    interval: IntervalMethod = "cluster_t"
    test: TestMethod = "cluster_t"

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
        if self.metrics.speaker is not None:
            need = {f"{p.id}:{s}" for p in self.prompts for s in self.seeds}
            missing_refs = sorted(need - set(self.speaker_references))
            if missing_refs:
                problems.append(f"speaker_references must assign a reference to every prompt:seed; missing {missing_refs[:5]}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class Generation(Frozen):
    """One (candidate, prompt, seed) attempt; a failure stays as an invalid row with its error."""

    candidate: str
    prompt_id: str
    seed: int
    valid: bool
    audio_sha256: Sha256 | None = None
    sample_rate_hz: int | None = None
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
    ``units`` the prompts the interval rests on; ``note`` says why an interval is missing.
    """

    mean: float
    low: float | None
    high: float | None
    n: int
    method: IntervalMethod
    unit: Literal["prompt"] = "prompt"
    units: int
    note: str | None = None


class PairedTest(Frozen):
    """A test of ``mean delta = 0`` at the level of the unit; ``p_value`` is None when not estimable."""

    method: TestMethod
    unit: Literal["prompt"] = "prompt"
    units: int
    statistic: float | None
    p_value: float | None
    note: str | None = None


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


class EvaluationResult(Frozen):
    """Summaries and comparisons; no composite score. ``not_compared`` says why a metric is absent."""

    summaries: tuple[CandidateSummary, ...]
    comparisons: tuple[Comparison, ...]
    not_compared: dict[str, str] = Field(default_factory=dict)


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
