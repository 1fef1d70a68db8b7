"""How ``reproduce`` re-runs and compares each stage's receipt: a closed registry keyed by its row's ``comparison``.

A stage row (``schemas/stages.py``) names its comparison; ``REPRODUCTIONS`` maps each name to the
stage flow's arguments recovered from the receipt and its parents, and to the comparison of the
re-run's outputs with the original's under the reproduction bands. ``voxledger reproduce`` looks
both up through the row of the stage that wrote the receipt, never by the stage's name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from voxledger.schemas.audit import AuditReceipt
from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.core import PlanReceipt
from voxledger.schemas.equivalence import EquivalencePlan
from voxledger.schemas.equivalence_receipt import EquivalenceReceipt
from voxledger.schemas.errors import ReproductionError
from voxledger.schemas.evaluation import EvaluationPlan, EvaluationReceipt
from voxledger.schemas.package import PackageReceipt
from voxledger.schemas.pipeline import PipelineRunReceipt
from voxledger.schemas.promotion import PromotionReceipt
from voxledger.schemas.reproduction import OutputComparison, ReproductionBands
from voxledger.schemas.stages import Comparison, stage_row
from voxledger.schemas.training import TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.reproduction import compare as cmp
from voxledger.tasks.stages.reproduce import Preparation, check_corpus, plan_ref

Arguments = Callable[[Home, Preparation, "Path | None"], dict[str, Any]]
Compare = Callable[[Home, Home, Any, Any, ReproductionBands], list[OutputComparison]]


@dataclass(frozen=True)
class Reproduction:
    """A stage's re-run: its flow's arguments besides ``home`` (``arguments(home, prep, corpus)``, raising
    ReproductionError when the corpus is missing or not the one read), and the comparison of the two
    receipts (``compare(original home, scratch home, original, rerun, bands)``)."""

    arguments: Arguments
    compare: Compare


def need_corpus(corpus: Path | None, prep: Preparation) -> Path:
    """The corpus folder given with ``--corpus``; ReproductionError when the stage read one and none was given."""
    if corpus is None:
        raise ReproductionError(
            f"receipt {prep.rid[:12]} ({prep.stage}) read a corpus, and receipts record corpora by digest, never by path: "
            "give the corpus folder with --corpus (it is checked against the recorded digests)"
        )
    return corpus


def check_manifest_files(audit: AuditReceipt, rid: str, corpus: Path) -> None:
    """Refuse ``corpus`` unless its manifest files hash to the ones the audit read."""
    from voxledger.stores.hashing import sha256_file
    from voxledger.tasks.corpus.manifests import load_corpus

    loaded = load_corpus(corpus)
    recorded = {i.sha256 for i in audit.inputs if i.role == "manifest_file"}
    now = {f.relative_to(loaded.root).as_posix(): sha256_file(f) for f in loaded.manifest_files}
    changed = sorted(name for name, sha in now.items() if sha not in recorded)
    if changed or len(set(now.values())) != len(recorded):
        raise ReproductionError(
            f"corpus {corpus}: manifest file(s) {changed or sorted(now)} differ from the ones the audit read "
            f"({len(recorded)} recorded by digest): this is not the corpus of receipt {rid[:12]}; give the original corpus"
        )


def _read_either(h: Home, s: Home) -> Callable[[str], bytes]:
    return lambda sha: (s.blobs if s.blobs.has(sha) else h.blobs).get_bytes(sha)


def audit_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``audit`` flow's arguments: the corpus (its manifest files checked) and the recorded policy."""
    r = cast(AuditReceipt, prep.receipt)
    check_manifest_files(r, prep.rid, need_corpus(corpus, prep))
    return {"corpus": str(corpus), "plan": plan_ref(home, r, "policy")}


def training_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``train`` flow's arguments: the corpus (checked against the audit), the audit, the plan and the base."""
    r = cast(TrainingRunReceipt, prep.receipt)
    audit_rid = r.parameters.bound.audit_receipt
    check_corpus(home, home.receipts.read(audit_rid, AuditReceipt), need_corpus(corpus, prep))
    return {"corpus": str(corpus), "audit_rid": audit_rid, "plan": plan_ref(home, r, "plan"), "base_sha": r.parameters.bound.base_sha256}


def promotion_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``promote`` flow's arguments: the corpus (checked against the run's audit), the training run and the policy."""
    r = cast(PromotionReceipt, prep.receipt)
    run = home.receipts.read(r.parameters.training_run, TrainingRunReceipt)
    check_corpus(home, home.receipts.read(run.parameters.bound.audit_receipt, AuditReceipt), need_corpus(corpus, prep))
    return {"corpus": str(corpus), "run_rid": r.parameters.training_run, "plan": plan_ref(home, r, "policy")}


def evaluation_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``evaluate`` flow's arguments: the corpus, the plan and the bindings it ran with."""
    r = cast(EvaluationReceipt, prep.receipt)
    ref = plan_ref(home, r, "plan")
    return {"corpus": str(need_corpus(corpus, prep)), "plan": ref, "bindings": bindings_of(r, ref.validated(EvaluationPlan))}


def bindings_of(receipt: EvaluationReceipt, plan: EvaluationPlan) -> dict[str, str]:
    """The ``--bind NAME=DIGEST`` pairs the evaluation ran with, from its resolved candidates."""
    resolved = {c.name: c for c in receipt.parameters.candidates}
    out: dict[str, str] = {}
    for c in plan.candidates:
        got = resolved.get(c.name)
        for ref, sha in ((c.artifact, got.artifact_sha256 if got else None), (c.base, got.base_sha256 if got else None)):
            if ref and ref.startswith("input:") and sha:
                out[ref.removeprefix("input:")] = sha
    return out


