"""The pipeline plan (which frozen plans each stage runs) and the pipeline-run receipt."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256

StageName = Literal["audit", "train_base", "train_adapter", "promote", "package", "evaluate", "export_packets"]


class PipelinePlan(Frozen):
    """Stage plans by file name (resolved inside the plans folder); each is registered by digest."""

    kind: Literal["pipeline_plan"] = "pipeline_plan"
    name: str
    audit_policy: str
    base_training: str | None = None
    adapter_training: str
    promotion_policy: str
    evaluation: str
    listening_protocol: str | None = None
    package: bool = True
    schedule_cron: str | None = Field(default=None, description="cron expression for `voxledger serve`")


class StageRecord(Frozen):
    """One stage of one pipeline run."""

    stage: StageName
    receipt_id: Sha256 | None
    cached: bool
    wall_s: float
    status: Literal["succeeded", "failed", "skipped"]
    detail: str = ""


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
