"""Compare two runtimes' dump folders and record an equivalence receipt."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.canonical import is_sha256_hex
from voxledger.schemas.equivalence import EquivalenceParameters, EquivalencePlan, RuntimeDescriptor
from voxledger.schemas.equivalence_receipt import EquivalenceReceipt
from voxledger.schemas.errors import BlobMissingError, EquivalenceError, TrainingError
from voxledger.schemas.training import BackendName
from voxledger.stores.home import Home
from voxledger.stores.queries import backends_of_checkpoint
from voxledger.stores.trees import materialize_tree, put_tree
from voxledger.tasks.backends.base import get_backend
from voxledger.tasks.equivalence.compare import compare_dirs
from voxledger.tasks.plans import register_plan
from voxledger.tasks.receipting import build_receipt, cache_key
from voxledger.tasks.stage import StageOutcome, record
from voxledger.tasks.stages.contract import never_stops, not_in_pipeline

if TYPE_CHECKING:
    from voxledger.schemas.reproduction import OutputComparison, ReproductionBands
    from voxledger.tasks.stages.reproduce import Preparation


def _as_dir(home: Home, ref: str, scratch: Path, name: str) -> tuple[Path, str]:
    """A dump folder on disk plus its tree digest; ``ref`` is a folder or a stored tree digest."""
    if is_sha256_hex(ref) and not Path(ref).exists():
        dest = scratch / name
        materialize_tree(home.blobs, ref, dest)
        return dest, ref
    digest, _ = put_tree(home.blobs, Path(ref), cache=home.stat_cache)
    return Path(ref), digest


def record_equivalence(
    home: Home,
    reference: str,
    candidate: str,
    plan: EquivalencePlan,
    *,
    plan_name: str,
    ref_runtime: RuntimeDescriptor,
    cand_runtime: RuntimeDescriptor,
    flow: str = "equivalence",
    parents: tuple[InputRef, ...] = (),
) -> StageOutcome[EquivalenceReceipt]:
    """Compare stage dumps (folders or stored trees) and record the result whatever its band."""
    started = utc_now()
    plan_rid, plan_sha = register_plan(home, plan, source_name=plan_name, flow=flow)
    with tempfile.TemporaryDirectory() as tmp:
        ref_dir, ref_sha = _as_dir(home, reference, Path(tmp), "ref")
        cand_dir, cand_sha = _as_dir(home, candidate, Path(tmp), "cand")
        report = compare_dirs(ref_dir, cand_dir, plan)
    params = EquivalenceParameters(
        plan_sha256=plan_sha, reference=ref_runtime, candidate=cand_runtime, reference_tree_sha256=ref_sha, candidate_tree_sha256=cand_sha
    )
    key = cache_key("equivalence", {"reference": ref_sha, "candidate": cand_sha}, plan_sha, params.model_dump(mode="json"))
    error = None
    if not report.passed:
        off_green = ", ".join(f"{s.stage}={s.band}" for s in report.stages if s.band != "GREEN")
        error = f"overall band {report.band}: {off_green}"
    receipt = build_receipt(
        EquivalenceReceipt,
        flow=flow,
        task="compare_runtimes",
        started_at=started,
        key=key,
        subjects=[],
        status="succeeded" if report.passed else "failed",
        error=error,
        inputs=[
            InputRef(role="plan", sha256=plan_rid, ref="receipt"),
            InputRef(role="reference_dumps", sha256=ref_sha, ref="artifact"),
            InputRef(role="candidate_dumps", sha256=cand_sha, ref="artifact"),
            *parents,
        ],
        parameters=params,
        report=report,
    )
    return record(home, receipt)


def backend_of_checkpoint(home: Home, tree_sha256: str, role: str) -> BackendName:
    """The backend of the training run that checkpointed a tree; EquivalenceError when no recorded run did."""
    found = backends_of_checkpoint(home.catalog, tree_sha256)
    if not found:
        raise EquivalenceError(
            f"{role} {tree_sha256}: no training run recorded in this home checkpointed this tree, so its backend is "
            "unknown; give a training run's checkpoint tree (`voxledger lineage` lists them)"
        )
    if len(found) > 1:
        raise EquivalenceError(f"{role} {tree_sha256} is a checkpoint of runs on backends {found}; one tree belongs to one backend")
    return cast(BackendName, found[0])


def attribute_adapter(
    home: Home,
    base: str | None,
    adapter: str,
    plan: EquivalencePlan,
    *,
    plan_name: str,
    ref_runtime: str,
    cand_runtime: str,
    text: str,
    speaker: str | None,
    seed: int,
    flow: str = "equivalence",
) -> StageOutcome[EquivalenceReceipt]:
    """Feed one runtime's stage outputs forward through another and record the comparison.

    BASE and ADAPTER are stored tree digests; the backend is the one of the training run that
    checkpointed ADAPTER. Raises EquivalenceError naming a digest that is not in the home, a tree
    no recorded run checkpointed, or a tree that holds no LoRA adapter; BackendCapabilityError
    when the backend has no stage split.
    """
    from voxledger.tasks.equivalence.attribution import attribute_runtimes
    from voxledger.tasks.threads import torch_threads

    with tempfile.TemporaryDirectory() as tmp, torch_threads(1):
        work = Path(tmp)
        for role, digest in (("BASE", base), ("ADAPTER", adapter)):
            if digest is None:
                continue
            try:
                materialize_tree(home.blobs, digest, work / role.lower())  # every file verified against its digest
            except BlobMissingError as exc:
                raise EquivalenceError(
                    f"{role} {digest}: {exc}; give a tree digest stored in this home (a training run's "
                    f"'best' or 'last' output, see `voxledger lineage`), or pass --home"
                ) from exc
        name = backend_of_checkpoint(home, adapter, "ADAPTER")
        backend = get_backend(name)
        backend.synthesis_stages()  # refuse a backend without a stage split before loading any model
        if base is None and backend.needs_stored_base:
            raise EquivalenceError(f"backend {name} adapters run on a stored base: give BASE (the base tree digest), not '-'")
        base_dir = work / "base" if base is not None else None
        try:
            voice = backend.adapter_speaker(work / "adapter")
        except TrainingError as exc:
            raise EquivalenceError(f"tree {adapter}: {exc}; give a LoRA checkpoint of the {name} backend") from exc
        spk = speaker or voice
        ref = backend.load_for_inference(base_dir, work / "adapter", ref_runtime)
        cand = backend.load_for_inference(base_dir, work / "adapter", cand_runtime)
        attribute_runtimes(name, ref, cand, text, spk, seed, dump_dir=work / "dumps")
        return record_equivalence(
            home,
            str(work / "dumps" / "ref"),
            str(work / "dumps" / "cand"),
            plan,
            plan_name=plan_name,
            ref_runtime=RuntimeDescriptor(name=ref_runtime),
            cand_runtime=RuntimeDescriptor(name=f"{cand_runtime}-fed-forward"),
            flow=flow,
        )


# The stage contract (tasks/stages/contract.py): run on its own, never by the pipeline.
run = record_equivalence
verdict = never_stops
inputs = not_in_pipeline


def rerun_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``equivalence`` flow's compare arguments: the recorded dump trees, runtimes and plan (by reference, under its file name)."""
    import json

    from voxledger.schemas.core import PlanReceipt
    from voxledger.tasks.plans import PlanRef

    r = cast(EquivalenceReceipt, prep.receipt)
    plan_receipt = home.receipts.read(r.input("plan").sha256, PlanReceipt)
    document = json.loads(home.blobs.get_bytes(plan_receipt.parameters.plan_sha256))
    name = Path(plan_receipt.parameters.source_name).name
    plan = PlanRef.of(EquivalencePlan.model_validate(document), name)  # the stored plan still validates
    p = r.parameters
    return {
        "how": "compare",
        "reference": p.reference_tree_sha256,
        "candidate": p.candidate_tree_sha256,
        "plan_file": plan,
        "ref_runtime": p.reference.model_dump(mode="json"),
        "cand_runtime": p.candidate.model_dump(mode="json"),
    }


def compare(h: Home, s: Home, original: EquivalenceReceipt, rerun: EquivalenceReceipt, bands: ReproductionBands) -> list[OutputComparison]:
    """Each stage's verdict and error figures, which a re-run on the same dumps must equal."""
    from voxledger.tasks.reproduction.packaging import compare_equivalence

    return compare_equivalence(original, rerun)


def summary(receipt: EquivalenceReceipt) -> str:
    """The overall band of the comparison, and the two runtimes."""
    p = receipt.parameters
    return f"{receipt.report.band}: {p.reference.name} ({p.reference.dtype}) vs {p.candidate.name} ({p.candidate.dtype})"
