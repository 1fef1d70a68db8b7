"""A pipeline run reproduced stage by stage: which stage receipts are re-run, and the run's verdict.

Each stage receipt the run chains is reproduced on its own (``voxledger reproduce`` of that
receipt: its own scratch home, seeded with what the original home held when that stage started),
so every stage is re-run from the original's inputs and a difference is blamed on the stage that
made it, never passed downstream. The pipeline's verdict is the worst of its stages' verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxledger.schemas.pipeline import PipelineRunReceipt
from voxledger.schemas.reproduction import REPRODUCIBLE_KINDS, OutputComparison, ReproductionReceipt
from voxledger.schemas.stages import PIPELINE_RECEIPT, STAGE_ROWS
from voxledger.stores.home import Home

NOT_RERUN: dict[str, str] = {r.receipt: r.not_rerun for r in STAGE_ROWS if r.not_rerun is not None}
"""Why a stage receipt of this kind is not re-run, as its stage row says (any other kind outside REPRODUCIBLE_KINDS: not covered yet)."""


@dataclass(frozen=True)
class StagePlan:
    """The stage receipts of a pipeline run to re-run, in run order, and those left out with why."""

    rerun: tuple[tuple[str, str], ...]
    not_rerun: tuple[str, ...]


def plan_stages(home: Home, receipt: PipelineRunReceipt) -> StagePlan:
    """(stage, receipt id) for every recorded stage receipt of a kind ``reproduce`` covers; the others named with why."""
    rerun: list[tuple[str, str]] = []
    skipped: list[str] = []
    for s in receipt.stages:
        if s.receipt_id is None:
            if s.status != "skipped":
                skipped.append(f"{s.stage}: no receipt recorded ({s.status})")
            continue
        kind = home.receipts.read(s.receipt_id).kind  # type: ignore[attr-defined]
        if kind == PIPELINE_RECEIPT or kind not in REPRODUCIBLE_KINDS:
            skipped.append(f"{s.stage}: {NOT_RERUN.get(kind, f'{kind} receipts are not re-run by `voxledger reproduce`')}")
        else:
            rerun.append((s.stage, s.receipt_id))
    return StagePlan(tuple(rerun), tuple(skipped))


def stage_comparison(stage: str, original: str, reproduction_id: str, reproduction: ReproductionReceipt) -> OutputComparison:
    """One stage of the run: the verdict its own reproduction recorded, and where to read the detail."""
    r = reproduction.result
    worst = [c.name for c in r.comparisons if c.verdict == r.verdict and r.verdict != "exact"]
    detail = f" ({', '.join(worst[:4])})" if worst else ""
    return OutputComparison(
        name=f"stage:{stage}",
        original_sha256=original,
        rerun_sha256=reproduction.parameters.rerun,
        verdict=r.verdict,
        reason=f"reproduction {reproduction_id[:12]}: {r.verdict}{detail}; {r.reason}",
    )
