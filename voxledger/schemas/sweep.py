"""Sweeps: a training plan varied along named axes, each member trained as an ordinary run, all judged by one gate.

A sweep plan names a training plan file and a promotion policy file (beside it, like a pipeline
plan) and says what varies: a ``grid`` (every combination of the listed values, members ``m0``,
``m1``, ... in a fixed order) or a list of named ``variants``. ``sweep_members`` derives each
member's ``TrainingPlan`` from the training plan as a pure function, so a member's plan (and so its
digest and its training run's cache key) depends only on the two plans, never on when or where
the sweep ran. ``workers`` and ``threads_per_member`` say how members share a machine: at most
``workers`` train at once, each in its own process with that many torch threads, on this machine or,
with ``work_pool``, as flow runs on that Prefect work pool's workers (``flows/sweep_pool.py``).
"""

from __future__ import annotations

import itertools
from typing import Any, Literal

from pydantic import Field, model_validator

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256
from voxledger.schemas.training import TrainingPlan

MemberName = str
MEMBER_PATTERN = r"^[a-z][a-z0-9_]{0,23}$"
"""A member's name: short enough that ``<member>-epoch<N>`` is a gate candidate name (40 characters)."""


class SweepSettings(Frozen):
    """One member's values along the axes; a value left unset keeps the training plan's."""

    peak_lr: float | None = Field(default=None, gt=0, description="optim.peak_lr")
    lora_r: int | None = Field(default=None, ge=1, le=256, description="lora.r")
    lora_alpha: float | None = Field(default=None, gt=0, description="lora.alpha")
    max_epochs: int | None = Field(default=None, ge=1, description="max_epochs (the step budget, with steps_per_epoch)")
    steps_per_epoch: int | None = Field(default=None, ge=1, description="steps_per_epoch")
    seed: int | None = Field(default=None, description="seed")


class SweepVariant(SweepSettings):
    """A named member."""

    name: MemberName = Field(pattern=MEMBER_PATTERN)


class SweepGrid(Frozen):
    """Every combination of the listed values (an axis left empty keeps the training plan's value)."""

    peak_lr: tuple[float, ...] = ()
    lora_r: tuple[int, ...] = ()
    lora_alpha: tuple[float, ...] = ()
    max_epochs: tuple[int, ...] = ()
    steps_per_epoch: tuple[int, ...] = ()
    seed: tuple[int, ...] = ()


class SweepPlan(Frozen):
    """A training plan varied along axes, and the policy that judges every member in one decision."""

    kind: Literal["sweep_plan"] = "sweep_plan"
    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    training: str = Field(min_length=1, description="the training plan file varied (beside this plan)")
    policy: str = Field(min_length=1, description="the promotion policy file judging every member's challengers (beside this plan)")
    grid: SweepGrid | None = None
    variants: tuple[SweepVariant, ...] = ()
    workers: int = Field(default=2, ge=1, le=64, description="members trained at once, each in its own process")
    threads_per_member: int = Field(default=1, ge=1, description="torch threads of each member (its plan's `threads`)")
    max_members: int = Field(default=32, ge=1, le=256, description="a grid larger than this is refused (a typo must not train 1,000 runs)")
    work_pool: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="train members as flow runs on this Prefect work pool over the shared S3 store (at most `workers` at once: the "
        "pool's device slots); unset: a local process pool. Left out of the plan's JSON when unset",
    )

    @model_validator(mode="after")
    def _one_form(self) -> SweepPlan:
        if (self.grid is None) == (not self.variants):
            raise ValueError("give exactly one of `grid` (every combination of axis values) and `variants` (named members)")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"variants: names must be unique, got {names}")
        n = len(member_settings(self))
        if n > self.max_members:
            raise ValueError(f"the sweep has {n} members, more than max_members {self.max_members}: trim an axis or raise max_members")
        if n < 2:
            raise ValueError(f"a sweep needs at least 2 members, this one has {n}: add axis values or variants")
        return self


def member_settings(plan: SweepPlan) -> tuple[SweepVariant, ...]:
    """The members in their fixed order: the variants as given, or the grid's combinations named m0, m1, ..."""
    if plan.grid is None:
        return plan.variants
    axes = {k: v for k, v in plan.grid.model_dump().items() if v}
    combos = itertools.product(*axes.values())
    return tuple(SweepVariant(name=f"m{i}", **dict(zip(axes, c, strict=True))) for i, c in enumerate(combos))


