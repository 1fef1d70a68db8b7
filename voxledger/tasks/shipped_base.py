"""Shipped bases: bundle a trained base run, read and verify a bundle (importing one is a stage: ``stages/base_import``).

A bundle (``Backend.shipped_base``) is a folder: ``base.json`` (`ShippedBase`), ``tree/`` (the
best checkpoint's files) and the receipts that produced it, stored byte for byte as the training
home stored them (``training_run.json``, ``checkpoint.json``, ``audit.json``) plus the training
plan (``plan.json``, canonical JSON). Import checks every byte against the manifest and the
receipts against each other before anything is stored; the tree then lands in the store and a
``base_import`` receipt names it, with the shipped receipts as its inputs (stored as blobs, not
as this home's receipts: their own inputs, the demo corpus, are not in this home).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from pydantic import ValidationError

from voxledger.schemas.canonical import canonical_digest
from voxledger.schemas.errors import BackendCapabilityError, CorpusError, DigestMismatchError, PlanError, validation_lines
from voxledger.schemas.shipped import ShippedBase
from voxledger.schemas.training import BackendName, CheckpointReceipt, TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.stores.queries import checkpoint_rows
from voxledger.stores.trees import build_manifest, manifest_bytes, materialize_tree
from voxledger.tasks.backends.base import shipped_folder

RECEIPT_FILES = {"training_run.json": "training_run", "checkpoint.json": "checkpoint", "audit.json": "audit"}
PLAN_FILE = "plan.json"


def bundle_folder(backend: BackendName) -> Path:
    """The folder of ``backend``'s shipped base; BackendCapabilityError when it ships none."""
    folder = shipped_folder(backend)
    if folder is None:
        raise BackendCapabilityError(
            f"backend {backend} ships no trained base; train one (a 'full' training plan) or give --base with a tree digest"
        )
    return folder


def read_bundle(folder: Path) -> ShippedBase:
    """``base.json`` validated; CorpusError naming the file and each problem otherwise."""
    path = folder / "base.json"
    try:
        return ShippedBase.model_validate_json(path.read_bytes())
    except FileNotFoundError as exc:
        raise CorpusError(f"{path} is missing: {folder} is not a shipped base bundle (reinstall voxledger)") from exc
    except ValidationError as exc:
        raise CorpusError(f"{path}: " + "; ".join(validation_lines(exc)) + " (reinstall voxledger)") from exc


def bundle_digest(bundle: ShippedBase) -> str:
    """The bundle's identity: sha256 of its manifest's canonical JSON."""
    return canonical_digest(bundle)


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verify_bundle(folder: Path, bundle: ShippedBase) -> tuple[str, ...]:
    """Check every byte of a bundle and that its receipts agree; return what was checked, one line each.

    Raises:
        DigestMismatchError: a file is missing, its bytes are not the digest ``base.json`` names,
            or the receipts do not describe this tree, plan and audit.
    """
    checked = []
    got_tree = hashlib.sha256(manifest_bytes(build_manifest(folder / "tree"))).hexdigest()
    if got_tree != bundle.tree_sha256:
        raise DigestMismatchError(f"{folder}/tree hashes to tree {got_tree}, base.json says {bundle.tree_sha256}; reinstall voxledger")
    checked.append(f"tree/ hashes to {bundle.tree_sha256}")
    for name in (*RECEIPT_FILES, PLAN_FILE):
        want = bundle.files.get(name)
        path = folder / name
        if want is None or not path.is_file():
            raise DigestMismatchError(f"{path}: missing from the bundle or from base.json's files; reinstall voxledger")
        got = _file_sha(path)
        if got != want:
            raise DigestMismatchError(f"{path} hashes to {got}, base.json says {want}; the bundle was altered: reinstall voxledger")
    checked.append(f"{len(bundle.files)} receipt and plan files hash to the digests base.json names")
    try:  # the two receipt models only: a command listing bases does not build every receipt model
        run: TrainingRunReceipt | None = TrainingRunReceipt.model_validate_json((folder / "training_run.json").read_bytes())
        ckpt: CheckpointReceipt | None = CheckpointReceipt.model_validate_json((folder / "checkpoint.json").read_bytes())
    except ValidationError:
        run = ckpt = None
    plan = json.loads((folder / PLAN_FILE).read_bytes())
    problems = []
    if run is None or ckpt is None:
        problems.append("training_run.json / checkpoint.json are not a training_run and a checkpoint receipt")
    else:
        if bundle.files["training_run.json"] != bundle.training_run:
            problems.append(f"training_run.json is receipt {bundle.files['training_run.json']}, not {bundle.training_run}")
        if run.subject("best").sha256 != bundle.tree_sha256 or ckpt.subjects[0].sha256 != bundle.tree_sha256:
            problems.append(f"the run's best checkpoint is not tree {bundle.tree_sha256}")
        if run.parameters.bound.plan_sha256 != bundle.training_plan_sha256 or canonical_digest(plan) != bundle.training_plan_sha256:
            problems.append(f"plan.json or the run's plan is not {bundle.training_plan_sha256}")
        if run.parameters.bound.audit_receipt != bundle.audit_receipt or bundle.files["audit.json"] != bundle.audit_receipt:
            problems.append(f"audit.json or the run's audit is not receipt {bundle.audit_receipt}")
        if run.parameters.mode != "full" or run.parameters.backend != bundle.backend:
            problems.append(f"the run is a {run.parameters.mode} run of {run.parameters.backend}, not a full run of {bundle.backend}")
    if problems:
        raise DigestMismatchError(f"{folder}: the shipped receipts do not describe this base: " + "; ".join(problems))
    checked.append(
        f"training run {bundle.training_run[:12]}: best checkpoint = tree, plan {bundle.training_plan_sha256[:12]}, "
        f"audit {bundle.audit_receipt[:12]}, full {bundle.backend} run"
    )
    return tuple(checked)


