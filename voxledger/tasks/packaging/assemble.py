"""Gather what a package binds, refuse anything inconsistent, and write the deterministic tar.

``assemble_package`` reads only the blob store (no catalog), so two processes, or two homes
holding the same receipts, produce byte-identical packages from the same request.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from voxledger.schemas.canonical import canonical_bytes
from voxledger.schemas.errors import BlobMissingError, ReceiptError, TrainingError
from voxledger.schemas.package import (
    MANIFEST_NAME,
    InferenceSettings,
    MemberRole,
    PackageBinding,
    PackageManifest,
    PackageMember,
)
from voxledger.schemas.promotion import model_line
from voxledger.schemas.training import BackendName
from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.identity import code_identity
from voxledger.stores.receipts import ReceiptStore
from voxledger.stores.trees import TreeManifest, load_manifest
from voxledger.tasks.backends.base import get_backend
from voxledger.tasks.packaging.archive import verify_package, write_package_tar

ADAPTER_DIR = "adapter"
# How a tensor key of an adapter may look; the deliverable files come from the backend
# (`Backend.deliverables`). Anything else (optimizer state, RNG, progress files) never reaches a package.
ADAPTER_KEY = re.compile(r"(\.lora_[AB]\.|\.lora_embedding_[AB]|trainable_tokens_delta$)")


@dataclass(frozen=True)
class PackageRequest:
    """What to package: a training run's checkpoint plus optional promotion and evaluations."""

    training_run: str
    checkpoint_tree_sha256: str
    promotion_receipt: str | None = None
    evaluation_receipts: tuple[str, ...] = ()


def read_receipt(receipts: ReceiptStore, rid: str, kind: str, role: str) -> dict[str, Any]:
    """A stored receipt document of ``kind`` that succeeded; ReceiptError naming the role otherwise."""
    try:
        doc = receipts.read_document(rid)
    except BlobMissingError as exc:
        raise ReceiptError(f"{role} receipt {rid} is not in this home's store; record it first or pass the right id") from exc
    if doc["kind"] != kind:
        raise ReceiptError(f"{role} receipt {rid} is a {doc['kind']!r} receipt, expected {kind!r}")
    if doc["status"] != "succeeded":
        raise ReceiptError(f"{role} receipt {rid} has status {doc['status']} ({doc.get('error')}); only succeeded work is packaged")
    return doc


def refers_to(doc: dict[str, Any], tree_sha: str) -> bool:
    """True when an evaluation evaluated ``tree_sha``, or a promotion promoted it."""
    if doc["kind"] == "promotion":
        r = doc["result"]
        promoted = [c["tree_sha256"] for c in r["challengers"] if c["name"] == r["promoted"]]
        return tree_sha in promoted or any(m["target_sha256"] == tree_sha for m in r["moves"])
    return any(c.get("artifact_sha256") == tree_sha for c in doc["parameters"]["candidates"])


def find_checkpoint(receipts: ReceiptStore, run: dict[str, Any], run_id: str, tree_sha: str) -> str:
    """The id of the run's checkpoint receipt whose tree is ``tree_sha``."""
    seen = []
    for ref in run["inputs"]:
        if ref["role"].startswith("checkpoint:"):
            doc = read_receipt(receipts, ref["sha256"], "checkpoint", ref["role"])
            tree = next(a["sha256"] for a in doc["subjects"] if a["role"] == "checkpoint")
            if tree == tree_sha:
                return str(ref["sha256"])
            seen.append(tree)
    raise ReceiptError(f"checkpoint tree {tree_sha} is not a checkpoint of training run {run_id}; its checkpoints are {seen}")


def check_deliverables(store: LocalBlobStore, backend: BackendName, tree: TreeManifest, tree_sha: str) -> dict[str, MemberRole]:
    """Refuse a checkpoint tree holding anything but the backend's adapter deliverables; return their roles.

    Raises: BackendCapabilityError (the backend cannot be packaged yet), ReceiptError (a file too
    many or missing, or tensors that are not adapter weights).
    """
    allowed = get_backend(backend).deliverables()
    names = {e.path for e in tree.entries}
    extra = sorted(names - set(allowed))
    missing = sorted({role for role in allowed.values()} - {allowed[n] for n in names if n in allowed})
    if extra or missing:
        want = ", ".join(
            f"{role}: {' or '.join(sorted(n for n, r in allowed.items() if r == role))}" for role in sorted(set(allowed.values()))
        )
        raise ReceiptError(
            f"checkpoint tree {tree_sha} holds {sorted(names)}; a {backend} adapter package takes one file of each role ({want}) "
            f"and nothing else (optimizer state and other working files never ship): extra {extra}, missing roles {missing}"
        )
    for entry in tree.entries:
        if entry.path.endswith(".safetensors"):
            raw = store.get_bytes(entry.sha256)
            (n,) = struct.unpack("<Q", raw[:8])
            keys = [k for k in json.loads(raw[8 : 8 + n]) if k != "__metadata__"]
            foreign = [k for k in keys if not ADAPTER_KEY.search(k)]
            if foreign or not keys:
                raise ReceiptError(
                    f"{entry.path} of checkpoint tree {tree_sha} holds tensors that are not adapter weights: {foreign[:5] or 'none at all'}"
                )
    return allowed


