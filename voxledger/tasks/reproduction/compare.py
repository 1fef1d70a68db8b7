"""Compare a re-run's receipt with the original's, output by output, under the stage's bands.

Each function takes the two typed receipts and a reader of stored bytes and returns one
``OutputComparison`` per output (a subject by role) or claim (the findings, the CV-loss curve, a
metric, the promotion decision). Identical digests are ``exact``; otherwise the stage's band
decides between ``within_bands`` and ``differs``, and the reason says which number decided it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from voxledger.schemas.audit import AuditReceipt
from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.evaluation import EvaluationReceipt
from voxledger.schemas.promotion import PromotionReceipt, PromotionResult
from voxledger.schemas.reproduction import OutputComparison, ReproductionBands, Verdict
from voxledger.schemas.training import TrainingRunReceipt

Read = Callable[[str], bytes]
Probe = Callable[[str, str], tuple[str, str]]
"""(original tree, re-run tree) -> (band GREEN/YELLOW/RED, detail): the adapters' equivalence probe."""

TIMING_METRICS = ("rtf",)
"""Observation metrics that measure the machine's speed, not the result: never compared."""


def _same(name: str, a: str | None, b: str | None, what: str) -> OutputComparison:
    return OutputComparison(name=name, original_sha256=a, rerun_sha256=b, verdict="exact", reason=f"identical {what}")


def read_either(h: Any, s: Any) -> Read:
    """A reader of stored bytes from the scratch home ``s`` when it holds them, else the original home ``h``."""
    return lambda sha: (s.blobs if s.blobs.has(sha) else h.blobs).get_bytes(sha)


def compare_outputs(original: ReceiptBase, rerun: ReceiptBase) -> list[OutputComparison]:
    """Band: none. Every output (a subject by role) must be the same bytes: the comparison of a
    deterministic stage, and the one a new stage starts from (docs/extending.md)."""
    return [
        _same(n, a, b, "bytes")
        if a == b
        else OutputComparison(name=n, original_sha256=a, rerun_sha256=b, verdict="differs", reason="bytes differ; this output has no band")
        for n, a, b in _pairs(original, rerun)
    ]


def _pairs(original: ReceiptBase, rerun: ReceiptBase) -> list[tuple[str, str | None, str | None]]:
    """(name, original digest, re-run digest) per subject; repeated roles are numbered in order (``audio:base#1``)."""

    def named(receipt: ReceiptBase) -> dict[str, str]:
        seen: dict[str, int] = {}
        out: dict[str, str] = {}
        for s in receipt.subjects:
            n = seen.get(s.role, 0)
            seen[s.role] = n + 1
            out[f"{s.role}#{n}" if n or sum(x.role == s.role for x in receipt.subjects) > 1 else s.role] = s.sha256
        return out

    a, b = named(original), named(rerun)
    return [(name, a.get(name), b.get(name)) for name in dict.fromkeys([*a, *b])]


def compare_audit(original: AuditReceipt, rerun: AuditReceipt) -> list[OutputComparison]:
    """Band: none. Outputs (manifest, audio tree) must be identical and so must the findings."""
    out = [
        _same(n, a, b, "bytes")
        if a == b
        else OutputComparison(
            name=n,
            original_sha256=a,
            rerun_sha256=b,
            verdict="differs",
            reason="bytes differ; an audit has no band (its corpus verified unchanged before the re-run, so the audit itself is not deterministic)",
        )
        for n, a, b in _pairs(original, rerun)
    ]
    fa, fb = original.result.findings, rerun.result.findings
    if fa == fb and original.result.verdict == rerun.result.verdict:
        out.append(
            OutputComparison(
                name="findings",
                verdict="exact",
                reason=f"identical findings ({len(fa)}) and verdict {rerun.result.verdict}",
            )
        )
    else:
        only_a = [f.code for f in fa if f not in fb]
        only_b = [f.code for f in fb if f not in fa]
        out.append(
            OutputComparison(
                name="findings",
                verdict="differs",
                reason=f"findings differ: {len(only_a)} only in the original (e.g. {only_a[:3]}), {len(only_b)} only in the re-run (e.g. {only_b[:3]}); "
                f"verdict {original.result.verdict} -> {rerun.result.verdict}",
            )
        )
    return out


def cv_curve(original: TrainingRunReceipt, rerun: TrainingRunReceipt, bands: ReproductionBands) -> OutputComparison:
    """The CV-loss curve, epoch by epoch, against ``cv_loss_rel_tol``; the best epoch must be the same one."""
    a = [e.cv_loss for e in original.result.epochs]
    b = [e.cv_loss for e in rerun.result.epochs]
    if a == b:
        return OutputComparison(name="cv_loss_curve", verdict="exact", reason=f"identical CV loss in all {len(a)} epoch(s)")
    if len(a) != len(b):
        return OutputComparison(
            name="cv_loss_curve", verdict="differs", reason=f"{len(a)} epoch(s) in the original, {len(b)} in the re-run (stopping changed)"
        )
    devs = [abs(y - x) / abs(x) if x else abs(y - x) for x, y in zip(a, b, strict=True)]
    worst = max(range(len(devs)), key=devs.__getitem__)
    tol, which = cv_band(original, bands)
    detail = f"largest relative CV-loss change {devs[worst]:.2e} at epoch {worst} ({a[worst]:.6f} -> {b[worst]:.6f}); band {tol:.0e}{which}"
    if original.result.best_epoch != rerun.result.best_epoch:
        return OutputComparison(
            name="cv_loss_curve",
            verdict="differs",
            reason=f"best epoch {original.result.best_epoch} -> {rerun.result.best_epoch}; {detail}",
        )
    verdict: Verdict = "within_bands" if devs[worst] <= tol else "differs"
    return OutputComparison(name="cv_loss_curve", verdict=verdict, reason=detail)


