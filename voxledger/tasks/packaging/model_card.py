"""A Hugging Face model card (``README.md``) for an exported adapter, written from its package's receipts.

Every statement on the card is read from a receipt the package binds (training run, audit,
evaluations, promotion) or from its manifest; nothing is typed by hand, so the card cannot claim
more than the evidence. Built with huggingface_hub's ``ModelCard``/``ModelCardData``: the metadata
block (``base_model``, ``library_name: peft``, ``language``, ``model-index`` results) is theirs.
The text is a pure function of the package, so the same package gives the same card bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from voxledger.schemas.audit import AuditReceipt
from voxledger.schemas.evaluation import Comparison, EvaluationReceipt, Interval
from voxledger.schemas.package import PackageManifest
from voxledger.schemas.promotion import ChallengerDecision, PromotionReceipt
from voxledger.schemas.training import TrainingRunReceipt


@dataclass(frozen=True)
class BoundReceipts:
    """The typed receipts a package carries (each member re-hashed against its id before it gets here)."""

    training: TrainingRunReceipt
    audit: AuditReceipt
    evaluations: dict[str, EvaluationReceipt]
    promotion: tuple[str, PromotionReceipt] | None


@dataclass(frozen=True)
class ModelCardText:
    """The card's bytes and the facts the export receipt repeats."""

    text: str
    gate_verdict: Literal["promoted", "unpromoted"]
    not_measured: tuple[str, ...]


def _interval(i: Interval | None) -> str:
    if i is None:
        return "-"
    if i.low is None or i.high is None:
        return f"{i.mean:.4g} (no interval: {i.note or 'not estimable'})"
    return f"{i.mean:.4g} [{i.low:.4g}, {i.high:.4g}] ({i.method}, {i.units} prompts)"


def _candidate(ev: EvaluationReceipt, tree_sha256: str) -> str | None:
    return next((c.name for c in ev.parameters.candidates if c.artifact_sha256 == tree_sha256), None)


def _evaluation_section(rid: str, ev: EvaluationReceipt, tree_sha256: str) -> list[str]:
    name = _candidate(ev, tree_sha256)
    head = [f"### Evaluation `{ev.parameters.plan_name}` (receipt `{rid}`)", ""]
    if name is None:
        return [*head, "This evaluation did not evaluate this adapter's tree; nothing from it is claimed here.", ""]
    summary = next(s for s in ev.result.summaries if s.candidate == name)
    deltas: dict[str, Comparison] = {c.metric: c for c in ev.result.comparisons if c.candidate == name}
    rows = [
        f"Candidate `{name}`, {summary.n_rows} rows, plan `{ev.parameters.plan_sha256}`. Intervals are cluster intervals over "
        "prompts at the confidence level the plan sets (`statistics.confidence`); a delta is this adapter minus the baseline.",
        "",
        "| metric | this adapter | baseline | delta vs baseline | p (adjusted) |",
        "|---|---|---|---|---|",
    ]
    for metric, interval in sorted(summary.overall.items()):
        c = deltas.get(metric)
        p = "-" if c is None or c.test.p_adjusted is None else f"{c.test.p_adjusted:.3g}"
        base = f"`{c.baseline}`" if c else "-"
        rows.append(f"| {metric} | {_interval(interval)} | {base} | {_interval(c.delta if c else None)} | {p} |")
    return [*head, *rows, ""]


def _gate_section(bound: BoundReceipts, tree_sha256: str) -> tuple[list[str], Literal["promoted", "unpromoted"]]:
    if bound.promotion is None:
        return ["## Gate", "", "**Verdict: unpromoted.** No promotion receipt vouches for this adapter: it was packaged with "
                "`--unpromoted`, and no gate's rules were checked against it.", ""], "unpromoted"  # fmt: skip
    rid, promo = bound.promotion
    r = promo.result
    decision: ChallengerDecision | None = next((c for c in r.challengers if c.tree_sha256 == tree_sha256), None)
    lines = ["## Gate", ""]
    if decision is None:  # the package binds it because an alias move names this tree
        lines += [f"**Verdict: promoted** by promotion `{rid}` (an alias move targets this tree; no challenger row holds its rules).", ""]
    else:
        lines += [
            f"**Verdict: {'passed' if decision.passed else 'failed'}** — challenger `{decision.name}` (epoch {decision.epoch}, "
            f"CV loss {decision.cv_loss:.4g}) against incumbent `{promo.parameters.incumbent}`; promotion receipt `{rid}`, "
            f"policy `{promo.parameters.policy_sha256}`, gate evaluation `{promo.parameters.evaluation}`.",
            "",
            "| rule | value | passed | detail |",
            "|---|---|---|---|",
            *(
                f"| {v.statistic}({v.metric}) {v.op} {v.threshold:g} | {'-' if v.value is None else f'{v.value:.4g}'} | "
                f"{'yes' if v.passed else 'no'} | {v.detail} |"
                for v in decision.rules
            ),
            "",
        ]
    if r.error_control:
        lines += [f"Error control: {r.error_control}.", ""]
    lines += [f"Alias moves: {', '.join(f'`{m.alias}`' for m in r.moves if m.target_sha256 == tree_sha256) or 'none'}.", ""]
    return lines, "promoted"


