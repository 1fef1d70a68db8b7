"""``evaluate_plan`` as a plain function: register, resolve, generate, extract, summarise, record."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

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
from voxledger.stores.queries import alias_target
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


def resolve_ref(home: Home, ref: str | None, bindings: dict[str, str], what: str) -> str | None:
    """A digest for ``ref``: a sha256, ``alias:NAME`` or ``input:NAME``; None for no ref and for ``own``
    (the backend's own base, checked by `check_own_bases`); clear errors otherwise."""
    if ref is None or ref == OWN_BASE:
        return None
    if ref.startswith("input:"):
        name = ref[6:]
        if name not in bindings:
            raise EvaluationError(f"{what} needs input {name!r}; bind it (bound: {sorted(bindings)})")
        ref = bindings[name]
    elif ref.startswith("alias:"):
        target = alias_target(home.catalog, ref[6:])
        if target is None:
            raise EvaluationError(f"{what}: unknown alias {ref[6:]!r}; aliases move only through promotion receipts")
        ref = target
    if not is_sha256_hex(ref):
        raise EvaluationError(f"{what}: {ref!r} is not a sha256, alias:NAME or input:NAME")
    if not home.blobs.has(ref):
        raise EvaluationError(f"{what}: artifact {ref} is not in the store")
    return ref


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
    receipt = build_receipt(
        EvaluationReceipt,
        flow=flow,
        task="evaluate_plan",
        started_at=started,
        key=key,
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
