"""Stage ``import_base``: bring a backend's shipped base into a home, verified, with a receipt.

Import checks every byte of the bundle against its manifest and the receipts against each other
(`shipped_base.verify_bundle`) before anything is stored; the tree then lands in the store and a
``base_import`` receipt names it, with the shipped receipts as its inputs (stored as blobs, not
as this home's receipts: their own inputs, the demo corpus, are not in this home).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.canonical import canonical_bytes
from voxledger.schemas.shipped import BaseImportParameters, BaseImportReceipt
from voxledger.schemas.training import BackendName
from voxledger.stores.home import Home
from voxledger.stores.trees import TREE_MEDIA_TYPE, put_tree
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.shipped_base import PLAN_FILE, RECEIPT_FILES, bundle_digest, bundle_folder, read_bundle, verify_bundle
from voxledger.tasks.stage import StageOutcome, record, reuse
from voxledger.tasks.stages.contract import never_stops

if TYPE_CHECKING:
    from voxledger.schemas.reproduction import OutputComparison, ReproductionBands
    from voxledger.tasks.stages.contract import StageContext
    from voxledger.tasks.stages.reproduce import Preparation


def import_shipped_base(home: Home, backend: BackendName, *, flow: str) -> StageOutcome[BaseImportReceipt]:
    """Verify ``backend``'s shipped base and store it with a ``base_import`` receipt (served from cache when done before)."""
    folder = bundle_folder(backend)
    bundle = read_bundle(folder)
    digest = bundle_digest(bundle)
    key = cache_key("import_base", {"bundle": digest}, None, {"backend": backend})
    done = reuse(home, key, BaseImportReceipt)
    if done is not None:
        return done
    started = utc_now()
    verified = verify_bundle(folder, bundle)
    tree, _ = put_tree(home.blobs, folder / "tree", cache=home.stat_cache)
    inputs = [InputRef(role=role, sha256=home.blobs.put_file(folder / name), ref="artifact") for name, role in RECEIPT_FILES.items()]
    inputs.append(InputRef(role="training_plan", sha256=home.blobs.put_file(folder / PLAN_FILE), ref="artifact"))
    inputs.append(InputRef(role="bundle", sha256=home.blobs.put_bytes(canonical_bytes(bundle)), ref="artifact"))
    params = BaseImportParameters(
        backend=backend,
        name=bundle.name,
        bundle_sha256=digest,
        training_run=bundle.training_run,
        training_plan_sha256=bundle.training_plan_sha256,
        code_commit=bundle.code_commit,
        platform=bundle.platform,
        precision_effective=bundle.precision_effective,
        verified=verified,
    )
    receipt = build_receipt(
        BaseImportReceipt,
        flow=flow,
        task="import_base",
        started_at=started,
        subjects=[artifact(home.blobs, "base", tree, TREE_MEDIA_TYPE)],
        inputs=inputs,
        key=key,
        parameters=params,
    )
    return record(home, receipt)


# The stage contract (tasks/stages/contract.py).
run = import_shipped_base
verdict = never_stops


def inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the backend whose shipped base the pipeline plan adapts."""
    return {"backend": ctx.plan.shipped_base}


def rerun_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``base`` flow's arguments: the backend whose shipped base was imported (its bundle is checked again)."""
    return {"backend": cast(BaseImportReceipt, prep.receipt).parameters.backend}


def compare(h: Home, s: Home, original: BaseImportReceipt, rerun: BaseImportReceipt, bands: ReproductionBands) -> list[OutputComparison]:
    """The imported tree and the bundle it came from, which must be the same bytes."""
    from voxledger.tasks.reproduction.compare import compare_outputs

    return compare_outputs(original, rerun)


def summary(receipt: BaseImportReceipt) -> str:
    """Which shipped base, by tree digest."""
    p = receipt.parameters
    return f"{p.backend} base {p.name}, tree {receipt.subject('base').sha256[:16]}"