def _tool_versions() -> dict[str, str]:
    out = {}
    for name in ("espeakng-loader", "librosa", "torch", "peft", "transformers"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def build_manifest_and_members(store: LocalBlobStore, request: PackageRequest) -> tuple[PackageManifest, dict[str, Path | bytes]]:
    """Check every bound receipt and return the manifest plus the member sources (manifest excluded)."""
    receipts = ReceiptStore(store)
    run = read_receipt(receipts, request.training_run, "training_run", "training run")
    p = run["parameters"]
    if p["mode"] != "lora":
        raise ReceiptError(f"training run {request.training_run} is a {p['mode']}-mode run; packages hold LoRA adapters over a base model")
    backend = get_backend(p["backend"])
    try:
        components = backend.package_components(p["bound"], p["effective_config"])
    except TrainingError as exc:
        raise ReceiptError(f"training run {request.training_run}: {exc}; packages hold LoRA adapters over a bound base model") from exc
    ckpt_rid = find_checkpoint(receipts, run, request.training_run, request.checkpoint_tree_sha256)
    tree = load_manifest(store, request.checkpoint_tree_sha256)
    roles = check_deliverables(store, p["backend"], tree, request.checkpoint_tree_sha256)
    audit = read_receipt(receipts, p["bound"]["audit_receipt"], "audit", "audit")
    if audit["result"]["verdict"] != "pass":
        raise ReceiptError(
            f"audit {p['bound']['audit_receipt']} has verdict {audit['result']['verdict']}; a failed corpus is never packaged"
        )
    related = [(rid, "evaluation", f"evaluation {rid}") for rid in request.evaluation_receipts]
    if request.promotion_receipt:
        related.append((request.promotion_receipt, "promotion", "promotion"))
    for rid, kind, role in related:
        if not refers_to(read_receipt(receipts, rid, kind, role), request.checkpoint_tree_sha256):
            what = "promote" if kind == "promotion" else "evaluate"
            raise ReceiptError(
                f"{role} receipt {rid} does not {what} checkpoint tree {request.checkpoint_tree_sha256}; bind only receipts about this adapter"
            )
    rids = sorted(
        {
            request.training_run,
            ckpt_rid,
            p["bound"]["audit_receipt"],
            *request.evaluation_receipts,
            *([request.promotion_receipt] if request.promotion_receipt else []),
        }
    )
    sources: dict[str, Path | bytes] = {}
    members = []
    for rid in rids:  # every one was read (and so hash-verified) above
        sources[f"receipts/{rid}.json"] = store.path_of(rid)
        members.append(PackageMember(path=f"receipts/{rid}.json", role="receipt", sha256=rid, size_bytes=store.size_of(rid)))
    for entry in tree.entries:
        store.verify(entry.sha256)
        sources[f"{ADAPTER_DIR}/{entry.path}"] = store.path_of(entry.sha256)
        members.append(
            PackageMember(path=f"{ADAPTER_DIR}/{entry.path}", role=roles[entry.path], sha256=entry.sha256, size_bytes=entry.size_bytes)
        )
    config = json.loads(store.get_bytes(next(e.sha256 for e in tree.entries if roles[e.path] == "adapter_config")))
    rate_hz, settings = backend.inference_settings()
    b = p["bound"]
    manifest = PackageManifest(
        name=f"{p['effective_config']['plan']['name']}-{config['new_speaker']}",
        backend=p["backend"],
        components=components,
        binding=PackageBinding(
            training_run=request.training_run,
            checkpoint_receipt=ckpt_rid,
            checkpoint_tree_sha256=request.checkpoint_tree_sha256,
            audit_receipt=b["audit_receipt"],
            evaluation_receipts=tuple(sorted(request.evaluation_receipts)),
            promotion_receipt=request.promotion_receipt,
            line=model_line(config["new_speaker"], p["backend"]),
            plan_sha256=b["plan_sha256"],
            data_manifest_sha256=b["manifest_sha256"],
            audio_tree_sha256=b["audio_tree_sha256"],
            features_sha256=b["features_sha256"],
        ),
        inference=InferenceSettings(speaker=config["new_speaker"], sample_rate_hz=rate_hz, settings=settings, tools=_tool_versions()),
        code=code_identity(),
        members=tuple(sorted(members, key=lambda m: m.path)),
    )
    return manifest, sources


def assemble_package(store: LocalBlobStore, request: PackageRequest, dest: Path) -> tuple[str, PackageManifest]:
    """Write the package tar to ``dest`` (must not exist); return (package sha256, manifest).

    The written tar is re-read and every member re-hashed against the manifest before returning.
    """
    manifest, sources = build_manifest_and_members(store, request)
    sources[MANIFEST_NAME] = canonical_bytes(manifest)
    write_package_tar(dest, sources)
    return verify_package(dest).sha256, manifest