def member_plan(sweep: SweepPlan, training: TrainingPlan, member: SweepVariant) -> TrainingPlan:
    """The member's training plan: the training plan with the member's values, named ``<sweep>-<member>``.

    Raises ValueError when the member sets a LoRA value on a plan without a ``lora`` section.
    """
    doc: dict[str, Any] = training.model_dump(mode="json")
    doc["name"] = f"{sweep.name}-{member.name}"
    doc["threads"] = sweep.threads_per_member
    for field in ("max_epochs", "steps_per_epoch", "seed"):
        if getattr(member, field) is not None:
            doc[field] = getattr(member, field)
    if member.peak_lr is not None:
        doc["optim"] = {**doc["optim"], "peak_lr": member.peak_lr}
    if member.lora_r is not None or member.lora_alpha is not None:
        if doc.get("lora") is None:
            raise ValueError(f"member {member.name} sets lora_r/lora_alpha but training plan {training.name} has no `lora` section")
        lora = dict(doc["lora"])
        lora["r"] = member.lora_r if member.lora_r is not None else lora["r"]
        lora["alpha"] = member.lora_alpha if member.lora_alpha is not None else lora["alpha"]
        doc["lora"] = lora
    return TrainingPlan.model_validate(doc)


def sweep_members(sweep: SweepPlan, training: TrainingPlan) -> tuple[tuple[SweepVariant, TrainingPlan], ...]:
    """Every member with its derived training plan, in the sweep's fixed order."""
    return tuple((m, member_plan(sweep, training, m)) for m in member_settings(sweep))


class SweepMember(Frozen):
    """One member: its values, its plan and the training run it made (or was served from cache)."""

    name: MemberName
    settings: SweepSettings
    plan_sha256: Sha256
    training_run: Sha256
    best_epoch: int
    best_cv_loss: float
    challengers: int = Field(ge=0, description="its checkpoints the gate judged (best-k + last)")


class SweepFamily(Frozen):
    """What the one gate decision controls its error over."""

    members: int
    challengers: int = Field(description="checkpoints judged, over every member")
    rules: int = Field(description="rules each challenger must pass (all of them: intersection-union, no adjustment over rules)")
    method: str = Field(description="the multiplicity adjustment over the challengers")
    per_challenger_confidence: float
    familywise_one_sided: float = Field(description="the bound on P(any false pass) of the sweep, one-sided rules")


class SweepParameters(Frozen):
    """The plans the sweep ran under and what it trained from."""

    sweep_plan_sha256: Sha256
    training_plan_sha256: Sha256
    policy_sha256: Sha256
    audit_receipt: Sha256
    base_sha256: Sha256 | None
    workers: int
    threads_per_member: int
    work_pool: str | None = Field(default=None, description="the Prefect work pool the members ran on (None: a local process pool)")


class SweepResult(Frozen):
    """Every member, the family, and the one decision (a promotion receipt)."""

    members: tuple[SweepMember, ...]
    family: SweepFamily
    promotion: Sha256
    promoted_member: MemberName | None
    promoted: str | None = Field(description="the promoted challenger (`<member>-epoch<N>`), None when none passed")
    members_trained: int = Field(description="members trained by this run (the others were served from cache)")


class SweepReceipt(ReceiptBase):
    """A sweep: every member's training run and the one promotion decision that judged them together."""

    kind: Literal["sweep"] = "sweep"
    parameters: SweepParameters
    result: SweepResult


class EpochLoss(Frozen):
    """One epoch of a member's curve."""

    epoch: int
    train_loss: float
    cv_loss: float


class GateValue(Frozen):
    """One rule as judged for one challenger, with the interval the rule read (None when not estimable)."""

    challenger: str
    epoch: int
    cv_loss: float
    metric: str
    statistic: str
    op: str
    threshold: float
    value: float | None
    low: float | None
    high: float | None
    passed: bool


class MemberReport(Frozen):
    """A member in a sweep report: its values, its CV curve and its challengers' gate values."""

    name: MemberName
    settings: SweepSettings
    training_run: Sha256
    best_epoch: int
    best_cv_loss: float
    curve: tuple[EpochLoss, ...]
    gate: tuple[GateValue, ...]
    won: bool


class SweepReport(Frozen):
    """What ``voxledger sweep report`` shows: the grid, every member, the decision and why (read from receipts)."""

    sweep: Sha256
    name: str
    axes: tuple[str, ...] = Field(description="the settings that vary between members")
    members: tuple[MemberReport, ...]
    family: SweepFamily
    incumbent: str
    promotion: Sha256
    promoted: str | None
    promoted_member: MemberName | None
    why: str
