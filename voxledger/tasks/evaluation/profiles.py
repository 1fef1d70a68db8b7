"""How an evaluation differs from the published protocol its plan names, said in plain lines.

Each line names the profile's rule and what this run did instead (``ASR for zh: whisper-base-ct2
instead of paraformer-zh``), so a number is never set beside a published one without its
differences. The rules themselves are data (`voxledger.schemas.profiles`).
"""

from __future__ import annotations

from collections import Counter

from voxledger.schemas.evaluation import EvaluationPlan, Generation
from voxledger.schemas.profiles import PROFILES, ProfileLanguage


def deviations(plan: EvaluationPlan) -> tuple[str, ...]:
    """Every way ``plan`` differs from its profile (empty without a profile)."""
    if plan.profile is None:
        return ()
    profile = PROFILES[plan.profile]
    out: list[str] = []
    languages = sorted({plan.prompt_language(p) for p in plan.prompts})
    normalisers = {t.normaliser for t in plan.metrics.text}
    asr = plan.metrics.asr
    for language in languages:
        rule: ProfileLanguage | None = profile.languages.get(language, profile.other_languages)
        if rule is None:
            out.append(f"language {language}: not covered by {profile.name} (it measures {', '.join(sorted(profile.languages))})")
            continue
        if rule.normaliser not in normalisers:
            out.append(
                f"text for {language}: {profile.name} normalises with {rule.normaliser}, "
                f"which the plan's text metrics ({', '.join(sorted(normalisers))}) do not include"
            )
        name = asr.model_name if asr.model_dir is None else f"{asr.model_name} (your folder, {asr.folder_sha256 or '?'}"[:90] + ")"
        if asr.model_name != rule.asr_model:
            out.append(f"ASR for {language}: {name} instead of {rule.asr_model}")
    speaker = plan.metrics.speaker
    if speaker is None:
        out.append(f"speaker similarity: not measured ({profile.name} uses {profile.speaker_model})")
    elif speaker.model_name != profile.speaker_model.split(" ", 1)[0]:
        out.append(f"speaker similarity: {speaker.model_name} instead of {profile.speaker_model}")
    if len(plan.seeds) > 1:
        out.append(
            f"aggregation: {len(plan.seeds)} seeds are averaged within each prompt before the mean over prompts; "
            f"{profile.name} averages utterance rates"
        )
    out.append(f"failed generations: counted here (see failures); in {profile.name} {profile.failed_generations}")
    if profile.limits:
        out.append(f"profile limits: {profile.limits}")
    return tuple(out)


def failures_statement(gens: list[Generation]) -> str:
    """How failed generations were counted in this run, with their numbers per candidate."""
    failed = Counter(g.candidate for g in gens if not g.valid)
    total = Counter(g.candidate for g in gens)
    counts = ", ".join(f"{c} {failed[c]}/{total[c]}" for c in sorted(total))
    return (
        f"failed generations per candidate: {counts}. A failed generation stays a row: it counts in invalid_rate and "
        "in n_rows, and as a failure of its candidate on its prompt in every content metric (WER/CER 1.0, content gate "
        "failed, no anchor heard), so their means, minimum counts and comparisons include it; speaker similarity and "
        "predicted MOS, measured only on audio that passed the content gate, rest on the prompts that have it"
    )
