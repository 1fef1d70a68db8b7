"""``train_adapter`` as a plain function: checks, binding, the loop, and receipts."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from voxledger.schemas.audit import AuditReceipt
from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.canonical import canonical_bytes, canonical_digest
from voxledger.schemas.errors import ReceiptError, TrainingError
from voxledger.schemas.training import (
    CheckpointParameters,
    CheckpointReceipt,
    EpochRecord,
    TrainingInputs,
    TrainingPlan,
    TrainingResult,
    TrainingRunParameters,
    TrainingRunReceipt,
)
from voxledger.stores.home import Home
from voxledger.stores.identity import code_identity
from voxledger.stores.trees import (
    TREE_MEDIA_TYPE,
    TreeEntry,
    TreeManifest,
    manifest_bytes,
    materialize_tree,
    put_tree,
)
from voxledger.tasks.backends.base import device_of, get_backend
from voxledger.tasks.corpus.manifests import load_corpus
from voxledger.tasks.corpus.sources import audio_digests, audio_tree
from voxledger.tasks.plans import register_plan
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import StageOutcome, damaged_outputs, record, reuse
from voxledger.tasks.stages.contract import need_corpus, never_stops
from voxledger.tasks.threads import torch_threads

if TYPE_CHECKING:
    from voxledger.schemas.reproduction import OutputComparison, ReproductionBands
    from voxledger.tasks.stages.contract import StageContext
    from voxledger.tasks.stages.reproduce import Preparation
    from voxledger.tasks.training.loop import LoopState

if TYPE_CHECKING:
    import torch


def passing_audit(home: Home, audit_rid: str) -> AuditReceipt:
    """The audit receipt, which must exist and pass; TrainingError otherwise."""
    try:
        receipt = home.receipts.read(audit_rid, AuditReceipt)
    except ReceiptError as exc:
        raise TrainingError(f"{exc}; pass the id `voxledger audit` printed") from exc
    if receipt.result.verdict != "pass":
        raise TrainingError(
            f"audit {audit_rid} of corpus {receipt.parameters.corpus_name} failed "
            f"({receipt.result.counts_by_code}); fix the corpus and audit it again before training"
        )
    return receipt


def bind_inputs(
    home: Home,
    corpus: Path,
    audit: AuditReceipt,
    audit_rid: str,
    plan_sha: str,
    base_sha: str | None,
    backend_sha: str,
    backend: Any = None,
) -> TrainingInputs:
    """Re-hash the corpus and refuse it if it is not exactly what the audit saw."""
    loaded = load_corpus(corpus)
    manifest_sha = canonical_digest(loaded.utterances)
    digests, paths = audio_digests(loaded, home.stat_cache)
    tree_sha = canonical_digest(audio_tree(loaded, digests, paths))
    for name, now, then in (
        ("manifest", manifest_sha, audit.parameters.manifest_sha256),
        ("audio tree", tree_sha, audit.parameters.audio_tree_sha256),
    ):
        if now != then:
            raise TrainingError(f"corpus {corpus} changed since audit {audit_rid}: {name} is {now}, the audit saw {then}; audit it again")
    features = _features_tree(home, loaded, backend, digests)
    return TrainingInputs(
        audit_receipt=audit_rid,
        plan_sha256=plan_sha,
        base_sha256=base_sha,
        manifest_sha256=manifest_sha,
        audio_tree_sha256=tree_sha,
        features_sha256=features,
        code_sha256=code_identity().source_sha256,
        backend_sha256=backend_sha,
    )


def _features_tree(home: Home, loaded: Any, backend: Any = None, audio_sha256: dict[str, str] | None = None) -> str:
    """Digest of the per-utterance side files the backend trains on, each stored as a blob.

    A backend that derives them (tiny: phoneme durations, from alignment files or forced
    alignment) lists them through ``feature_files``, given each utterance's audio digest and the
    home's memo of derived values so that unchanged audio is not derived again; otherwise the
    corpus's own alignment files are the features.
    """
    from voxledger.stores.hashing import hash_files

    derive = getattr(backend, "feature_files", None)  # optional part of the Backend protocol
    if derive is not None:
        files = derive(loaded, audio_sha256, home.memo)
        rels = sorted(files)
        shas = home.blobs.put_many_bytes(files[rel] for rel in rels)
        entries = tuple(
            TreeEntry(path=rel, size_bytes=len(files[rel]), sha256=sha, executable=False) for rel, sha in zip(rels, shas, strict=True)
        )
        return home.blobs.put_bytes(manifest_bytes(TreeManifest(entries=entries)))
    rel = sorted({str(u.extra["alignment"]) for u in loaded.utterances.utterances if "alignment" in u.extra})
    paths = [loaded.root / r for r in rel]
    missing = [r for r, p in zip(rel, paths, strict=True) if not p.is_file()]
    if missing:
        raise TrainingError(f"corpus {loaded.root}: {len(missing)} alignment file(s) missing, e.g. {missing[:3]}")
    digests = hash_files(paths, cache=home.stat_cache)
    tree = TreeManifest(
        entries=tuple(
            TreeEntry(path=r, size_bytes=p.stat().st_size, sha256=digests[p], executable=False) for r, p in zip(rel, paths, strict=True)
        )
    )
    for e, p in zip(tree.entries, paths, strict=True):
        if not home.blobs.has(e.sha256):
            home.blobs.put_file(p, expected_sha256=e.sha256)
    return home.blobs.put_bytes(manifest_bytes(tree))


def training_task_name(plan: TrainingPlan) -> str:
    """What a run's receipt (and its Prefect task) is called: ``train_base`` for a full-mode plan
    (a base model from scratch), ``train_adapter`` for a LoRA plan."""
    return "train_base" if plan.mode == "full" else "train_adapter"


def stage_of(receipt: TrainingRunReceipt) -> str:
    """Which of the two training stages wrote a training-run receipt (the stage table's name): a
    LoRA run is ``train_adapter``, any other ``train_base``."""
    return "train_adapter" if receipt.parameters.mode == "lora" else "train_base"


def run_training(
    home: Home,
    corpus: Path,
    audit_rid: str,
    plan: TrainingPlan,
    *,
    plan_name: str,
    base_sha: str | None = None,
    run_dir: Path | None = None,
    flow: str = "train_adapter",
    progress: Callable[[str], None] | None = None,
) -> StageOutcome[TrainingRunReceipt]:
    """Train under ``plan`` from an audited corpus; resume a crashed run; record every receipt."""
    started = utc_now()
    audit = passing_audit(home, audit_rid)
    plan_rid, plan_sha = register_plan(home, plan, source_name=plan_name, flow=flow)
    backend = get_backend(plan.backend)
    if plan.mode == "lora" and base_sha is None and backend.needs_stored_base:
        raise TrainingError(
            f"plan {plan_name} is a LoRA plan for backend {plan.backend}: give the base model digest (a full-mode run's 'best' output)"
        )
    bound = bind_inputs(home, corpus, audit, audit_rid, plan_sha, base_sha, canonical_digest(backend.identity()), backend)
    ranks = data_parallel_ranks(backend)
    # a run on several ranks agrees with one process within a band, not bit for bit: the world size is part of its identity
    run_key = cache_key("train", bound.model_dump(mode="json"), plan_sha, {"world_size": ranks} if ranks > 1 else {})
    hit = reuse(home, run_key, TrainingRunReceipt, report=progress)
    if hit is not None:
        return hit
    run_dir = run_dir or home.root / "runs" / f"{plan.name}-{run_key[:12]}"
    # an earlier attempt of this run may have recorded epochs its last checkpoint does not know of;
    # only then is each epoch looked up before recording (a catalog round trip saved per epoch)
    earlier_attempt = run_dir.exists() or home.find_cached(run_key) is not None
    _prepare_run_dir(home, run_dir, run_key, progress)
    with tempfile.TemporaryDirectory() as tmp, torch_threads(plan.threads):
        base_dir = None
        if base_sha is not None:
            base_dir = Path(tmp) / "base"
            _say(progress, f"training: unpacking the base model {base_sha[:16]} (each file checked against its digest)")
            materialize_tree(home.blobs, base_sha, base_dir)  # every file verified against its digest
        parents = [
            InputRef(role="audit", sha256=audit_rid, ref="receipt"),
            InputRef(role="plan", sha256=plan_rid, ref="receipt"),
            InputRef(role="features", sha256=bound.features_sha256, ref="artifact"),
        ]
        if base_sha:
            parents.append(InputRef(role="base_model", sha256=base_sha, ref="artifact"))

        def record_epoch(epoch: int, adapter_dir: Path, record: EpochRecord) -> str:
            """The checkpoint receipt of one epoch's exported adapter (found again after a crash, never recorded twice)."""
            tree_sha, _ = put_tree(home.blobs, adapter_dir)
            key = canonical_digest({"run_key": run_key, "epoch": epoch, "tree": tree_sha})
            found = home.find_cached(key) if earlier_attempt else None
            if found:
                return found
            receipt = build_receipt(
                CheckpointReceipt,
                flow=flow,
                task="checkpoint_epoch",
                started_at=utc_now(),
                key=key,
                inputs=parents,
                subjects=[artifact(home.blobs, "checkpoint", tree_sha, TREE_MEDIA_TYPE)],
                device=device_of(backend),
                parameters=CheckpointParameters(
                    run_key=run_key,
                    epoch=epoch,
                    global_step=record.global_step,
                    cv_loss=record.cv_loss,
                    train_loss=record.train_loss,
                    bound=bound,
                ),
            )
            return home.record(receipt)

        if ranks > 1:
            _say(progress, f"training: {ranks} data-parallel ranks of {plan.backend} (each loads the model and the corpus features)")
            done = _train_on_ranks(backend, corpus, plan, base_dir, bound, run_dir, record_epoch)
        else:
            _say(progress, f"training: setting up {plan.backend} (loading the model and the corpus features)")
            setup = backend.setup(corpus, plan, base_dir)
            _say(progress, "training: set up; the first step follows")

            def on_epoch_end(epoch: int, model: torch.nn.Module, record: EpochRecord) -> str:
                out = Path(tmp) / f"epoch-{epoch}"
                backend.export(model, out)
                return record_epoch(epoch, out, record)

            from voxledger.tasks.training.loop import run_loop  # torch: only a stage that trains imports it

            result = run_loop(backend, setup.model, setup.cv_batches, plan, bound, run_dir / "checkpoints", on_epoch_end, progress)
            done = _Trained(result.state, result.trainable_parameters, result.total_parameters, setup.effective_config)
    receipt = _training_receipt(home, plan, done, bound, parents, run_key, flow=flow, started=started, device=device_of(backend))
    return record(home, receipt)


def data_parallel_ranks(backend: Any) -> int:
    """The ranks a backend trains a run on (its optional ``data_parallel_ranks()``; 1 for the others)."""
    ranks = getattr(backend, "data_parallel_ranks", None)
    return 1 if ranks is None else int(ranks())


@dataclass(frozen=True)
class _Trained:
    """What a finished run's receipt is made of, however many processes trained it."""

    state: LoopState
    trainable_parameters: int
    total_parameters: int
    effective_config: dict[str, Any]


def _train_on_ranks(
    backend: Any,
    corpus: Path,
    plan: TrainingPlan,
    base_dir: Path | None,
    bound: TrainingInputs,
    run_dir: Path,
    record_epoch: Callable[[int, Path, EpochRecord], str],
) -> _Trained:
    """A data-parallel run (the backend's ``train_ranks``; rank 0 exports each epoch's adapter and reports the
    loop's final state), then one checkpoint receipt per epoch from rank 0's adapters, recorded here in order."""
    from voxledger.tasks.training.loop import LoopState

    run = backend.train_ranks(corpus, plan, base_dir, bound, run_dir)
    history = [EpochRecord.model_validate(h) for h in run["history"]]
    state = LoopState(
        global_step=int(run["global_step"]),
        history=list(run["history"]),
        best_cv=run["best_cv_loss"],
        best_epoch=int(run["best_epoch"]),
        resumed_at=list(run["resumed_at"]),
        stop_reason=run["stop_reason"],
    )
    state.epoch_receipts = [record_epoch(r.epoch, run_dir / "epochs" / f"epoch-{r.epoch}", r) for r in history]
    return _Trained(state, int(run["trainable_parameters"]), int(run["total_parameters"]), dict(run["effective_config"]))


def _prepare_run_dir(home: Home, run_dir: Path, run_key: str, progress: Callable[[str], None] | None) -> None:
    """Make the run's folder; a folder whose recorded checkpoint no longer verifies is set aside, since
    resuming would re-use it: the run trains again from the start (same machine and build: the same
    bytes come back and heal the store)."""
    if _resume_is_damaged(home, run_dir, run_key):
        aside = run_dir.with_name(f"{run_dir.name}.damaged-{utc_now():%Y%m%dT%H%M%S}")
        run_dir.rename(aside)
        _say(progress, f"a recorded checkpoint of this run is damaged; retraining from the start ({aside.name} kept)")
    run_dir.mkdir(parents=True, exist_ok=True)


def _training_receipt(
    home: Home,
    plan: TrainingPlan,
    done: _Trained,
    bound: TrainingInputs,
    parents: list[InputRef],
    run_key: str,
    *,
    flow: str,
    started: Any,
    device: str | None = None,
) -> TrainingRunReceipt:
    """The run's receipt from the loop's final state: its best and last checkpoints, every epoch."""
    st, effective_config = done.state, done.effective_config
    ckpts = [home.receipts.read(r, CheckpointReceipt) for r in st.epoch_receipts]
    best = ckpts[st.best_epoch].subject("checkpoint")
    last = ckpts[-1].subject("checkpoint")
    receipt = build_receipt(
        TrainingRunReceipt,
        flow=flow,
        task=training_task_name(plan),
        started_at=started,
        key=run_key,
        device=device,
        subjects=[best.model_copy(update={"role": "best"}), last.model_copy(update={"role": "last"})],
        inputs=[*parents, *(InputRef(role=f"checkpoint:{i}", sha256=r, ref="receipt") for i, r in enumerate(st.epoch_receipts))],
        parameters=TrainingRunParameters(
            run_key=run_key,
            backend=plan.backend,
            mode=plan.mode,
            bound=bound,
            effective_config={"plan": json.loads(canonical_bytes(plan)), **effective_config},
        ),
        result=TrainingResult(
            epochs=tuple(EpochRecord.model_validate(h) for h in st.history),
            best_epoch=st.best_epoch,
            best_cv_loss=float(st.best_cv or 0.0),
            stop_reason=st.stop_reason or "max_epochs",  # type: ignore[arg-type]
            total_steps=st.global_step,
            resumed_at_steps=tuple(st.resumed_at),
            trainable_parameters=done.trainable_parameters,
            total_parameters=done.total_parameters,
        ),
    )
    return receipt


def _resume_is_damaged(home: Home, run_dir: Path, run_key: str) -> bool:
    """True when an epoch receipt of this run names a checkpoint whose bytes no longer verify."""
    if not run_dir.exists():
        return False
    from voxledger.stores.queries import receipts_of_run

    for rid in receipts_of_run(home.catalog, run_key):
        bad = damaged_outputs(home, home.receipts.read(rid, CheckpointReceipt))
        for sha in bad:
            home.blobs.quarantine(sha)
        if bad:
            return True
    return False


def _say(progress: Callable[[str], None] | None, message: str) -> None:
    if progress is not None:
        progress(message)


# The stage contract (tasks/stages/contract.py): two rows (train_base, train_adapter) share this
# module; each names its inputs, and ``stage_of`` tells their receipts apart.
run = run_training
verdict = never_stops


def base_inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus and the audit's receipt; no base (it trains one from scratch)."""
    return {"corpus": ctx.corpus, "audit_rid": ctx.rid("audit"), "base_sha": None}


def adapter_inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus, the audit's receipt and the base (trained here, or the imported shipped base)."""
    return {"corpus": ctx.corpus, "audit_rid": ctx.rid("audit"), "base_sha": ctx.base()}


inputs = adapter_inputs


def rerun_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``train`` flow's arguments: the corpus (checked against the audit), the audit, the plan and the base."""
    from voxledger.tasks.stages.reproduce import check_corpus, plan_ref

    r = cast(TrainingRunReceipt, prep.receipt)
    audit_rid = r.parameters.bound.audit_receipt
    check_corpus(home, home.receipts.read(audit_rid, AuditReceipt), need_corpus(corpus, prep))
    return {"corpus": str(corpus), "audit_rid": audit_rid, "plan": plan_ref(home, r, "plan"), "base_sha": r.parameters.bound.base_sha256}


def compare(h: Home, s: Home, original: TrainingRunReceipt, rerun: TrainingRunReceipt, bands: ReproductionBands) -> list[OutputComparison]:
    """The CV curve and checkpoints, the best checkpoints also probed on one prompt (on the base a LoRA run adapted)."""
    from voxledger.tasks.reproduction import compare as cmp
    from voxledger.tasks.reproduction.probe import probe_adapters

    backend, base_sha = original.parameters.backend, original.parameters.bound.base_sha256
    base = (h.blobs, base_sha) if original.parameters.mode == "lora" and base_sha is not None else None
    model = original.parameters.effective_config.get("model")
    listed = model.get("speakers") if isinstance(model, dict) else None
    speaker = str(listed[0]) if isinstance(listed, list) and listed else None

    def probe(a: str, b: str) -> tuple[str, str]:
        return probe_adapters(backend, base, (h.blobs, a), (s.blobs, b), bands, speaker=speaker)

    return cmp.compare_training(original, rerun, bands, probe)


def summary(receipt: TrainingRunReceipt) -> str:
    """Epochs, steps, the CV-loss curve's ends and why it stopped."""
    t, eff = receipt.result, receipt.parameters.effective_config
    precision = eff.get("precision_effective") if isinstance(eff, dict) else None
    return (
        f"{len(t.epochs)} epochs, {t.total_steps} steps, CV loss {t.epochs[0].cv_loss:.3f} -> "
        f"{t.best_cv_loss:.3f} (best epoch {t.best_epoch}), stop: {t.stop_reason}" + (f", {precision}" if precision else "")
    )