def write_bundle(home: Home, run_rid: str, out: Path, *, name: str, reproduce: tuple[str, ...]) -> ShippedBase:
    """Write a bundle of training run ``run_rid``'s best checkpoint into ``out`` (which must not exist).

    Raises:
        PlanError: the run is not a full (base) training run, or ``out`` exists.
    """
    run = home.receipts.read(run_rid, TrainingRunReceipt)
    if run.parameters.mode != "full":
        raise PlanError(f"run {run_rid} is a {run.parameters.mode} run; only a full (base) training run can be shipped as a base")
    if out.exists():
        raise PlanError(f"{out} exists; bundles are never overwritten: choose a new folder")
    tree = run.subject("best").sha256
    ckpt_rid = next((rid for rid, _, _, _, t in checkpoint_rows(home.catalog) if t == tree), None)
    if ckpt_rid is None:
        raise PlanError(f"no checkpoint receipt in this home names tree {tree}; bundle the run in the home that trained it")
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    materialize_tree(home.blobs, tree, staging / "tree")
    files = {"training_run.json": run_rid, "checkpoint.json": ckpt_rid, "audit.json": run.parameters.bound.audit_receipt}
    for file, rid in files.items():
        (staging / file).write_bytes(home.blobs.get_bytes(rid))
    (staging / PLAN_FILE).write_bytes(home.blobs.get_bytes(run.parameters.bound.plan_sha256))
    files[PLAN_FILE] = _file_sha(staging / PLAN_FILE)
    last = run.result.epochs[-1]
    model = run.parameters.effective_config.get("model")
    model = model if isinstance(model, dict) else {}
    speakers, language = model.get("speakers"), model.get("language")
    if not isinstance(speakers, list) or not isinstance(language, str):
        raise PlanError(f"run {run_rid}'s effective config names no model speakers and language; this backend's runs cannot be shipped")
    bundle = ShippedBase(
        backend=run.parameters.backend,
        name=name,
        tree_sha256=tree,
        files=files,
        training_run=run_rid,
        training_plan_sha256=run.parameters.bound.plan_sha256,
        audit_receipt=run.parameters.bound.audit_receipt,
        code_commit=run.environment.code.git_commit,
        platform=f"{run.environment.platform}, torch {run.environment.torch}",
        precision_effective=str(run.parameters.effective_config.get("precision_effective", "unknown")),
        speakers=tuple(str(x) for x in speakers),
        language=language,
        summary=(
            f"{len(run.result.epochs)} epochs, {run.result.total_steps} steps, CV loss {run.result.epochs[0].cv_loss:.3f} -> "
            f"{run.result.best_cv_loss:.3f} (best epoch {run.result.best_epoch}, last {last.cv_loss:.3f}), stop: {run.result.stop_reason}"
        ),
        reproduce=reproduce,
    )
    (staging / "base.json").write_text(json.dumps(bundle.model_dump(mode="json"), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    verify_bundle(staging, bundle)
    staging.rename(out)
    return bundle
