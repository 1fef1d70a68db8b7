"""``evaluate_plan`` as a plain function: register, resolve, generate, extract, summarise, record."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.canonical import canonical_bytes, is_sha256_hex
from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.evaluation import (
    INVALID_RATE,
    OWN_BASE,
    CandidateSummary,
    Comparison,
    EvaluationParameters,
    EvaluationPlan,
    EvaluationReceipt,
    EvaluationResult,
    Generation,
    Observation,
    ResolvedCandidate,
)
from voxledger.stores.home import Home
from voxledger.stores.queries import alias_targets
from voxledger.tasks.evaluation.extract import extract_all, extractor_ids, extractor_specs
from voxledger.tasks.evaluation.failed import with_failures
from voxledger.tasks.evaluation.generate import generate_all
from voxledger.tasks.evaluation.journal import Journal
from voxledger.tasks.evaluation.profiles import deviations, failures_statement
from voxledger.tasks.evaluation.stats import ERROR_RATES, adjust_family, clustered_interval, failure_split, paired_delta
from voxledger.tasks.metrics.registry import is_count, lower_is_better
from voxledger.tasks.plans import register_plan
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import StageOutcome, record, reuse
from voxledger.tasks.stages.contract import need_corpus, never_stops

if TYPE_CHECKING:
    from voxledger.schemas.reproduction import OutputComparison, ReproductionBands
    from voxledger.tasks.stages.contract import StageContext
    from voxledger.tasks.stages.reproduce import Preparation


def resolve_ref(home: Home, ref: str | None, bindings: dict[str, str], what: str) -> str | None:
    """A digest for ``ref``: a sha256, ``alias:NAME`` (``alias:LINE:NAME`` where lines share it) or ``input:NAME``; None for no ref and for ``own``
    (the backend's own base, checked by `check_own_bases`); clear errors otherwise."""
    if ref is None or ref == OWN_BASE:
        return None
    if ref.startswith("input:"):
        name = ref[6:]
        if name not in bindings:
            raise EvaluationError(f"{what} needs input {name!r}; bind it (bound: {sorted(bindings)})")
        ref = bindings[name]
    elif ref.startswith("alias:"):
        ref = _alias_ref(home, ref[6:], what)
    if not is_sha256_hex(ref):
        raise EvaluationError(f"{what}: {ref!r} is not a sha256, alias:NAME, alias:LINE:NAME or input:NAME")
    if not home.blobs.has(ref):
        raise EvaluationError(f"{what}: artifact {ref} is not in the store")
    return ref


def _alias_ref(home: Home, name: str, what: str) -> str:
    """The target of ``LINE:ALIAS``, or of ``ALIAS`` when exactly one model line has it."""
    line, _, alias = name.rpartition(":")
    targets = alias_targets(home.catalog, alias)
    if line:
        if line not in targets:
            raise EvaluationError(
                f"{what}: line {line} has no alias {alias!r} (lines with it: {', '.join(targets) or 'none'}); "
                "aliases move only through promotion receipts"
            )
        return targets[line]
    if len(targets) == 1:
        return next(iter(targets.values()))
    if not targets:
        raise EvaluationError(f"{what}: unknown alias {alias!r}; aliases move only through promotion receipts")
    raise EvaluationError(
        f"{what}: alias {alias!r} is held by {len(targets)} model lines ({', '.join(targets)}); "
        f"name one, e.g. alias:{next(iter(targets))}:{alias}"
    )


def check_own_bases(plan: EvaluationPlan, plan_name: str) -> None:
    """Refuse ``base: own`` for a backend whose adapters run on a stored base tree."""
    from voxledger.tasks.backends.base import get_backend

    for c in plan.candidates:
        if c.base == OWN_BASE and c.backend != "recordings" and get_backend(c.backend).needs_stored_base:
            raise EvaluationError(
                f"plan {plan_name}, candidate {c.name}: backend {c.backend} adapters run on a stored base tree, not {OWN_BASE!r}; "
                "bind the base (e.g. base: input:base)"
            )


def evaluate_plan_fn(
    home: Home,
    plan: EvaluationPlan,
    *,
    plan_name: str,
    corpus: Path,
    bindings: dict[str, str] | None = None,
    flow: str = "evaluate_plan",
    progress: Callable[[str], None] | None = None,
    parents: tuple[InputRef, ...] = (),
) -> StageOutcome[EvaluationReceipt]:
    """Run a frozen plan: the plan receipt is recorded before any generation."""
    started = utc_now()
    bindings = bindings or {}
    check_own_bases(plan, plan_name)
    plan_rid, plan_sha = register_plan(home, plan, source_name=plan_name, flow=flow)
    resolved = {
        c.name: ResolvedCandidate(
            name=c.name,
            runtime=c.runtime,
            artifact_sha256=resolve_ref(home, c.artifact, bindings, f"candidate {c.name}"),
            base_sha256=resolve_ref(home, c.base, bindings, f"candidate {c.name} base"),
        )
        for c in plan.candidates
    }
    refs = sorted({*plan.speaker_references.values(), *(p.recording for p in plan.prompts if p.recording)})
    missing = [r for r in refs if not (corpus / r).is_file()]
    if missing:
        raise EvaluationError(f"plan {plan_name} references audio missing under {corpus}: {missing[:5]}")
    ref_digests = {r: home.blobs.put_file(corpus / r) for r in refs}
    key = cache_key(
        "evaluate", {"candidates": {k: v.model_dump(mode="json") for k, v in resolved.items()}, "references": ref_digests}, plan_sha, {}
    )
    hit = reuse(home, key, EvaluationReceipt, report=progress)
    if hit is not None:
        return hit
    work = home.root / "evals" / key[:16]
    gens = generate_all(home, plan, resolved, corpus, Journal(work / "generations.jsonl"), progress)
    heard: dict[tuple[str, str, int], dict[str, object]] = {}
    obs = extract_all(home, plan, gens, corpus, Journal(work / "observations.jsonl"), progress, transcripts=heard)
    result = summarise(plan, gens, obs)
    gen_sha = home.blobs.put_bytes(canonical_bytes([g.model_dump(mode="json") for g in gens]))
    obs_sha = home.blobs.put_bytes(canonical_bytes([o.model_dump(mode="json") for o in obs]))
    transcripts_sha = home.blobs.put_bytes(
        canonical_bytes([{"candidate": c, "prompt_id": p, "seed": s, **heard[(c, p, s)]} for c, p, s in sorted(heard)])
    )
    inputs = [InputRef(role="plan", sha256=plan_rid, ref="receipt"), *parents]
    for r in resolved.values():
        for role, sha in (("candidate_artifact", r.artifact_sha256), ("candidate_base", r.base_sha256)):
            if sha and InputRef(role=role, sha256=sha, ref="artifact") not in inputs:
                inputs.append(InputRef(role=role, sha256=sha, ref="artifact"))
    inputs += [InputRef(role="reference_audio", sha256=d, ref="artifact") for d in sorted(set(ref_digests.values()))]
    from voxledger.tasks.backends.base import compute_device

    receipt = build_receipt(
        EvaluationReceipt,
        flow=flow,
        task="evaluate_plan",
        started_at=started,
        key=key,
        device=compute_device(*(c.backend for c in plan.candidates)),  # where the candidates were synthesised
        inputs=inputs,
        subjects=[
            artifact(home.blobs, "generations", gen_sha, "application/json"),
            artifact(home.blobs, "observations", obs_sha, "application/json"),
            artifact(home.blobs, "transcripts", transcripts_sha, "application/json"),
            *_audio_subjects(home, gens),
        ],
        parameters=EvaluationParameters(
            plan_sha256=plan_sha,
            plan_name=plan.name,
            candidates=tuple(resolved.values()),
            extractors=extractor_ids(plan),
            extractor_specs=extractor_specs(plan),
            n_generations=len(gens),
            n_observations=len(obs),
        ),
        result=result,
    )
    return record(home, receipt)


def _audio_subjects(home: Home, gens: list[Generation]) -> list:  # type: ignore[type-arg]
    """Every generated clip as an output, so ratings and packets bound to audio digests walk back here."""
    seen = sorted({(f"audio:{g.candidate}", sha) for g in gens if g.valid for sha in (g.audio_sha256, g.native_audio_sha256) if sha})
    return [artifact(home.blobs, role, sha, "audio/wav") for role, sha in seen]


def summarise(plan: EvaluationPlan, gens: list[Generation], obs: list[Observation]) -> EvaluationResult:
    """Per-candidate intervals (overall and by category) and paired deltas vs the baseline.

    A failed generation counts as a failure of its candidate on its prompt (``failed.with_failures``):
    100% WER/CER, content gate failed, and 1 in ``invalid_rate``, which is summarised and compared
    like any metric."""
    st = plan.statistics
    ci = dict(settings=st)
    by: dict[str, dict[str, list[Observation]]] = defaultdict(lambda: defaultdict(list))
    for o in with_failures(plan, gens, obs):
        by[o.candidate][o.metric].append(o)
    summaries = []
    for c in plan.candidates:
        rows = [g for g in gens if g.candidate == c.name]
        metrics = by[c.name]
        gate = [o.value for o in metrics.get("content_gate_pass", [])]
        overall, cats = {}, defaultdict(dict)  # type: ignore[var-annotated]
        for metric, items in sorted(metrics.items()):
            if is_count(metric):
                continue
            overall[metric] = clustered_interval([o.value for o in items], [o.prompt_id for o in items], metric=metric, **ci)  # type: ignore[arg-type]
            for cat in sorted({o.category for o in items}):
                sub = [o for o in items if o.category == cat]
                cats[cat][metric] = clustered_interval([o.value for o in sub], [o.prompt_id for o in sub], metric=metric, **ci)  # type: ignore[arg-type]
        micro = {}
        for metric in metrics:
            if metric.startswith("word_errors:"):
                norm = metric.split(":", 1)[1]
                errors = sum(o.value for o in metrics[metric])
                words = sum(o.value for o in metrics.get(f"ref_words:{norm}", []))
                micro[norm] = errors / words if words else 0.0
        summaries.append(
            CandidateSummary(
                candidate=c.name,
                n_rows=len(rows),
                invalid_rate=sum(not g.valid for g in rows) / max(1, len(rows)),
                content_gate_fail_rate=(1 - sum(gate) / len(gate)) if gate else 1.0,
                overall=overall,
                by_category=dict(cats),
                micro_wer=micro,
            )
        )
    comparisons, not_compared = [], {}
    base = by[plan.baseline]
    for c in plan.candidates:
        if c.name == plan.baseline:
            continue
        for metric in sorted(set(by[c.name]) | set(base)):
            if is_count(metric):
                continue
            label = f"{c.name}/{metric}"
            if metric not in by[c.name] or metric not in base:
                not_compared[label] = f"present on one side only ({c.name if metric in by[c.name] else plan.baseline})"
                continue
            if {o.extractor_sha256 for o in by[c.name][metric]} != {o.extractor_sha256 for o in base[metric]}:
                raise EvaluationError(f"{label}: observations come from different extractors; re-run both sides with one spec")
            cand = {(o.prompt_id, o.seed): o.value for o in by[c.name][metric]}
            ref = {(o.prompt_id, o.seed): o.value for o in base[metric]}
            if not set(cand) & set(ref):
                not_compared[label] = "no shared (prompt, seed) pairs"
                continue
            delta, test, n = paired_delta(cand, ref, st, what=label, metric=metric)
            split = failure_split(cand, ref, st, what=label) if metric.split(":", 1)[0] in ERROR_RATES else None
            comparisons.append(
                Comparison(
                    candidate=c.name,
                    baseline=plan.baseline,
                    metric=metric,
                    delta=delta,
                    test=test,
                    n_pairs=n,
                    lower_is_better=lower_is_better(metric) or metric == INVALID_RATE,
                    failures=split,
                )
            )
    tests = adjust_family([c.test for c in comparisons], f"evaluation {plan.name}: every comparison", st.multiplicity)
    comparisons = [c.model_copy(update={"test": t}) for c, t in zip(comparisons, tests, strict=True)]
    return EvaluationResult(
        summaries=tuple(summaries),
        comparisons=tuple(comparisons),
        not_compared=not_compared,
        profile=plan.profile,
        deviations=deviations(plan),
        failures=failures_statement(gens),
    )


# The stage contract (tasks/stages/contract.py).
run = evaluate_plan_fn
verdict = never_stops


def _bindings(ctx: StageContext) -> dict[str, str]:
    base = ctx.base()
    return {"adapter": ctx.winner()[1], **({"base": base} if base else {})}


def inputs(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus and bindings: `adapter` is the promoted checkpoint, `base` the trained or imported base."""
    return {"corpus": ctx.corpus, "bindings": _bindings(ctx)}


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


def rerun_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The ``evaluate`` flow's arguments: the corpus, the plan and the bindings it ran with."""
    from voxledger.tasks.stages.reproduce import plan_ref

    r = cast(EvaluationReceipt, prep.receipt)
    ref = plan_ref(home, r, "plan")
    return {"corpus": str(need_corpus(corpus, prep)), "plan": ref, "bindings": bindings_of(r, ref.validated(EvaluationPlan))}


def compare(h: Home, s: Home, original: EvaluationReceipt, rerun: EvaluationReceipt, bands: ReproductionBands) -> list[OutputComparison]:
    """Each clip, transcript and metric under the evaluation bands."""
    from voxledger.tasks.reproduction import compare as cmp

    return cmp.compare_evaluation(original, rerun, cmp.read_either(h, s), bands)


def summary(receipt: EvaluationReceipt) -> str:
    """Candidates and generations, and the failed generations counted against their candidates."""
    p, r = receipt.parameters, receipt.result
    failed = (r.failures or "").split(".")[0].removeprefix("failed generations per candidate: ")
    return f"{len(r.summaries)} candidate(s), {p.n_generations} generations; failed: {failed or 'not recorded'}"
