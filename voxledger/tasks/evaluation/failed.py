"""Failed generations as failures: what a generation without valid audio counts as in every mean.

A failed generation (no audio, an error, a timeout) has no transcript, so no extractor measures
it. Leaving it out would compute means, minimum counts and the content gate over the prompts
whose audio happened to be valid: a challenger with valid audio on 7 of 36 prompts would be
judged on those 7. So the summary adds, for each failed (candidate, prompt, seed), the value a
failure takes on each content metric (``FAILURE_VALUES``: an empty transcript is 100% word and
character errors, fails the content gate and hits no anchor), and one ``invalid_rate``
observation per generation row (1 failed, 0 valid) that gates can bound like any metric.

Metrics measured only on audio that passed the content gate (speaker similarity, predicted MOS)
get no stand-in value: there is no honest similarity of silence. They rest on fewer prompts, and
``invalid_rate`` and the content rules carry the failure. The observations blob of the receipt
keeps what was measured; the stand-ins exist only in the summary, which says so (``failures``).
"""

from __future__ import annotations

from typing import Any

from voxledger.schemas.canonical import canonical_digest
from voxledger.schemas.evaluation import INVALID_RATE, EvaluationPlan, Generation, Observation

FAILURE_VALUES: dict[str, float] = {"wer": 1.0, "cer": 1.0, "content_gate_pass": 0.0, "anchor_hit_rate": 0.0}
"""The value a failed generation takes on each content metric (a family such as ``wer:*`` by its prefix)."""

INVALID_RATE_SHA256 = canonical_digest({"metric": INVALID_RATE, "measures": "Generation.valid"})
"""The identity of the ``invalid_rate`` observations (read from the generation rows, no model)."""


def failure_value(metric: str) -> float | None:
    """What a failed generation counts as on ``metric`` (None: the metric has no stand-in)."""
    return FAILURE_VALUES.get(metric.split(":", 1)[0])


def with_failures(plan: EvaluationPlan, gens: list[Generation], obs: list[Observation]) -> list[Observation]:
    """``obs`` plus an ``invalid_rate`` row per generation and each failed generation's content-metric values.

    A content metric is filled in for a failed generation when the evaluation measured it at all
    (its extractor's identity is taken from those measurements); ``anchor_hit_rate`` only on prompts
    that have anchors, as the extractor itself does.
    """
    prompts = {p.id: p for p in plan.prompts}
    extractor = {o.metric: o.extractor_sha256 for o in obs if failure_value(o.metric) is not None}
    out = list(obs)
    for g in gens:
        prompt = prompts[g.prompt_id]
        row: dict[str, Any] = {"candidate": g.candidate, "prompt_id": g.prompt_id, "category": prompt.category, "seed": g.seed}
        out.append(Observation(**row, metric=INVALID_RATE, value=0.0 if g.valid else 1.0, extractor_sha256=INVALID_RATE_SHA256))
        if g.valid:
            continue
        for metric, sha in sorted(extractor.items()):
            if metric == "anchor_hit_rate" and not prompt.anchors:
                continue
            out.append(Observation(**row, metric=metric, value=failure_value(metric), extractor_sha256=sha))  # type: ignore[arg-type]
    return out
