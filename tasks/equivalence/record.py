"""Compare two runtimes' dump folders and record an equivalence receipt."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.canonical import is_sha256_hex
from voxledger.schemas.equivalence import EquivalenceParameters, EquivalencePlan, RuntimeDescriptor
from voxledger.schemas.equivalence_receipt import EquivalenceReceipt
from voxledger.stores.home import Home
from voxledger.stores.trees import materialize_tree, put_tree
from voxledger.tasks.equivalence.compare import compare_dirs
from voxledger.tasks.plans import register_plan
from voxledger.tasks.receipting import build_receipt, cache_key


@dataclass(frozen=True)
class EquivalenceOutcome:
    """The receipt id and receipt of one comparison."""

    receipt_id: str
    receipt: EquivalenceReceipt


def _as_dir(home: Home, ref: str, scratch: Path, name: str) -> tuple[Path, str]:
    """A dump folder on disk plus its tree digest; ``ref`` is a folder or a stored tree digest."""
    if is_sha256_hex(ref) and not Path(ref).exists():
        dest = scratch / name
        materialize_tree(home.blobs, ref, dest)
        return dest, ref
    digest, _ = put_tree(home.blobs, Path(ref), cache=home.stat_cache)
    return Path(ref), digest


def record_equivalence(
    home: Home, reference: str, candidate: str, plan: EquivalencePlan, *,
    plan_name: str, ref_runtime: RuntimeDescriptor, cand_runtime: RuntimeDescriptor,
    flow: str = "equivalence", parents: tuple[InputRef, ...] = (),
) -> EquivalenceOutcome:  # fmt: skip
    """Compare stage dumps (folders or stored trees) and record the result whatever its band."""
    started = utc_now()
    plan_rid, plan_sha = register_plan(home, plan, source_name=plan_name, flow=flow)
    with tempfile.TemporaryDirectory() as tmp:
        ref_dir, ref_sha = _as_dir(home, reference, Path(tmp), "ref")
        cand_dir, cand_sha = _as_dir(home, candidate, Path(tmp), "cand")
        report = compare_dirs(ref_dir, cand_dir, plan)
    params = EquivalenceParameters(plan_sha256=plan_sha, reference=ref_runtime, candidate=cand_runtime,
                                   reference_tree_sha256=ref_sha, candidate_tree_sha256=cand_sha)  # fmt: skip
    key = cache_key("equivalence", {"reference": ref_sha, "candidate": cand_sha}, plan_sha, params.model_dump(mode="json"))
    receipt = build_receipt(
        EquivalenceReceipt, flow=flow, task="compare_runtimes", started_at=started, key=key,
        subjects=[], status="succeeded" if report.passed else "failed",
        error=None if report.passed else f"overall band {report.band}: " + ", ".join(f"{s.stage}={s.band}" for s in report.stages if s.band != "GREEN"),
        inputs=[InputRef(role="plan", sha256=plan_rid, ref="receipt"),
                InputRef(role="reference_dumps", sha256=ref_sha, ref="artifact"),
                InputRef(role="candidate_dumps", sha256=cand_sha, ref="artifact"), *parents],
        parameters=params, report=report,
    )  # fmt: skip
    return EquivalenceOutcome(home.record(receipt), receipt)
