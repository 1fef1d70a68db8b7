"""Promotion policy (explicit gates, no composite score), alias moves and the promotion receipt."""

from __future__ import annotations

import math
from typing import Literal, get_args

from pydantic import Field, model_validator

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256
from voxledger.schemas.evaluation import MetricSuite, Prompt, StatisticsSettings
from voxledger.schemas.training import BackendName

Statistic = Literal[
    "delta_mean",
    "delta_low",
    "delta_high",
    "challenger_mean",
    "failure_rate_delta_high",
    "kept_delta_mean",
    "kept_delta_low",
    "kept_delta_high",
    "new_failure_rate_high",
]


class GateRule(Frozen):
    """``statistic`` of ``metric`` (challenger vs incumbent, paired) must satisfy ``op threshold``.

    ``delta_high`` is the upper bound of the delta's CI: "WER may not get worse by more than 2
    points even at the pessimistic end" reads ``metric: wer:whisper_en, statistic: delta_high,
    op: "<=", threshold: 0.02``.

    Error rates (``wer:*``, ``cer:*``) also have a two-part comparison robust to a few
    catastrophic prompts: ``failure_rate_delta_high`` is the upper end of the difference of
    failed-prompt rates (Newcombe), ``kept_delta_*`` the delta over prompts neither side failed.
    Every paired statistic, ``delta_mean`` included, fails when its interval is not estimable.
    """

    metric: str
    statistic: Statistic
    op: Literal["<=", ">="]
    threshold: float
    why: str = ""


class GatePlan(Frozen):
    """The frozen part of a gate evaluation: prompts, seeds, references, metrics, statistics.

    Each promotion round adds its candidates (incumbent + challengers) and registers the
    resulting evaluation plan, so every gate evaluation is itself a pre-registered plan.
    """

    name: str
    prompts: tuple[Prompt, ...] = Field(min_length=1)
    seeds: tuple[int, ...] = Field(min_length=1)
    speaker_references: dict[str, str] = Field(default_factory=dict)
    metrics: MetricSuite = MetricSuite()
    statistics: StatisticsSettings = StatisticsSettings()


PAIRED_STATISTICS = frozenset({"delta_mean", "delta_low", "delta_high"})
SPLIT_STATISTICS = frozenset({"failure_rate_delta_high", "kept_delta_mean", "kept_delta_low", "kept_delta_high", "new_failure_rate_high"})


LINE_PATTERN = r"^[^/\s]{1,64}/[a-z0-9_]{1,32}$"
"""A model line's name: ``VOICE/BACKEND`` (e.g. ``joe/tiny``)."""
BASE_VOICE = "base"
"""The voice part of the line of a run that adds no speaker (a full-mode run)."""


def model_line(voice: str | None, backend: str) -> str:
    """The line a run trained for ``voice`` on ``backend`` belongs to: ``VOICE/BACKEND``.

    A line is the registered model of one target: it owns its aliases (``champion``,
    ``candidate``) and their history, so two voices in one home never judge or move each other.
    """
    return f"{voice or BASE_VOICE}/{backend}"


def new_failure_floor(prompts: int, confidence: float, challengers: int) -> float:
    """The smallest margin ``new_failure_rate_high`` can pass: the Clopper-Pearson upper end for no newly
    failed prompt of ``prompts``, at the round's per-challenger confidence (Bonferroni over ``challengers``)."""
    tail = (1 - confidence) / max(1, challengers) / 2
    return float(1 - tail ** (1 / prompts))


