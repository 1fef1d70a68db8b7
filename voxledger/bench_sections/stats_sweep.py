"""``voxledger bench --only stats`` (and ``--only sweep``): a sweep's one gate under no true effect.

Every member of a sweep trains the same voice under another learning rate or seed; the gate judges
each member's best-k + last checkpoints against one incumbent on 36 shared prompts. Simulated with
a fixed seed and no true effect anywhere (every challenger's per-prompt WER has the incumbent's
mean): a prompt effect all candidates share, a member effect its checkpoints share, checkpoint
noise. The rule asks for a real improvement (``delta_high(wer) <= 0``), so any pass is a false
promotion. Two rows per sweep size, through the stages' own ``gate_plan_for``, ``summarise`` and
``judge``: the sweep's one family (Bonferroni over every challenger, ``tasks/stages/sweep/gate.py``), whose
false-promotion rate must stay at or below the stated one-sided level, (1 - confidence) / 2; and
one gate per member (each a family of its own checkpoints only), which is what judging the
members one at a time would give, shown for contrast.
"""

from __future__ import annotations

import numpy as np

from voxledger.bench_sections.common import BENCH_BACKEND, Figure
from voxledger.schemas.evaluation import Candidate, EvaluationPlan, Generation, MetricSuite, Observation, Prompt
from voxledger.schemas.promotion import GatePlan, GateRule
from voxledger.tasks.power import round_confidence
from voxledger.tasks.stages.evaluate import summarise
from voxledger.tasks.stages.promote import gate_plan_for, judge

PROMPTS = 36
CHALLENGERS_PER_MEMBER = 2  # best-k 1 + last, the demo policy's
RULE = GateRule(metric="wer:basic", statistic="delta_high", op="<=", threshold=0.0)
EXTRACTOR = "1" * 64


def _template() -> GatePlan:
    prompts = tuple(Prompt(id=f"p{i:02d}", category="c", text="say this") for i in range(PROMPTS))
    return GatePlan(name="bench-sweep-gate", prompts=prompts, seeds=(0,), metrics=MetricSuite(speaker=None, mos=None))


def _candidates(members: int) -> tuple[Candidate, list[Candidate]]:
    inc = Candidate(name="incumbent", backend=BENCH_BACKEND, runtime="base", artifact="0" * 64, speaker="s")
    names = [f"m{m}-epoch{e}" for m in range(members) for e in range(CHALLENGERS_PER_MEMBER)]
    return inc, [Candidate(name=n, backend=BENCH_BACKEND, runtime="adapter", artifact="0" * 64, base="0" * 64, speaker="s") for n in names]


def _null_data(rng: np.random.Generator, members: int) -> tuple[list[Generation], list[Observation]]:
    """Per-prompt WER with no true effect: prompt effect + member effect + checkpoint noise."""
    prompt = rng.beta(2, 10, PROMPTS)
    rows: dict[str, np.ndarray] = {"incumbent": prompt + rng.normal(0, 0.04, PROMPTS)}
    for m in range(members):
        member = rng.normal(0, 0.02, PROMPTS)
        for e in range(CHALLENGERS_PER_MEMBER):
            rows[f"m{m}-epoch{e}"] = prompt + member + rng.normal(0, 0.03, PROMPTS)
    gens, obs = [], []
    for cand, values in rows.items():
        for i, v in enumerate(np.abs(values)):
            gens.append(Generation(candidate=cand, prompt_id=f"p{i:02d}", seed=0, valid=True))
            obs.append(Observation(candidate=cand, prompt_id=f"p{i:02d}", category="c", seed=0, metric="wer:basic",
                                   value=float(v), extractor_sha256=EXTRACTOR))  # fmt: skip
    return gens, obs


def _passes(plan: EvaluationPlan, gens: list[Generation], obs: list[Observation], names: list[str]) -> set[str]:
    result = summarise(plan, gens, obs)
    comparisons = {(c.candidate, c.metric): c for c in result.comparisons}
    return {n for n in names if judge(RULE, n, comparisons, {}).passed}


def sweep_gate_rows(reps: int, seed: int) -> list[Figure]:
    """False-promotion rate of a 4- and an 8-member sweep with no true effect: one family vs a gate per member."""
    figures = []
    template = _template()
    level = 100 * (1 - template.statistics.confidence) / 2
    for members in (4, 8):
        rng = np.random.default_rng([seed, members])
        inc, cands = _candidates(members)
        family = gate_plan_for(template, inc, cands)
        st = family.statistics.model_copy(update={"confidence": round_confidence(template.statistics.confidence, CHALLENGERS_PER_MEMBER)})
        per_member = family.model_copy(update={"statistics": st})
        names = [c.name for c in cands]
        any_family = any_member = 0
        for _ in range(reps):
            gens, obs = _null_data(rng, members)
            any_family += bool(_passes(family, gens, obs, names))
            any_member += bool(_passes(per_member, gens, obs, names))
        n = members * CHALLENGERS_PER_MEMBER
        label = f"sweep gate, {members} members x {CHALLENGERS_PER_MEMBER} challengers, no true effect, {PROMPTS} prompts"
        figures += [
            Figure(f"{label}: promotes anything, one family (Bonferroni over {n})", 100 * any_family / reps, "%", f"<= {level:.1f}"),
            Figure(f"{label}: promotes anything, a gate per member (for contrast)", 100 * any_member / reps, "%", ""),
        ]
    return figures