def package_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``package`` flow's arguments: the recorded run, checkpoint, bound receipts and probe seed (never published)."""
    from voxledger.tasks.stages.package import PROBE_TEXT

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


def equivalence_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``equivalence`` flow's compare arguments: the recorded dump trees, runtimes and plan (by reference, under its file name)."""
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


def compare_audits(h: Home, s: Home, original: AuditReceipt, rerun: AuditReceipt, bands: ReproductionBands) -> list[OutputComparison]:
    return cmp.compare_audit(original, rerun)


def compare_trainings(
    h: Home, s: Home, original: TrainingRunReceipt, rerun: TrainingRunReceipt, bands: ReproductionBands
) -> list[OutputComparison]:
    """The CV curve and checkpoints, the best checkpoints also probed on one prompt (on the base a LoRA run adapted)."""
    from voxledger.tasks.reproduction.probe import probe_adapters

    backend, base_sha = original.parameters.backend, original.parameters.bound.base_sha256
    base = (h.blobs, base_sha) if original.parameters.mode == "lora" and base_sha is not None else None
    model = original.parameters.effective_config.get("model")
    listed = model.get("speakers") if isinstance(model, dict) else None
    speaker = str(listed[0]) if isinstance(listed, list) and listed else None

    def probe(a: str, b: str) -> tuple[str, str]:
        return probe_adapters(backend, base, (h.blobs, a), (s.blobs, b), bands, speaker=speaker)

    return cmp.compare_training(original, rerun, bands, probe)


def compare_promotions(
    h: Home, s: Home, original: PromotionReceipt, rerun: PromotionReceipt, bands: ReproductionBands
) -> list[OutputComparison]:
    """The decision and its claims, each gate evaluation read from its own home."""
    gate = (
        h.receipts.read(original.parameters.evaluation, EvaluationReceipt),
        s.receipts.read(rerun.parameters.evaluation, EvaluationReceipt),
    )
    return cmp.compare_promotion(original, rerun, _read_either(h, s), gate, bands)


def compare_evaluations(
    h: Home, s: Home, original: EvaluationReceipt, rerun: EvaluationReceipt, bands: ReproductionBands
) -> list[OutputComparison]:
    return cmp.compare_evaluation(original, rerun, _read_either(h, s), bands)


def compare_packages(h: Home, s: Home, original: PackageReceipt, rerun: PackageReceipt, bands: ReproductionBands) -> list[OutputComparison]:
    """The package members, reload and merged-export checks, and the two equivalence receipts when both were recorded."""
    from voxledger.tasks.reproduction.packaging import compare_package

    ea, eb = original.result.equivalence_receipt, rerun.result.equivalence_receipt
    pair = (h.receipts.read(ea, EquivalenceReceipt), s.receipts.read(eb, EquivalenceReceipt)) if ea and eb else None
    return compare_package(original, rerun, (h.blobs.path_of, s.blobs.path_of), pair)


def compare_equivalences(
    h: Home, s: Home, original: EquivalenceReceipt, rerun: EquivalenceReceipt, bands: ReproductionBands
) -> list[OutputComparison]:
    from voxledger.tasks.reproduction.packaging import compare_equivalence

    return compare_equivalence(original, rerun)


REPRODUCTIONS: dict[Comparison, Reproduction] = {
    "audit": Reproduction(audit_arguments, compare_audits),
    "training": Reproduction(training_arguments, compare_trainings),
    "promotion": Reproduction(promotion_arguments, compare_promotions),
    "evaluation": Reproduction(evaluation_arguments, compare_evaluations),
    "package": Reproduction(package_arguments, compare_packages),
    "equivalence": Reproduction(equivalence_arguments, compare_equivalences),
}
"""Every ``Comparison`` name, once (a test checks the keys against the Literal)."""


def reproduction_of(prep: Preparation) -> Reproduction:
    """The re-run and comparison of the stage that wrote the prepared receipt (ReproductionError: none)."""
    row = stage_row(prep.stage)
    if row is None or row.comparison is None:
        raise ReproductionError(f"receipt {prep.rid[:12]}: no re-run for stage {prep.stage} ({prep.receipt.kind})")  # type: ignore[attr-defined]
    return REPRODUCTIONS[row.comparison]


def stage_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The stage flow's arguments besides ``home``, recovered from the receipt and its parents.

    Raises ReproductionError when the stage reads a corpus and ``corpus`` is not given or is not
    the corpus the original read (naming what differs).
    """
    if isinstance(prep.receipt, PipelineRunReceipt):
        need_corpus(corpus, prep)  # its audit, training, promotion and evaluation stages read it
        return {}
    return reproduction_of(prep).arguments(home, prep, corpus)


def compare(h: Home, s: Home, prep: Preparation, rerun: ReceiptBase, bands: ReproductionBands) -> list[OutputComparison]:
    """The re-run's outputs compared with the original's (``h``: the original home, ``s``: the scratch home)."""
    if rerun.kind != prep.receipt.kind:  # type: ignore[attr-defined]
        raise ReproductionError(
            f"receipt {prep.rid[:12]} is a {prep.receipt.kind} receipt but its re-run recorded a {rerun.kind} receipt"  # type: ignore[attr-defined]
        )
    return reproduction_of(prep).compare(h, s, prep.receipt, rerun, bands)
