"""Flow ``equivalence``: compare two runtimes' stage dumps, or attribute a gap to its stage."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, flow_name
from voxledger.schemas.equivalence import EquivalencePlan, RuntimeDescriptor
from voxledger.schemas.equivalence_receipt import EquivalenceReceipt
from voxledger.schemas.errors import PlanError
from voxledger.stores.home import HomeRef
from voxledger.tasks.equivalence.compare import load_equivalence_plan
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages.equivalence import attribute_adapter, record_equivalence


def _plan(plan_file: PlanRef | str) -> tuple[EquivalencePlan, str]:
    """The band plan and its file name, from a file or from a reference (a re-run of a recorded comparison)."""
    if isinstance(plan_file, PlanRef):
        return plan_file.validated(EquivalencePlan), plan_file.source_name
    return load_equivalence_plan(Path(plan_file)), Path(plan_file).name


@task(name="compare_runtimes", **STAGE_TASK)
def compare_runtimes(
    home: HomeRef,
    reference: str,
    candidate: str,
    plan_file: PlanRef | str,
    ref_runtime: dict[str, object],
    cand_runtime: dict[str, object],
) -> StageOutcome[EquivalenceReceipt]:
    """Compare dump folders (or stored trees) stage by stage under a band plan; recorded whatever the band."""
    plan, plan_name = _plan(plan_file)
    return record_equivalence(
        home.open(),
        reference,
        candidate,
        plan,
        plan_name=plan_name,
        ref_runtime=RuntimeDescriptor.model_validate(ref_runtime),
        cand_runtime=RuntimeDescriptor.model_validate(cand_runtime),
        flow=flow_name(),
    )


@task(name="attribute_stages", **STAGE_TASK)
def attribute_stages(
    home: HomeRef,
    base: str | None,
    adapter: str,
    plan_file: str,
    ref_runtime: str,
    cand_runtime: str,
    text: str,
    speaker: str | None,
    seed: int,
) -> StageOutcome[EquivalenceReceipt]:
    """Feed the reference runtime's intermediates through the candidate and record the comparison."""
    return attribute_adapter(
        home.open(),
        base,
        adapter,
        load_equivalence_plan(Path(plan_file)),
        plan_name=Path(plan_file).name,
        ref_runtime=ref_runtime,
        cand_runtime=cand_runtime,
        text=text,
        speaker=speaker,
        seed=seed,
        flow=flow_name(),
    )


@flow(name="equivalence")
def equivalence(
    home: HomeRef | str,
    how: Literal["compare", "attribute"],
    reference: str | None,
    candidate: str,
    plan_file: PlanRef | str,
    ref_runtime: dict[str, object],
    cand_runtime: dict[str, object],
    text: str = "",
    speaker: str | None = None,
    seed: int = 0,
) -> StageOutcome[EquivalenceReceipt]:
    """``compare``: REFERENCE and CANDIDATE are dump folders or trees; ``attribute``: a base tree (None for a
    backend whose base is its own configured model) and an adapter tree. ``plan_file`` is a band plan
    file, or (to compare) a plan reference."""
    if how == "compare":
        if reference is None:
            raise PlanError("equivalence compare needs a reference dump folder or tree; none was given")
        return compare_runtimes(HomeRef.of(home), reference, candidate, plan_file, ref_runtime, cand_runtime)
    if isinstance(plan_file, PlanRef):
        raise PlanError(f"equivalence attribute reads its band plan from a file; it was given plan {plan_file.source_name} by reference")
    return attribute_stages(
        HomeRef.of(home), reference, candidate, plan_file, str(ref_runtime["name"]), str(cand_runtime["name"]), text, speaker, seed
    )
