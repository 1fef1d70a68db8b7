"""The pipeline plan (which frozen plans each stage runs) and the pipeline-run receipt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256
from voxledger.schemas.training import BackendName

StageName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
"""A stage's name. The stages themselves are listed once, in the stage table (``schemas/stages.py``):
the pipeline and ``voxledger deploy`` refuse a name the table does not hold."""


class PipelinePlan(Frozen):
    """Stage plans by file name (resolved inside the plans folder); each is registered by digest.

    The shipped stages' plan fields are declared here; a stage added to the stage table brings its
    own (its row's ``plan_field``), accepted as a further key naming a plan file. Any other key is
    refused, naming the fields the table knows.
    """

    model_config = ConfigDict(frozen=True, extra="allow")

    kind: Literal["pipeline_plan"] = "pipeline_plan"
    name: str
    audit_policy: str
    base_training: str | None = None
    shipped_base: BackendName | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="adapt the base that ships with this backend (stage import_base) instead of training one; "
        "left out of the plan's JSON when unset, so older plans keep their digests",
    )
    adapter_training: str
    promotion_policy: str
    evaluation: str
    listening_protocol: str | None = None
    package: bool = True
    schedule_cron: str | None = Field(default=None, description="cron expression for `voxledger serve` and `voxledger deploy`")
    # Where stages run (`voxledger deploy`). Left out of the plan's JSON when unset, so plans written
    # before these fields existed keep their digests.
    work_pool: str | None = Field(
        default=None, exclude_if=lambda v: v is None, description="Prefect work pool of the pipeline and of every stage not in stage_pools"
    )
    stage_pools: dict[StageName, str] = Field(
        default_factory=dict, exclude_if=lambda v: not v, description="Prefect work pool per stage, overriding work_pool"
    )

    @model_validator(mode="after")
    def _only_stage_plan_fields(self) -> PipelinePlan:
        from voxledger.schemas.stages import STAGE_ROWS

        brought = {r.plan_field for r in STAGE_ROWS if r.plan_field and r.plan_field not in type(self).model_fields}
        problems = []
        for key, value in (self.model_extra or {}).items():
            if key not in brought:
                known = sorted({*type(self).model_fields, *brought} - {"kind"})
                problems.append(f"{key}: not a field of a pipeline plan (the stage table's plan fields and the others: {', '.join(known)})")
            elif value is not None and not (isinstance(value, str) and value):
                problems.append(f"{key}: the plan file of a stage, a file name; got {value!r}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def pool_of(self, stage: StageName | Literal["pipeline"]) -> str:
        """The work pool a stage (or the pipeline itself) is deployed to; ``default`` when the plan names none."""
        return (self.stage_pools.get(stage) if stage != "pipeline" else None) or self.work_pool or "default"


class StageRecord(Frozen):
    """One stage of one pipeline run."""

    stage: StageName
    receipt_id: Sha256 | None
    cached: bool
    wall_s: float
    status: Literal["succeeded", "failed", "skipped"]
    detail: str = ""
    verified_objects: int | None = Field(
        default=None,
        ge=0,
        exclude_if=lambda v: v is None,
        description="on a cache hit in this process: stored objects checked intact before reuse (receipt, outputs and inputs, trees whole)",
    )


@dataclass(frozen=True)
class PipelineSummary:
    """What the pipeline flow returns: the pipeline receipt id and every stage's record. It lives
    here, beside `StageRecord`, because a command served by the home's runner unpickles it: defined
    in the flow's module, that would import the whole stage stack (torch, Prefect) into the command."""

    pipeline_receipt: str
    stages: tuple[StageRecord, ...]


class PipelineParameters(Frozen):
    """Which corpus and plans the run used."""

    plan_sha256: Sha256
    corpus_name: str
    stage_plans: dict[str, Sha256]


class PipelineRunReceipt(ReceiptBase):
    """A pipeline run: every stage's receipt, whether it came from cache, and where it stopped."""

    kind: Literal["pipeline_run"] = "pipeline_run"
    parameters: PipelineParameters
    stages: tuple[StageRecord, ...]