def _not_measured(bound: BoundReceipts, tree_sha256: str) -> tuple[str, ...]:
    out = []
    if not bound.evaluations:
        out.append("no evaluation is bound to this package: no quality metric of this adapter is stated")
    for rid, ev in sorted(bound.evaluations.items()):
        if _candidate(ev, tree_sha256) is None:
            out.append(f"evaluation {rid[:12]} did not evaluate this adapter")
        out += [f"{metric}: not compared ({why})" for metric, why in sorted(ev.result.not_compared.items())]
        specs = ev.parameters.extractor_specs
        out += [f"{what}: not measured (the evaluation plan has no {what} metric)" for what in ("speaker", "mos") if what not in specs]
    out += [
        "listening test: no listening-test receipt is bound to this package",
        "safety, misuse and consent of the voice owner: not assessed by any receipt",
        "text outside the evaluation prompts (other domains, languages, lengths): not measured",
    ]
    return tuple(out)


def language_of(bound: BoundReceipts) -> str | None:
    """The training corpus's language: the trained model's config, else the audit's recogniser language."""
    model = bound.training.parameters.effective_config.get("model")
    if isinstance(model, dict) and isinstance(model.get("language"), str):
        return str(model["language"])
    agreement = bound.audit.result.asr_agreement
    return agreement.asr.language if agreement is not None else None


def card_text(manifest: PackageManifest, bound: BoundReceipts, package_sha256: str, base_model: str, loading: str) -> ModelCardText:
    """The model card of an exported adapter (see the module docstring)."""
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    b, tree = manifest.binding, manifest.binding.checkpoint_tree_sha256
    language = language_of(bound)
    gate, verdict = _gate_section(bound, tree)
    missing = _not_measured(bound, tree)
    results = []
    for ev in (bound.evaluations[k] for k in sorted(bound.evaluations)):
        name = _candidate(ev, tree)
        summary = next((s for s in ev.result.summaries if s.candidate == name), None)
        for metric, i in sorted(summary.overall.items()) if summary else ():
            results.append(
                EvalResult(
                    task_type="text-to-speech",
                    dataset_type="voxledger-evaluation-plan",
                    dataset_name=ev.parameters.plan_name,
                    dataset_revision=ev.parameters.plan_sha256,
                    metric_type=metric,
                    metric_value=i.mean,
                    metric_args={"low": i.low, "high": i.high, "method": i.method, "prompts": i.units},
                )
            )
    data = ModelCardData(
        base_model=base_model,
        library_name="peft",
        language=[language] if language else None,
        pipeline_tag="text-to-speech",
        tags=["voxledger", "lora", f"voxledger-backend-{manifest.backend}"],
        model_name=manifest.name,
        eval_results=results or None,
        voxledger={"package_sha256": package_sha256, "gate_verdict": verdict, "line": b.line, "speaker": manifest.inference.speaker},
    )
    audit = bound.audit
    body = [
        f"# {manifest.name}",
        "",
        f"A LoRA adapter for voxledger's `{manifest.backend}` backend: voice `{manifest.inference.speaker}`"
        + (f", model line `{b.line}`" if b.line else "")
        + f". Language: {language or 'not recorded'}. Sample rate {manifest.inference.sample_rate_hz} Hz.",
        "",
        "## Base model",
        "",
        f"`base_model_name_or_path` is `{base_model}`: the voxledger tree digest of the base model folder. " + manifest.components.note,
        "",
        "```python",
        loading.rstrip("\n"),
        "```",
        "",
        "## Training data",
        "",
        "| what | sha256 |",
        "|---|---|",
        f"| data manifest | `{b.data_manifest_sha256}` |",
        f"| audio tree | `{b.audio_tree_sha256}` |",
        f"| features | `{b.features_sha256}` |",
        f"| training plan | `{b.plan_sha256}` |",
        f"| training run (receipt) | `{b.training_run}` |",
        f"| checkpoint tree | `{tree}` |",
        "",
        f"Corpus `{audit.parameters.corpus_name}`: audit `{b.audit_receipt}` verdict **{audit.result.verdict}** over "
        f"{audit.result.n_utterances} utterances ({audit.result.stats.total_hours:.3g} h).",
        "",
        "## Evaluation",
        "",
        *(line for rid in sorted(bound.evaluations) for line in _evaluation_section(rid, bound.evaluations[rid], tree)),
        *([] if bound.evaluations else ["No evaluation is bound to this package.", ""]),
        *gate,
        "## Verify",
        "",
        f"This folder was exported from voxledger package `{package_sha256}` (sha256 of the package tar). Check the package "
        "and every receipt it binds, then re-derive its evaluation claims:",
        "",
        "```bash",
        f"sha256sum PACKAGE.tar   # {package_sha256}",
        "voxledger package verify PACKAGE.tar",
        "voxledger package verify PACKAGE.tar --reproduce --corpus CORPUS",
        "```",
        "",
        "## Not measured",
        "",
        *(f"- {m}" for m in missing),
        "",
    ]
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body))
    return ModelCardText(str(card), verdict, missing)
