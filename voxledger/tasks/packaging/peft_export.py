"""``package export --format peft``: a package written out as a folder PEFT loads as it is.

The folder holds ``adapter_config.json`` (PEFT's LoraConfig, ``base_model_name_or_path`` naming
the base by its tree digest), ``adapter_model.safetensors`` (the package's adapter tensors) and
``README.md`` (a model card built from the package's receipts, `model_card`). Every byte is a
function of the package's members, so the same package gives the same folder digest. The folder
is stored as a tree and recorded as an ``adapter_export`` receipt naming the package and the
receipts the card quotes; the destination is written whole or not at all, and never over
anything.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from voxledger.schemas.adapter_export import (
    AdapterExportParameters,
    AdapterExportReceipt,
    AdapterExportResult,
    ExportedFile,
)
from voxledger.schemas.audit import AuditReceipt
from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.errors import BackendCapabilityError, ReceiptError, UnsafePathError
from voxledger.schemas.evaluation import EvaluationReceipt
from voxledger.schemas.promotion import PromotionReceipt
from voxledger.schemas.training import TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.stores.trees import TREE_MEDIA_TYPE, materialize_tree, put_tree
from voxledger.tasks.backends.base import get_backend
from voxledger.tasks.packaging.archive import Verified, verify_package
from voxledger.tasks.packaging.assemble import ADAPTER_DIR
from voxledger.tasks.packaging.model_card import BoundReceipts, ModelCardText, card_text
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import StageOutcome, record, reuse

CARD = "README.md"
PeftFiles = Callable[[dict[str, bytes], dict[str, Any], str], tuple[dict[str, bytes], str]]


def base_model_name(base_tree_sha256: str) -> str:
    """What ``base_model_name_or_path`` says: the base folder's voxledger tree digest."""
    return f"sha256:{base_tree_sha256}"


def bound_receipts(verified: Verified) -> BoundReceipts:
    """The typed receipts the package binds, read from its own members (already hashed against their ids)."""
    b = verified.manifest.binding

    def member(rid: str) -> bytes:
        return verified.contents[f"receipts/{rid}.json"]

    return BoundReceipts(
        training=TrainingRunReceipt.model_validate_json(member(b.training_run)),
        audit=AuditReceipt.model_validate_json(member(b.audit_receipt)),
        evaluations={rid: EvaluationReceipt.model_validate_json(member(rid)) for rid in b.evaluation_receipts},
        promotion=(b.promotion_receipt, PromotionReceipt.model_validate_json(member(b.promotion_receipt))) if b.promotion_receipt else None,
    )


def peft_folder(verified: Verified) -> tuple[dict[str, bytes], ModelCardText, str]:
    """(file name -> bytes, the card, base_model_name_or_path) of a verified package's PEFT export.

    Raises BackendCapabilityError when the package's backend has no PEFT export.
    """
    manifest = verified.manifest
    exporter = cast(PeftFiles | None, getattr(get_backend(manifest.backend), "peft_files", None))
    if exporter is None:
        raise BackendCapabilityError(
            f"backend {manifest.backend!r} has no PEFT export (no peft_files()); its packages are read by voxledger only"
        )
    bound = bound_receipts(verified)
    adapter = {name.split("/", 1)[1]: data for name, data in verified.contents.items() if name.startswith(f"{ADAPTER_DIR}/")}
    base = base_model_name(manifest.components.base_model_sha256)
    files, loading = exporter(adapter, bound.training.parameters.effective_config, base)
    card = card_text(manifest, bound, verified.sha256, base, loading)
    return {**files, CARD: card.text.encode()}, card, base


def check_destination(dest: Path) -> None:
    """Refuse a destination that exists (exports never write over anything) or whose parent is missing."""
    if dest.exists() or dest.is_symlink():
        raise UnsafePathError(f"{dest} exists; exports are never written over anything: name a new folder")
    if not dest.absolute().parent.is_dir():
        raise UnsafePathError(f"folder {dest.parent} does not exist; create it first (mkdir -p {dest.parent})")


def _write_new_folder(dest: Path, fill: Callable[[Path], None]) -> None:
    """Fill a fresh sibling folder, then rename it to ``dest``: a reader sees all of it or none."""
    check_destination(dest)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.absolute().parent))
    try:
        tmp.rmdir()
        fill(tmp)
        os.rename(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_files(files: dict[str, bytes]) -> Callable[[Path], None]:
    def fill(folder: Path) -> None:
        folder.mkdir()
        for name, data in sorted(files.items()):
            with open(folder / name, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())

    return fill


def export_peft_fn(home: Home, package_sha256: str, dest: Path, *, flow: str = "export_package") -> StageOutcome[AdapterExportReceipt]:
    """Write the PEFT export of a stored package to ``dest`` (must not exist); record or reuse its receipt.

    Raises: BlobMissingError (the package is not in the store), DigestMismatchError (it changed),
    BackendCapabilityError (no PEFT export for its backend), UnsafePathError (``dest`` exists).
    """
    started = utc_now()
    check_destination(dest)
    key = cache_key("adapter_export", {"package": package_sha256}, None, {"format": "peft"})
    hit = reuse(home, key, AdapterExportReceipt)
    if hit is not None:
        _write_new_folder(dest, lambda folder: materialize_tree(home.blobs, hit.receipt.result.tree_sha256, folder))
        return hit
    verified = verify_package(home.blobs.path_of(package_sha256))
    if verified.sha256 != package_sha256:
        raise ReceiptError(f"stored package {package_sha256} hashes to {verified.sha256}; restore it (`voxledger store pull`)")
    files, card, base = peft_folder(verified)
    with tempfile.TemporaryDirectory() as tmp:
        _write_files(files)(Path(tmp) / "export")
        tree_sha, _ = put_tree(home.blobs, Path(tmp) / "export")
    b = verified.manifest.binding
    read = [("training_run", b.training_run), ("audit", b.audit_receipt)]
    read += [(f"evaluation:{i}", rid) for i, rid in enumerate(b.evaluation_receipts)]
    read += [("promotion", b.promotion_receipt)] if b.promotion_receipt else []
    inputs = [InputRef(role="package", sha256=package_sha256, ref="artifact")]
    # a package brought from elsewhere carries receipts this home never recorded: named in the result, linked where present
    inputs += [InputRef(role=role, sha256=rid, ref="receipt") for role, rid in read if home.receipts.has(rid)]
    receipt = build_receipt(
        AdapterExportReceipt,
        flow=flow,
        task="export_adapter",
        started_at=started,
        key=key,
        subjects=[artifact(home.blobs, "export", tree_sha, TREE_MEDIA_TYPE)],
        inputs=inputs,
        parameters=AdapterExportParameters(package_sha256=package_sha256, format="peft"),
        result=AdapterExportResult(
            tree_sha256=tree_sha,
            files=tuple(ExportedFile(path=n, sha256=hashlib.sha256(d).hexdigest(), size_bytes=len(d)) for n, d in sorted(files.items())),
            base_model_name_or_path=base,
            read_receipts=tuple(sorted(rid for _, rid in read)),
            gate_verdict=card.gate_verdict,
            not_measured=card.not_measured,
        ),
    )
    outcome = record(home, receipt)  # the folder is written once its receipt is committed (a retry is served from cache)
    _write_new_folder(dest, _write_files(files))
    return outcome


def store_package(home: Home, path: Path) -> str:
    """Verify a package file and put it into the home's store (idempotent); return its digest."""
    sha = verify_package(path).sha256
    home.blobs.put_file(path, expected_sha256=sha)
    return sha
