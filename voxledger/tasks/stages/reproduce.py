"""``reproduce`` as plain functions: check a receipt can be re-run here, compare, record the verdict.

The flow (``flows/reproduce.py``) calls ``prepare``, seeds a scratch home, re-runs the stage there
through the stage's own flow (its arguments and comparison from ``tasks/stages/reproduce_registry.py``,
by the stage row's ``comparison``), then calls ``record_reproduction``. Nothing here
writes to the original home except the reproduction receipt (and the re-run's receipt document,
stored as that receipt's subject).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from voxledger.schemas.audit import AuditReceipt
from voxledger.schemas.base import Environment, InputRef, ReceiptBase, utc_now
from voxledger.schemas.canonical import canonical_bytes, canonical_digest
from voxledger.schemas.core import PlanReceipt
from voxledger.schemas.equivalence_receipt import EquivalenceReceipt
from voxledger.schemas.errors import ReceiptError, ReproductionError
from voxledger.schemas.evaluation import EvaluationReceipt
from voxledger.schemas.package import PackageReceipt
from voxledger.schemas.reproduction import (
    REPRODUCIBLE_KINDS,
    EnvironmentDifference,
    OutputComparison,
    ReproductionBands,
    ReproductionParameters,
    ReproductionReceipt,
    ReproductionResult,
)
from voxledger.schemas.stages import PIPELINE, PIPELINE_RECEIPT, plan_models, resolve, rows_writing
from voxledger.schemas.training import TrainingPlan, TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.stores.identity import environment
from voxledger.stores.scratch import SeedReport, verify_inputs
from voxledger.stores.trees import load_manifest
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.receipting import artifact, build_receipt
from voxledger.tasks.reproduction import compare as cmp
from voxledger.tasks.stage import StageOutcome, record

PLAN_MODELS: dict[str, type[BaseModel]] = plan_models()
"""Every stage plan model by its plan kind (what a plan receipt records), from the stage table."""
RECEIPT_MEDIA_TYPE = "application/json"


@dataclass(frozen=True)
class Preparation:
    """A receipt found fit to re-run here: its stage, how this environment differs, what was verified."""

    rid: str
    receipt: ReceiptBase
    stage: str
    differences: tuple[EnvironmentDifference, ...]
    code_drift: bool
    threads: int | None
    objects_checked: int


def stage_of(receipt: ReceiptBase) -> str:
    """The stage-table name of the stage that wrote ``receipt`` (``pipeline`` for a pipeline run).

    Stages writing the same receipt kind share a module, whose ``stage_of(receipt)`` tells them apart.
    """
    kind = receipt.kind  # type: ignore[attr-defined]
    if kind == PIPELINE_RECEIPT:
        return PIPELINE
    rows = rows_writing(kind)
    if not rows:
        raise ReproductionError(f"no stage writes {kind} receipts; the stage table (schemas/stages.py) lists every stage")
    if len(rows) == 1:
        return rows[0].name
    name: str = resolve(f"{rows[0].module}:stage_of")(receipt)
    return name


def environment_differences(recorded: Environment, here: Environment) -> list[EnvironmentDifference]:
    """Every recorded environment fact this process does not share (the code by its source digest)."""
    out = [
        EnvironmentDifference(field=name, recorded=a, here=b)
        for name, a, b in (
            ("python", recorded.python, here.python),
            ("platform", recorded.platform, here.platform),
            ("torch", recorded.torch, here.torch),
            ("cuda", recorded.cuda, here.cuda),
            ("code", recorded.code.source_sha256, here.code.source_sha256),
        )
        if a != b
    ]
    for name in sorted(set(recorded.packages) | set(here.packages)):
        if name != "voxledger" and recorded.packages.get(name) != here.packages.get(name):
            out.append(EnvironmentDifference(field=f"packages.{name}", recorded=recorded.packages.get(name), here=here.packages.get(name)))
    return out


def prepare(home: Home, rid: str, *, allow_code_drift: bool, threads: int | None) -> Preparation:
    """Check that receipt ``rid`` can be re-run here.

    Raises:
        ReproductionError: the kind is not covered, an input is missing or damaged (named), or the
            code differs from the recorded code and ``allow_code_drift`` is false.
    """
    receipt = home.receipts.read(rid)
    kind = receipt.kind  # type: ignore[attr-defined]
    if kind not in REPRODUCIBLE_KINDS:
        raise ReproductionError(
            f"receipt {rid[:12]} is a {kind} receipt; `voxledger reproduce` re-runs {', '.join(REPRODUCIBLE_KINDS)} receipts"
        )
    diffs = environment_differences(receipt.environment, environment())
    drift = any(d.field == "code" for d in diffs)
    if drift and not allow_code_drift:
        raise ReproductionError(
            f"receipt {rid[:12]} was written by code {receipt.environment.code.source_sha256[:12]} "
            f"(commit {receipt.environment.code.git_commit or 'unknown'}), this is code {environment().code.source_sha256[:12]}: "
            "a re-run would test the new code, not the recorded one. Check out the recorded commit, or pass --allow-code-drift "
            "(the reproduction receipt records it)"
        )
    recorded_threads = _recorded_threads(home, receipt)
    if threads is not None and threads != recorded_threads:
        diffs.append(EnvironmentDifference(field="torch_threads", recorded=_text(recorded_threads), here=str(threads)))
    checked = verify_inputs(home, receipt, rid, trees=own_trees(receipt))
    return Preparation(rid, receipt, stage_of(receipt), tuple(diffs), drift, threads, checked)


def own_trees(receipt: ReceiptBase) -> tuple[str, ...]:
    """Tree inputs no earlier receipt wrote as an output (an equivalence receipt's stage dumps): checked
    whole before the re-run, and given to the scratch home whole."""
    if isinstance(receipt, EquivalenceReceipt):
        return (receipt.parameters.reference_tree_sha256, receipt.parameters.candidate_tree_sha256)
    return ()


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _recorded_threads(home: Home, receipt: ReceiptBase) -> int | None:
    """The torch thread count the original ran with, where its kind records it (a training plan's ``threads``)."""
    if isinstance(receipt, TrainingRunReceipt):
        return plan_ref(home, receipt, "plan").validated(TrainingPlan).threads
    if isinstance(receipt, PackageReceipt):  # the reload check's count is the one packaging ran with
        return receipt.result.reload.threads
    return None


def plan_ref(home: Home, receipt: ReceiptBase, role: str) -> PlanRef:
    """The registered plan a receipt names under input ``role``, as the reference its flow takes."""
    plan_receipt = home.receipts.read(receipt.input(role).sha256, PlanReceipt)
    p = plan_receipt.parameters
    document = json.loads(home.blobs.get_bytes(p.plan_sha256))
    ref = PlanRef(source_name=p.source_name, kind=p.plan_kind, document=document, sha256=p.plan_sha256)
    ref.validated(PLAN_MODELS[p.plan_kind])  # the stored plan still validates and hashes to its digest
    return ref


def check_corpus(home: Home, audit: AuditReceipt, corpus: Path) -> None:
    """Refuse ``corpus`` unless its manifest and audio hash to what ``audit`` recorded, naming the first file that differs."""
    from voxledger.tasks.corpus.manifests import load_corpus
    from voxledger.tasks.corpus.sources import audio_digests, audio_tree

    loaded = load_corpus(corpus)
    if canonical_digest(loaded.utterances) != audit.parameters.manifest_sha256:
        raise ReproductionError(
            f"corpus {corpus}: its manifest is {canonical_digest(loaded.utterances)[:12]}, the audit recorded "
            f"{audit.parameters.manifest_sha256[:12]}: give the corpus the original run read"
        )
    digests, paths = audio_digests(loaded, home.stat_cache)
    tree = audio_tree(loaded, digests, paths)
    if canonical_digest(tree) != audit.parameters.audio_tree_sha256:
        then = {e.path: e.sha256 for e in load_manifest(home.blobs, audit.parameters.audio_tree_sha256).entries}
        changed = sorted(e.path for e in tree.entries if then.get(e.path) != e.sha256)
        raise ReproductionError(
            f"corpus {corpus}: audio file {changed[0] if changed else '?'} (and {max(len(changed) - 1, 0)} more) does not hash to what "
            f"the audit recorded (audio tree {audit.parameters.audio_tree_sha256[:12]}): give the corpus the original run read"
        )


def rerun_environment(prep: Preparation, rerun: ReceiptBase) -> list[EnvironmentDifference]:
    """Differences only the re-run shows: the device it computed on (a cosyvoice3 step on ``cuda:0`` re-run on the
    CPU: bands, never bytes) and a training run's effective precision (native bf16 or not)."""
    out = []
    if prep.receipt.environment.device != rerun.environment.device:
        out.append(EnvironmentDifference(field="device", recorded=prep.receipt.environment.device, here=rerun.environment.device))
    if isinstance(prep.receipt, TrainingRunReceipt) and isinstance(rerun, TrainingRunReceipt):
        a = prep.receipt.parameters.effective_config.get("precision_effective")
        b = rerun.parameters.effective_config.get("precision_effective")
        if a != b:
            out.append(EnvironmentDifference(field="precision", recorded=_text(a), here=_text(b)))
    return out


def record_reproduction(
    home: Home,
    prep: Preparation,
    rerun_id: str | None,
    rerun: ReceiptBase | None,
    comparisons: list[OutputComparison],
    *,
    seeded: SeedReport,
    bands: ReproductionBands,
    wall_s: float,
    started: Any,
    flow: str = "reproduce",
    trust: StatCacheTrust | None = None,
) -> StageOutcome[ReproductionReceipt]:
    """Write the reproduction receipt (and the re-run's receipt document it names) into the original home;
    ``rerun`` None: the re-run failed before recording one (``comparisons`` say how); ``trust``: how the
    stat caches were used (recorded as ``stat_cache_trusted`` and ``deep``)."""
    diffs = (*prep.differences, *(rerun_environment(prep, rerun) if rerun is not None else ()))
    verdict, reason = cmp.overall(comparisons, environment_differs=bool(diffs))
    if diffs:
        reason += "; environment: " + ", ".join(f"{d.field} {d.recorded} -> {d.here}" for d in diffs)
    subjects = []
    if rerun is not None:
        stored = home.blobs.put_bytes(canonical_bytes(_document(rerun)))
        if stored != rerun_id:
            raise ReceiptError(f"the re-run's receipt hashes to {stored}, not its id {rerun_id}; a defect")
        subjects.append(artifact(home.blobs, "rerun_receipt", stored, RECEIPT_MEDIA_TYPE))
    receipt = build_receipt(
        ReproductionReceipt,
        flow=flow,
        task="record_reproduction",
        started_at=started,
        subjects=subjects,
        inputs=[InputRef(role="original", sha256=prep.rid, ref="receipt")],
        parameters=ReproductionParameters(
            original=prep.rid,
            original_kind=prep.receipt.kind,  # type: ignore[attr-defined]
            rerun=rerun_id,
            stage=prep.stage,
            code_drift_allowed=prep.code_drift,
            environment_differences=diffs,
            torch_threads=prep.threads,
            bands=bands,
            objects_seeded=seeded.objects,
            objects_unavailable=seeded.unavailable,
            **_trust_fields(trust),
        ),
        result=ReproductionResult(verdict=verdict, reason=reason, comparisons=tuple(comparisons), rerun_wall_s=round(wall_s, 3)),
    )
    return record(home, receipt)


def record_pipeline_reproduction(
    home: Home,
    prep: Preparation,
    stages: list[tuple[str, str, str, ReproductionReceipt]],
    not_rerun: tuple[str, ...],
    *,
    wall_s: float,
    started: Any,
    flow: str = "reproduce",
    trust: StatCacheTrust | None = None,
) -> StageOutcome[ReproductionReceipt]:
    """Record a pipeline run's reproduction: each stage's verdict (its own reproduction, an input here), the worst one overall.

    ``stages`` holds (stage, original stage receipt id, reproduction receipt id, reproduction) in run order.
    """
    from voxledger.tasks.reproduction.pipeline import stage_comparison

    comparisons = [stage_comparison(stage, original, rid, r) for stage, original, rid, r in stages]
    verdict, reason = cmp.overall(comparisons, environment_differs=bool(prep.differences))
    if prep.differences:
        reason += "; environment: " + ", ".join(f"{d.field} {d.recorded} -> {d.here}" for d in prep.differences)
    if not_rerun:
        reason += f"; not re-run (outside the verdict): {'; '.join(not_rerun)}"
    receipt = build_receipt(
        ReproductionReceipt,
        flow=flow,
        task="record_reproduction",
        started_at=started,
        subjects=[],
        inputs=[
            InputRef(role="original", sha256=prep.rid, ref="receipt"),
            *(InputRef(role=f"reproduction:{stage}", sha256=rid, ref="receipt") for stage, _, rid, _ in stages),
        ],
        parameters=ReproductionParameters(
            original=prep.rid,
            original_kind=prep.receipt.kind,  # type: ignore[attr-defined]
            rerun=None,
            stage=prep.stage,
            code_drift_allowed=prep.code_drift,
            environment_differences=prep.differences,
            torch_threads=prep.threads,
            bands=ReproductionBands(),
            objects_seeded=sum(r.parameters.objects_seeded for *_, r in stages),
            objects_unavailable=sum(r.parameters.objects_unavailable for *_, r in stages),
            stages_not_rerun=not_rerun,
            **_trust_fields(trust),
        ),
        result=ReproductionResult(verdict=verdict, reason=reason, comparisons=tuple(comparisons), rerun_wall_s=round(wall_s, 3)),
    )
    return record(home, receipt)


@dataclass(frozen=True)
class StatCacheTrust:
    """How a reproduction used the stat caches: files they vouched for, and whether it trusted none (``--deep``)."""

    vouched: int
    deep: bool


def _trust_fields(trust: StatCacheTrust | None) -> dict[str, Any]:
    return {} if trust is None else {"stat_cache_trusted": trust.vouched, "deep": trust.deep}


def _document(receipt: ReceiptBase) -> dict[str, Any]:
    from voxledger.stores.receipts import receipt_document

    return receipt_document(receipt)


def now() -> Any:
    """The time a reproduction starts (its receipt's ``started_at``)."""
    return utc_now()


def package_evaluations(manifest: Any, contents: dict[str, bytes]) -> list[tuple[str, bool]]:
    """(evaluation receipt id, whether it evaluated this package's adapter) for each evaluation a
    verified package binds: the adapter tree digest is recomputed from the package's own
    ``adapter/`` members and looked for among the evaluation's resolved candidates."""
    from voxledger.stores.receipts import validate_document
    from voxledger.stores.trees import TreeEntry, TreeManifest, manifest_bytes

    entries = tuple(
        TreeEntry(path=m.path.removeprefix("adapter/"), size_bytes=m.size_bytes, sha256=m.sha256, executable=False)
        for m in sorted(manifest.members, key=lambda m: m.path)
        if m.path.startswith("adapter/")
    )
    tree = canonical_digest_bytes(manifest_bytes(TreeManifest(entries=entries)))
    out: list[tuple[str, bool]] = []
    for rid in manifest.binding.evaluation_receipts:
        doc = json.loads(contents[f"receipts/{rid}.json"])
        evaluation = validate_document(doc, source=f"package receipt {rid}")
        bound = isinstance(evaluation, EvaluationReceipt) and any(c.artifact_sha256 == tree for c in evaluation.parameters.candidates)
        out.append((rid, bound))
    return out


def canonical_digest_bytes(data: bytes) -> str:
    """sha256 of bytes (a tree manifest's digest is the digest of its canonical bytes)."""
    import hashlib

    return hashlib.sha256(data).hexdigest()