class PromotionPolicy(Frozen):
    """How a checkpoint earns an alias. The gate plan's prompts, seeds and metrics are frozen here."""

    kind: Literal["promotion_policy"] = "promotion_policy"
    name: str
    line: str | None = Field(
        default=None,
        pattern=LINE_PATTERN,
        exclude_if=lambda v: v is None,
        description="the model line (VOICE/BACKEND, e.g. joe/tiny) whose aliases this policy moves; a run of another "
        "voice or backend is refused. Unset: the line of the run being promoted",
    )
    alias: str = Field(default="champion", pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    candidate_alias: str = Field(default="candidate", pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    best_k: int = Field(default=2, ge=1)
    include_last: bool = True
    baseline_speaker: str = Field(description="speaker the base model uses when there is no champion yet")
    gate_plan: GatePlan
    rules: tuple[GateRule, ...] = Field(min_length=1)
    tie_break: Literal["lowest_cv_loss"] = "lowest_cv_loss"

    @model_validator(mode="after")
    def _check(self) -> PromotionPolicy:
        backend = self.line.rsplit("/", 1)[1] if self.line else None
        if backend is not None and backend not in get_args(BackendName):
            raise ValueError(
                f"line {self.line!r} names backend {backend!r}, which is not one of {', '.join(get_args(BackendName))}; "
                "write the line as VOICE/BACKEND"
            )
        paired = [f"{r.statistic}({r.metric})" for r in self.rules if r.statistic != "challenger_mean"]
        need, have = self.gate_plan.statistics.min_units(), len(self.gate_plan.prompts)
        if paired and have < need:
            raise ValueError(
                f"gate plan {self.gate_plan.name!r} has {have} prompt(s), but rules {paired} compare challenger and incumbent, and "
                f"{self.gate_plan.statistics.interval}/{self.gate_plan.statistics.test} need at least {need} prompts "
                "(the prompt is the independent unit; seeds do not count): add prompts to gate_plan"
            )
        challengers = self.best_k + (1 if self.include_last else 0)
        floor = new_failure_floor(have, self.gate_plan.statistics.confidence, challengers)
        for r in self.rules:
            if r.statistic == "new_failure_rate_high" and r.threshold < floor:
                tail = (1 - self.gate_plan.statistics.confidence) / challengers / 2
                enough: int | str = math.ceil(math.log(tail) / math.log(1 - r.threshold)) if 0 < r.threshold < 1 else "more"
                raise ValueError(
                    f"rule new_failure_rate_high({r.metric}) <= {r.threshold:g} can never pass: with {have} gate prompts and "
                    f"{challengers} challenger(s) the upper end for no newly failed prompt is {floor:.3f}, so a challenger that "
                    f"newly fails fewer than {100 * floor:.1f}% of prompts cannot be told from one that fails none; raise the "
                    f"margin to at least {floor:.3f} or give the gate {enough} prompts"
                )
        return self


class RuleValue(Frozen):
    """One rule evaluated for one challenger."""

    metric: str
    statistic: Statistic
    op: Literal["<=", ">="]
    threshold: float
    value: float | None
    passed: bool
    detail: str


class ChallengerDecision(Frozen):
    """A checkpoint considered for promotion and how each gate judged it."""

    name: str
    checkpoint_receipt: Sha256
    tree_sha256: Sha256
    epoch: int
    cv_loss: float
    rules: tuple[RuleValue, ...]
    passed: bool


class AliasMove(Frozen):
    """An alias pointed at a new target by this receipt (the only way aliases move)."""

    alias: str
    target_sha256: Sha256
    previous_sha256: Sha256 | None
    base_sha256: Sha256 | None
    reason: str


class PromotionParameters(Frozen):
    """What was decided from what."""

    policy_sha256: Sha256
    training_run: Sha256
    evaluation: Sha256
    incumbent: str
    incumbent_sha256: Sha256
    serving_base_sha256: Sha256 | None
    line: str | None = Field(
        default=None, exclude_if=lambda v: v is None, description="the model line whose aliases moved (unset: written before lines)"
    )


class PromotionResult(Frozen):
    """Every challenger's rule values, the decision, and the alias moves.

    ``error_control`` says how the round's false-pass rate is held across its challengers;
    ``power_warning`` flags a policy with under 50% power at its own margin (``plan power``).
    """

    challengers: tuple[ChallengerDecision, ...]
    promoted: str | None
    moves: tuple[AliasMove, ...]
    error_control: str | None = None
    power_warning: str | None = None


class PromotionReceipt(ReceiptBase):
    """A promotion decision; status ``failed`` when no challenger passed every gate."""

    kind: Literal["promotion"] = "promotion"
    parameters: PromotionParameters
    result: PromotionResult