def cv_band(original: TrainingRunReceipt, bands: ReproductionBands) -> tuple[float, str]:
    """The CV-loss band of the original run's recorded effective precision, and the words saying which one it is."""
    precision = original.parameters.effective_config.get("precision_effective")
    if isinstance(precision, str) and precision in bands.cv_loss_rel_tol_by_precision:
        return max(bands.cv_loss_rel_tol, bands.cv_loss_rel_tol_by_precision[precision]), f" (the band of {precision} runs)"
    return bands.cv_loss_rel_tol, ""


def compare_training(
    original: TrainingRunReceipt, rerun: TrainingRunReceipt, bands: ReproductionBands, probe: Probe | None
) -> list[OutputComparison]:
    """Band: the CV-loss curve, and the equivalence probe of both models (adapters on their base) on a fixed prompt."""
    curve = cv_curve(original, rerun, bands)
    out: list[OutputComparison] = []
    for name, a, b in _pairs(original, rerun):
        if a == b:
            out.append(_same(name, a, b, "checkpoint tree"))
            continue
        verdict, reason = curve.verdict, f"tree differs; {curve.reason}"
        if verdict == "exact":  # same curve, other bytes: the curve alone is no band for the weights
            verdict = "within_bands"
        if probe is not None and a is not None and b is not None:
            band, detail = probe(a, b)
            reason += f"; probe {band} ({detail})"
            if band == "RED":
                verdict = "differs"
        out.append(OutputComparison(name=name, original_sha256=a, rerun_sha256=b, verdict=verdict, reason=reason))
    return [*out, curve]


def _strip(doc: Any, fields: tuple[str, ...]) -> Any:
    rows = [{k: v for k, v in row.items() if k not in fields} for row in doc]
    return [r for r in rows if r.get("metric") not in TIMING_METRICS]


def compare_evaluation(
    original: EvaluationReceipt, rerun: EvaluationReceipt, read: Read, bands: ReproductionBands, prefix: str = ""
) -> list[OutputComparison]:
    """Band: each metric's mean within the original's interval, and per-row agreement of validity and content gate.

    Generation rows and observations are compared with measured times left out (``timing_fields``
    and the ``rtf`` metric): they measure the machine, not the result.
    """
    metrics = _metric_claims(original, rerun, prefix)
    agreement = _agreement(original, rerun, read, bands, prefix)
    failed = {c.name[len(prefix) :].split(":")[1] for c in metrics if c.verdict == "differs"}  # metric:<candidate>:<metric>
    out: list[OutputComparison] = []
    for name, a, b in _pairs(original, rerun):
        if a == b:
            out.append(_same(prefix + name, a, b, "bytes"))
        elif (
            name in ("generations", "observations")
            and a
            and b
            and _strip(json.loads(read(a)), bands.timing_fields) == _strip(json.loads(read(b)), bands.timing_fields)
        ):
            out.append(
                OutputComparison(
                    name=prefix + name,
                    original_sha256=a,
                    rerun_sha256=b,
                    verdict="exact",
                    reason=f"identical once measured times ({', '.join(bands.timing_fields)}, rtf) are left out",
                )
            )
        else:
            candidate = name.split(":", 1)[1].split("#")[0] if name.startswith("audio:") else None
            bad = (candidate in failed) if candidate else bool(failed)
            verdict: Verdict = "differs" if bad or agreement.verdict == "differs" else "within_bands"
            scope = f"candidate {candidate}'s" if candidate else "the"
            why = f"{scope} metrics leave the original's intervals" if bad else f"{scope} metrics stay within the original's intervals"
            out.append(
                OutputComparison(
                    name=prefix + name,
                    original_sha256=a,
                    rerun_sha256=b,
                    verdict=verdict,
                    reason=f"bytes differ; {why}; {agreement.reason}",
                )
            )
    return [*out, agreement, *metrics]


