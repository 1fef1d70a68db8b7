"""``package_adapter`` as a plain function: assemble, reload-check, merge-check, publish, record.

Order of work: the deterministic tar is written and stored first (a blob keyed by its digest);
then a fresh Python process reloads base + package and must reproduce our probe waveform; then
the adapter is merged into the base weights, exported, reloaded and compared with the adapter
path stage by stage (an ``equivalence`` receipt, a parent of the package receipt); only a package
that passed both checks is published; the ``package`` receipt is the commit point. A failed check
is still recorded (status ``failed``) and then raised.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.equivalence import EquivalencePlan, RuntimeDescriptor, StageSpec
from voxledger.schemas.equivalence_receipt import EquivalenceReceipt
from voxledger.schemas.errors import EquivalenceError
from voxledger.schemas.package import (
    PACKAGE_MEDIA_TYPE,
    PackageManifest,
    PackageParameters,
    PackageReceipt,
    PackageResult,
    PublishRecord,
    ReloadCheck,
)
from voxledger.stores.home import Home
from voxledger.stores.trees import TREE_MEDIA_TYPE, materialize_tree, put_tree
from voxledger.tasks.backends.base import compute_device, get_backend
from voxledger.tasks.packaging.archive import unpack_package, verify_package
from voxledger.tasks.packaging.assemble import PackageRequest, assemble_package
from voxledger.tasks.packaging.probe import (
    FreshReload,
    load_packaged,
    probe_package,
    probe_stages,
)
from voxledger.tasks.packaging.publish import publish_file
from voxledger.tasks.plans import plan_digest
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import PackageOutcome, StageOutcome, reuse
from voxledger.tasks.stages.contract import never_stops
from voxledger.tasks.stages.equivalence import record_equivalence
from voxledger.tasks.threads import torch_threads

if TYPE_CHECKING:
    from voxledger.schemas.reproduction import OutputComparison, ReproductionBands
    from voxledger.tasks.stages.contract import StageContext
    from voxledger.tasks.stages.reproduce import Preparation

PROBE_TEXT = "The salt breeze came across from the sea."
PROBE_PLAN = EquivalencePlan(stages=(StageSpec(name="mel", kind="mel", cols=80), StageSpec(name="pcm", kind="pcm")))
CPU_TOLERANCE = 0.0  # CPU synthesis is bit-repeatable (eval mode, seeded Griffin-Lim): demand equality


def publication_name(manifest_name: str, package_sha256: str) -> str:
    """File name of a published package: its manifest name and a digest prefix."""
    return f"{manifest_name}-{package_sha256[:16]}.tar"


def _reload_check(ours: np.ndarray, theirs: np.ndarray, text: str, seed: int, speaker: str, threads: int, wall_s: float) -> ReloadCheck:
    same_shape = ours.shape == theirs.shape
    err = float(np.max(np.abs(ours.astype(np.float64) - theirs.astype(np.float64)))) if same_shape and ours.size else float("inf")
    bitwise = same_shape and ours.tobytes() == theirs.tobytes()
    return ReloadCheck(
        probe_text=text,
        probe_seed=seed,
        speaker=speaker,
        threads=threads,
        device="cpu",
        n_samples=int(ours.size),
        bitwise_equal=bitwise,
        max_abs_err=err if np.isfinite(err) else 1e30,
        tolerance=CPU_TOLERANCE,
        passed=bitwise or err <= CPU_TOLERANCE,
        child_wall_s=wall_s,
    )


def _write_dumps(stages: dict[str, np.ndarray], folder: Path) -> Path:
    folder.mkdir()
    for name, array in stages.items():
        np.save(folder / f"{name}.npy", array, allow_pickle=False)
    return folder


Compare = Callable[..., StageOutcome[EquivalenceReceipt]]
"""Records one equivalence comparison: ``record_equivalence``'s signature (the ``package`` flow
passes the same function run as its own Prefect task)."""


def _merged_probe(manifest: PackageManifest, tar: Path, base_dir: Path | None, work: Path, text: str, seed: int) -> dict[str, np.ndarray]:
    """Export merged weights to ``work/merged``, reload them as a merged export, return the probe's stages.
    Writes nothing to the home: ``_merged_equivalence`` stores the tree once the reload check has passed."""
    backend = get_backend(manifest.backend)
    exporter = getattr(backend, "export_merged", None)
    if exporter is None:
        raise EquivalenceError(f"backend {manifest.backend!r} has no export_merged(); it cannot produce a merged export")
    unpack_package(tar, work / "pkg")
    exporter(load_packaged(manifest, base_dir, work / "pkg" / "adapter", "merged"), work / "merged")
    merged = backend.load_for_inference(None, work / "merged", "merged_export")
    return probe_stages(manifest.backend, merged, text, manifest.inference.speaker, seed, dict(manifest.inference.settings))


def _merged_equivalence(
    home: Home,
    work: Path,
    ours: dict[str, np.ndarray],
    cand: dict[str, np.ndarray],
    parents: tuple[InputRef, ...],
    plan: EquivalencePlan,
    flow: str,
    compare: Compare,
) -> tuple[str, StageOutcome[EquivalenceReceipt]]:
    """Store the merged tree ``_merged_probe`` exported, compare its probe with the adapter path; return (merged tree, outcome)."""
    merged_sha, _ = put_tree(home.blobs, work / "merged")
    outcome = compare(
        home,
        str(_write_dumps(ours, work / "dumps-adapter")),
        str(_write_dumps(cand, work / "dumps-merged")),
        plan,
        plan_name=f"package-probe-equivalence-{plan_digest(plan)[:12]}",
        ref_runtime=RuntimeDescriptor(name="adapter"),
        cand_runtime=RuntimeDescriptor(name="merged_export"),
        flow=flow,
        parents=(*parents, InputRef(role="merged_export", sha256=merged_sha, ref="artifact")),
    )
    return merged_sha, outcome


def package_adapter_fn(
    home: Home,
    training_run_rid: str,
    checkpoint_tree_sha: str,
    *,
    promotion_rid: str | None = None,
    evaluation_rids: tuple[str, ...] | list[str] = (),
    retention_root: Path | None = None,
    probe_text: str = PROBE_TEXT,
    probe_seed: int = 0,
    equivalence_plan: EquivalencePlan = PROBE_PLAN,
    flow: str = "package_adapter",
    threads: int = 1,
    compare: Compare = record_equivalence,
) -> PackageOutcome:
    """Package a LoRA checkpoint of a training run; check it; publish it; record a ``package`` receipt.

    ``equivalence_plan`` judges the merged export against the adapter path (mel and pcm of the
    probe); a RED band fails packaging; ``compare`` records that comparison (its own receipt).
    ``threads`` (torch, this process and the fresh one) is
    part of the request: bit-exact reload holds for a given thread count. Equal requests are served from cache (blobs re-verified).

    Raises: ReceiptError (a bound receipt is missing, of the wrong kind, failed, or unrelated;
    the checkpoint holds more than deliverables), EquivalenceError (the fresh-process reload
    differs, or the merged export is RED; both recorded first), DigestMismatchError (stored bytes
    changed; the retention root holds this name with other bytes).
    """
    started, t0 = utc_now(), time.perf_counter()
    request = PackageRequest(training_run_rid, checkpoint_tree_sha, promotion_rid, tuple(sorted(evaluation_rids)))
    key = cache_key(
        "package",
        {"training_run": training_run_rid, "checkpoint": checkpoint_tree_sha},
        None,
        {
            "promotion": promotion_rid,
            "evaluations": request.evaluation_receipts,
            "probe_text": probe_text,
            "probe_seed": probe_seed,
            "threads": threads,
            "equivalence_plan": plan_digest(equivalence_plan),
        },
    )
    hit = reuse(home, key, PackageReceipt)
    if hit is not None:
        return _served(home, hit, retention_root)
    with tempfile.TemporaryDirectory() as tmp, torch_threads(threads):
        work = Path(tmp)
        sha, manifest = assemble_package(home.blobs, request, work / "package.tar")
        params = PackageParameters(
            backend=manifest.backend,
            training_run=training_run_rid,
            checkpoint_tree_sha256=checkpoint_tree_sha,
            promotion_receipt=promotion_rid,
            evaluation_receipts=request.evaluation_receipts,
            probe_text=probe_text,
            probe_seed=probe_seed,
        )
        home.blobs.put_file(work / "package.tar", expected_sha256=sha)
        tar = home.blobs.path_of(sha)
        base_dir = _stored_base(home, training_run_rid, work / "base")
        with FreshReload(tar, base_dir, probe_text, probe_seed, threads) as child:  # runs beside this process's own probes
            ours = probe_package(tar, base_dir, probe_text, probe_seed)
            try:  # its failure matters only once the reload passed: a failed reload is recorded first, as before
                merged_probe: dict[str, np.ndarray] | Exception = _merged_probe(manifest, tar, base_dir, work, probe_text, probe_seed)
            except Exception as exc:  # noqa: BLE001  (re-raised below unless the reload failed)
                merged_probe = exc
            theirs, child_wall = child.result()
        reload = _reload_check(ours["pcm"], theirs["pcm"], probe_text, probe_seed, manifest.inference.speaker, threads, child_wall)
        inputs = _bound_inputs(manifest, stored_base=base_dir is not None)
        subjects = [artifact(home.blobs, "package", sha, PACKAGE_MEDIA_TYPE)]
        result: dict[str, object] = {
            "package_sha256": sha,
            "manifest_sha256": _manifest_sha(manifest),
            "size_bytes": tar.stat().st_size,
            "n_members": len(manifest.members) + 1,
            "reload": reload,
        }
        error = (
            None if reload.passed else f"fresh-process reload differs: max |err| {reload.max_abs_err:.3e} > tolerance {reload.tolerance}"
        )
        if reload.passed:
            if isinstance(merged_probe, Exception):
                raise merged_probe
            merged_sha, eq = _merged_equivalence(
                home, work, ours, merged_probe, tuple(inputs[: 4 if base_dir is not None else 3]), equivalence_plan, flow, compare
            )
            report = eq.receipt.report
            subjects.append(artifact(home.blobs, "merged_export", merged_sha, TREE_MEDIA_TYPE))
            inputs.append(InputRef(role="equivalence", sha256=eq.receipt_id, ref="receipt"))
            result.update(
                merged_tree_sha256=merged_sha,
                equivalence_receipt=eq.receipt_id,
                equivalence_band=report.band,
                stage_rel={s.stage: s.rel for s in report.stages if s.rel is not None},
            )
            error = None if report.passed else f"merged export vs adapter is {report.band}: {eq.receipt.error}"
        published = None
        if error is None and retention_root is not None:
            published = publish_file(tar, sha, retention_root, publication_name(manifest.name, sha))
            result["published"] = PublishRecord(name=published.path.name, already_present=published.already_present)
        receipt = build_receipt(
            PackageReceipt,
            flow=flow,
            task="package_adapter",
            started_at=started,
            key=key,
            device=compute_device(manifest.backend),  # where the fresh-process reload and the merged probe ran
            subjects=subjects,
            inputs=inputs,
            status="succeeded" if error is None else "failed",
            error=error,
            parameters=params,
            result=PackageResult(build_wall_s=time.perf_counter() - t0, **result),  # type: ignore[arg-type]
        )
        rid = home.record(receipt)
    if error is not None:
        raise EquivalenceError(
            f"package {sha} of run {training_run_rid} failed its checks ({error}); recorded as receipt {rid}", receipt_id=rid
        )
    return PackageOutcome(rid, receipt, False, sha, tar, published)


def _served(home: Home, hit: StageOutcome[PackageReceipt], retention_root: Path | None) -> PackageOutcome:
    """A package served from cache: its stored tar, published again where a retention root is given."""
    sha = hit.receipt.result.package_sha256
    path = home.blobs.path_of(sha)
    published = None
    if retention_root is not None:
        published = publish_file(path, sha, retention_root, publication_name(verify_package(path).manifest.name, sha))
    return PackageOutcome(hit.receipt_id, hit.receipt, True, sha, path, published, verified=hit.verified)


def _bound_inputs(manifest: PackageManifest, *, stored_base: bool) -> list[InputRef]:
    """The receipts and trees a package binds, as its receipt's inputs (the base model's tree when
    it is a stored tree; a backend's own base, cosyvoice3's, is bound in the manifest's components)."""
    b = manifest.binding
    inputs = [
        InputRef(role="training_run", sha256=b.training_run, ref="receipt"),
        InputRef(role="checkpoint", sha256=b.checkpoint_receipt, ref="receipt"),
        InputRef(role="adapter_checkpoint", sha256=b.checkpoint_tree_sha256, ref="artifact"),
        InputRef(role="audit", sha256=b.audit_receipt, ref="receipt"),
        *(InputRef(role=f"evaluation:{i}", sha256=r, ref="receipt") for i, r in enumerate(b.evaluation_receipts)),
        *([InputRef(role="promotion", sha256=b.promotion_receipt, ref="receipt")] if b.promotion_receipt else []),
    ]
    if stored_base:
        inputs.insert(3, InputRef(role="base_model", sha256=manifest.components.base_model_sha256, ref="artifact"))
    return inputs


def _stored_base(home: Home, training_run_rid: str, dest: Path) -> Path | None:
    """The stored base tree the training run bound, materialised at ``dest`` (verified); None when the run's
    backend binds its own base (cosyvoice3's model folder, checked by `Backend.check_base`)."""
    from voxledger.schemas.training import TrainingRunReceipt

    base_sha = home.receipts.read(training_run_rid, TrainingRunReceipt).parameters.bound.base_sha256
    if base_sha is None:
        return None
    materialize_tree(home.blobs, base_sha, dest)
    return dest


def _manifest_sha(manifest: PackageManifest) -> str:
    from voxledger.schemas.canonical import canonical_digest

    return canonical_digest(manifest)


# The stage contract (tasks/stages/contract.py).
run = package_adapter_fn
verdict = never_stops


def inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the adapter training run, the promoted checkpoint, the promotion and the evaluation receipts."""
    promotion_rid, tree = ctx.winner()
    return {"run_rid": ctx.rid("train_adapter"), "tree_sha": tree, "promotion_rid": promotion_rid, "eval_rids": (ctx.rid("evaluate"),)}


def rerun_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``package`` flow's arguments: the recorded run, checkpoint, bound receipts and probe seed (never published)."""
    from voxledger.schemas.errors import ReproductionError

    p = cast(PackageReceipt, prep.receipt).parameters
    if p.probe_text != PROBE_TEXT:
        raise ReproductionError(
            f"package receipt {prep.rid[:12]} probed with text {p.probe_text!r}; the package flow probes with {PROBE_TEXT!r} "
            "and takes no other, so a re-run could not compare its checks: reproduce it with the code that wrote it"
        )
    return {
        "run_rid": p.training_run,
        "tree_sha": p.checkpoint_tree_sha256,
        "promotion_rid": p.promotion_receipt,
        "eval_rids": p.evaluation_receipts,
        "retention": None,
        "probe_seed": p.probe_seed,
    }


def compare(h: Home, s: Home, original: PackageReceipt, rerun: PackageReceipt, bands: ReproductionBands) -> list[OutputComparison]:
    """The package members, reload and merged-export checks, and the two equivalence receipts when both were recorded."""
    from voxledger.tasks.reproduction.packaging import compare_package

    ea, eb = original.result.equivalence_receipt, rerun.result.equivalence_receipt
    pair = (h.receipts.read(ea, EquivalenceReceipt), s.receipts.read(eb, EquivalenceReceipt)) if ea and eb else None
    return compare_package(original, rerun, (h.blobs.path_of, s.blobs.path_of), pair)


def summary(receipt: PackageReceipt) -> str:
    """The package's digest and its verdict."""
    return f"package {receipt.subjects[0].sha256[:16] if receipt.subjects else '-'}: {receipt.status}"