def _metric_claims(original: EvaluationReceipt, rerun: EvaluationReceipt, prefix: str) -> list[OutputComparison]:
    out: list[OutputComparison] = []
    theirs = {s.candidate: s for s in rerun.result.summaries}
    for summary in original.result.summaries:
        mine = theirs.get(summary.candidate)
        for metric, interval in sorted(summary.overall.items()):
            if metric in TIMING_METRICS:
                continue
            name = f"{prefix}metric:{summary.candidate}:{metric}"
            now = mine.overall.get(metric) if mine is not None else None
            if now is None:
                out.append(OutputComparison(name=name, verdict="differs", reason="not measured in the re-run"))
            elif now.mean == interval.mean:
                out.append(OutputComparison(name=name, verdict="exact", reason=f"identical mean {now.mean:.6g}"))
            elif interval.low is None or interval.high is None:
                out.append(
                    OutputComparison(
                        name=name,
                        verdict="differs",
                        reason=f"mean {interval.mean:.6g} -> {now.mean:.6g}; the original recorded no interval ({interval.note or 'none'}), so no band applies",
                    )
                )
            else:
                inside = interval.low <= now.mean <= interval.high
                out.append(
                    OutputComparison(
                        name=name,
                        verdict="within_bands" if inside else "differs",
                        reason=f"mean {interval.mean:.6g} -> {now.mean:.6g} (delta {now.mean - interval.mean:+.3g}); original interval [{interval.low:.6g}, {interval.high:.6g}]",
                    )
                )
    return out


def _agreement(
    original: EvaluationReceipt, rerun: EvaluationReceipt, read: Read, bands: ReproductionBands, prefix: str
) -> OutputComparison:
    """Share of (candidate, prompt, seed) rows whose validity and content-gate outcome are the same in both runs."""

    def outcomes(receipt: EvaluationReceipt) -> dict[tuple[str, str, int], tuple[bool, float | None]]:
        gen = json.loads(read(receipt.subject("generations").sha256))
        obs = json.loads(read(receipt.subject("observations").sha256))
        gate = {(o["candidate"], o["prompt_id"], o["seed"]): o["value"] for o in obs if o["metric"] == "content_gate_pass"}
        return {
            (g["candidate"], g["prompt_id"], g["seed"]): (g["valid"], gate.get((g["candidate"], g["prompt_id"], g["seed"]))) for g in gen
        }

    a, b = outcomes(original), outcomes(rerun)
    keys = sorted(set(a) | set(b))
    agree = [k for k in keys if a.get(k) == b.get(k)]
    share = len(agree) / len(keys) if keys else 1.0
    reason = f"{len(agree)}/{len(keys)} rows agree on validity and content gate (band: at least {bands.prompt_agreement_min:.0%})"
    verdict: Verdict = "exact" if share == 1.0 else ("within_bands" if share >= bands.prompt_agreement_min else "differs")
    return OutputComparison(name=f"{prefix}prompt_agreement", verdict=verdict, reason=reason)


def compare_promotion(
    original: PromotionReceipt,
    rerun: PromotionReceipt,
    read: Read,
    gate: tuple[EvaluationReceipt, EvaluationReceipt] | None,
    bands: ReproductionBands,
) -> list[OutputComparison]:
    """Band: the same decision (promoted challenger, its tree, every rule's pass/fail); rule values may move
    within the gate evaluation's own bands."""
    ra, rb = original.result, rerun.result
    if _decision(ra) != _decision(rb):
        claim = OutputComparison(
            name="decision", verdict="differs", reason=f"promoted {ra.promoted} -> {rb.promoted}, or a rule's outcome or alias move changed"
        )
    elif _values(ra) == _values(rb):
        claim = OutputComparison(name="decision", verdict="exact", reason=f"identical decision (promoted {ra.promoted}) and rule values")
    else:
        claim = OutputComparison(
            name="decision",
            verdict="within_bands",
            reason=f"same decision (promoted {ra.promoted}); rule values moved: {_values(ra)} -> {_values(rb)}",
        )
    out = [claim]
    if gate is not None:
        out += compare_evaluation(gate[0], gate[1], read, bands, prefix="gate:")
    return out


def _decision(r: PromotionResult) -> tuple[Any, ...]:
    """What a promotion decided: the promoted challenger, each challenger's tree and rule outcomes, the alias moves."""
    return (
        r.promoted,
        [(c.name, c.tree_sha256, [v.passed for v in c.rules]) for c in r.challengers],
        [(m.alias, m.target_sha256) for m in r.moves],
    )


def _values(r: PromotionResult) -> list[list[float | None]]:
    return [[v.value for v in c.rules] for c in r.challengers]


def overall(comparisons: list[OutputComparison], environment_differs: bool) -> tuple[Verdict, str]:
    """The receipt's verdict: the worst comparison, and never ``exact`` when the environment differed."""
    differs = [c.name for c in comparisons if c.verdict == "differs"]
    banded = [c.name for c in comparisons if c.verdict == "within_bands"]
    if differs:
        return "differs", f"{len(differs)} output(s) outside their band: {', '.join(differs[:6])}"
    if banded:
        return "within_bands", f"{len(banded)} output(s) not identical but within their band: {', '.join(banded[:6])}"
    if environment_differs:
        return (
            "within_bands",
            "every output identical, but the environment differed: bit-identity is certified only for the recorded environment",
        )
    return "exact", f"all {len(comparisons)} output(s) and claims identical under the recorded environment"
