"""Who hears what, in which order: a balanced incomplete block design over prompts.

Raters are blocks and prompts are treatments: every prompt goes to exactly ``k`` raters, chosen
greedily by (fewest prompts so far, fewest prompts shared with the raters already chosen, seeded
tie-break), so block sizes differ by at most one; of several seeded passes the one whose rater
pairs share prompts most evenly is kept (a true BIBD exists only for some sizes). A rater
hears every candidate of each of their prompts, in one of A/B, ACR/MUSHRA or SMOS (``split``:
no clip reappears across tasks within a packet, so repetition cannot tell conditions apart).
Positions are counterbalanced by rotation: each time a candidate set is laid out (ACR rounds, a MUSHRA screen, an A/B pair) its sorted order is
rotated one step further, so every candidate takes every ACR round / MUSHRA slot / A-B side in
turn and the counts differ by at most one per candidate set. Trial order is then shuffled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from voxledger.schemas.listening import ListeningProtocol, SlotRole, Stimulus, StimulusSet, TaskType
from voxledger.schemas.listening_receipts import BalanceAudit, PositionBalance

LOW_ANCHOR = "low_anchor"
MID_ANCHOR = "mid_anchor"
GOLD_BAD = "gold_degraded"
ATTENTION = "attention_check"


@dataclass(frozen=True)
class Slot:
    """One thing a rater hears; ``source`` names the audio to render (shared across raters)."""

    role: SlotRole
    candidate: str
    prompt_id: str
    category: str
    source: str
    audio_sha256: str
    expected: int | None = None


@dataclass
class TrialPlan:
    """One screen before it gets an id and pseudonyms; ``position`` feeds the balance audit."""

    task: TaskType
    criteria: tuple[str, ...]
    slots: tuple[Slot, ...]
    reference: Slot | None = None
    positions: list[tuple[str, int]] = field(default_factory=list)  # (candidate, position)


@dataclass(frozen=True)
class DesignPlan:
    """Every rater's trials in order, what could not be built, and the audit."""

    trials: dict[str, list[TrialPlan]]
    skipped: tuple[str, ...]
    audit: BalanceAudit
    familiarisation: dict[str, list[TrialPlan]] = field(default_factory=dict)  # unscored practice, before ``trials``


def rater_ids(n: int) -> list[str]:
    """``r01``, ``r02``, ... (zero-padded to the width of ``n``)."""
    width = max(2, len(str(n)))
    return [f"r{i:0{width}d}" for i in range(1, n + 1)]


def _spread(values: np.ndarray) -> int:
    return int(values.max() - values.min()) if values.size else 0


def assign_prompts(n_prompts: int, n_raters: int, k: int, rng: np.random.Generator, tries: int = 24) -> np.ndarray:
    """Incidence matrix (raters x prompts): every prompt has exactly ``k`` raters.

    The greedy pass is repeated ``tries`` times from the seeded generator; the design with the
    most even rater-pair overlap, then prompt-pair concurrence, is kept.
    """
    upper_r, upper_p = np.triu_indices(n_raters, 1), np.triu_indices(n_prompts, 1)

    def unevenness(x: np.ndarray) -> tuple[int, int]:
        return _spread((x @ x.T)[upper_r]), _spread((x.T @ x)[upper_p])

    return min((_greedy(n_prompts, n_raters, k, rng) for _ in range(max(1, tries))), key=unevenness)


def _greedy(n_prompts: int, n_raters: int, k: int, rng: np.random.Generator) -> np.ndarray:
    incidence = np.zeros((n_raters, n_prompts), dtype=np.int64)
    load = np.zeros(n_raters, dtype=np.int64)
    for p in rng.permutation(n_prompts):
        shared = np.zeros(n_raters, dtype=np.int64)
        taken = np.zeros(n_raters, dtype=bool)
        for _ in range(k):
            noise = rng.random(n_raters)
            pick = int(np.lexsort((noise, shared, load + taken * (n_prompts + 1)))[0])  # fewest prompts, least overlap, seeded
            taken[pick] = True
            shared += incidence @ incidence[pick]
        incidence[taken, p] = 1
        load += taken
    return incidence


def _by_prompt(stimuli: StimulusSet) -> dict[str, dict[str, Stimulus]]:
    by_prompt: dict[str, dict[str, Stimulus]] = {}
    for s in stimuli.stimuli:
        by_prompt.setdefault(s.prompt_id, {})[s.candidate] = s
    return by_prompt


def plan_packets(protocol: ListeningProtocol, stimuli: StimulusSet) -> DesignPlan:
    """Build every rater's ordered trials from the protocol and the stimuli."""
    rng = np.random.default_rng(protocol.design.seed)
    by_prompt = _by_prompt(stimuli)
    raters = rater_ids(protocol.design.raters)
    incidence = assign_prompts(len(by_prompt), len(raters), protocol.design.raters_per_prompt, rng)
    return _plan(protocol, by_prompt, raters, incidence, rng, incidence, protocol.design.raters_per_prompt)


def plan_extension(
    protocol: ListeningProtocol,
    stimuli: StimulusSet,
    existing: np.ndarray,
    raters: list[str],
    k: int,
    extension: int,
    turns: Mapping[tuple[str, ...], int] | None = None,
) -> DesignPlan:
    """Trials of ``raters`` added to a packet set whose raters x prompts incidence is ``existing``.

    The new raters form a block design of their own (every prompt heard by exactly ``k`` of them,
    block sizes within one), built by the same builder with a generator of their own (seeded from
    the protocol's seed and ``extension``), so coverage stays equal across prompts and the old
    packets stay as they are. ``turns``: how often the old packets used each layout (``_Builder.rotation``
    keys), so the rotations go on where they stopped and positions stay balanced over old and new.
    The audit covers old and new incidence together.
    """
    rng = np.random.default_rng([protocol.design.seed, 1000 + extension])
    by_prompt = _by_prompt(stimuli)
    incidence = assign_prompts(len(by_prompt), len(raters), k, rng)
    audited = np.vstack([existing, incidence])
    return _plan(protocol, by_prompt, raters, incidence, rng, audited, protocol.design.raters_per_prompt + k, turns)


def _plan(
    protocol: ListeningProtocol,
    by_prompt: dict[str, dict[str, Stimulus]],
    raters: list[str],
    incidence: np.ndarray,
    rng: np.random.Generator,
    audited: np.ndarray,
    k: int,
    turns: Mapping[tuple[str, ...], int] | None = None,
) -> DesignPlan:
    prompts = sorted(by_prompt)
    builder = _Builder(protocol, by_prompt, rng)
    builder.turns.update(turns or {})
    trials: dict[str, list[TrialPlan]] = {}
    for r, rater in enumerate(raters):
        trials[rater] = builder.packet([prompts[int(p)] for p in rng.permutation(np.flatnonzero(incidence[r]))])
    audit = balance_audit(audited, k, trials)
    heard = {rater: [prompts[int(p)] for p in np.flatnonzero(incidence[r])] for r, rater in enumerate(raters)}
    used = {rater: {s.prompt_id for t in ts for s in (*t.slots, *([t.reference] if t.reference else []))} for rater, ts in trials.items()}
    practice = familiarisation(protocol, by_prompt, heard, used)
    return DesignPlan(trials, tuple(sorted(set(builder.skipped))), audit, practice)


def familiarisation(
    protocol: ListeningProtocol, by_prompt: dict[str, dict[str, Stimulus]], heard: dict[str, list[str]], used: dict[str, set[str]]
) -> dict[str, list[TrialPlan]]:
    """Each rater's ``design.familiarisation_trials`` unscored practice trials, task types taking turns.

    Built like scored trials (no gold or attention items) by a builder of their own (own generator,
    own rotations), so the scored design is the same with or without them. Prompts come from those
    the rater's scored trials never use, else from those they do not rate (``heard``: used only as a
    gold item or a reference), so no practice clip's prompt is rated again among the scored trials.
    """
    n = protocol.design.familiarisation_trials
    if not n:
        return {}
    quiet = protocol.model_copy(
        update={"design": protocol.design.model_copy(update={"gold_items": 0, "attention_checks": 0, "comparison_gold_items": 0})}
    )
    b = _Builder(quiet, by_prompt, np.random.default_rng([protocol.design.seed, 61]))
    prompts = sorted(by_prompt)
    order = list(dict.fromkeys(c.task for c in protocol.criteria))
    out: dict[str, list[TrialPlan]] = {}
    for rater, mine in heard.items():
        pool = [p for p in prompts if p not in used.get(rater, set())] or [p for p in prompts if p not in mine] or prompts
        picks = [pool[int(i)] for i in b.rng.permutation(len(pool))]
        sections = [_practice(b, task, picks, mine) for task in order]
        turns = [t for k in range(max(map(len, sections), default=0)) for sec in sections if k < len(sec) for t in sec[k : k + 1]]
        out[rater] = turns[:n]
    return out


def _practice(b: _Builder, task: str, picks: list[str], heard: list[str]) -> list[TrialPlan]:
    """Practice trials of one task type on the first of ``picks`` that the task's criteria apply to."""
    for p in picks:
        if task == "acr":
            trials = b.acr([p], [])
        elif task == "mushra":
            trials = b.mushra([p])
        elif task == "ab":
            trials = b.ab([p], [])
        else:
            trials = b.smos([p], [*heard, p])
        if trials:
            return trials
    return []


GROUPS = (0, 1, 2)
GROUP_OF = {"acr": 0, "mushra": 0, "ab": 1, "smos": 2}  # task type -> the prompt group it draws from (``_Builder.split``)


class _Builder:
    def __init__(self, protocol: ListeningProtocol, by_prompt: dict[str, dict[str, Stimulus]], rng: np.random.Generator) -> None:
        self.protocol, self.by_prompt, self.rng = protocol, by_prompt, rng
        self.skipped: list[str] = []
        self.ref = protocol.reference_candidate
        self.turns: Counter[tuple[str, ...]] = Counter()
        self.prompt_groups: dict[str, list[int]] = {}  # prompt -> raters so far hearing it in (ACR/MUSHRA, A/B, SMOS)
        self.gold_prompts: set[str] = set()  # the current rater's gold-item prompts (not reused as SMOS references)

    def rotation(self, *key: str) -> int:
        """How many times this layout was used before (the rotation to apply now)."""
        self.turns[key] += 1
        return self.turns[key] - 1

    def slot(
        self, role: SlotRole, s: Stimulus, source: str | None = None, candidate: str | None = None, expected: int | None = None
    ) -> Slot:
        src = source or f"stim:{s.prompt_id}:{s.candidate}"
        return Slot(role, candidate or s.candidate, s.prompt_id, s.category, src, s.audio_sha256, expected)

    def packet(self, mine: list[str]) -> list[TrialPlan]:
        single, paired, similar = self.split(mine)
        sections = {"acr": self.acr(single, mine), "mushra": self.mushra(single)}
        sections |= {"ab": self.ab(paired, mine), "smos": self.smos(similar, mine)}
        order = list(dict.fromkeys(c.task for c in self.protocol.criteria))
        return [t for task in order for t in sections[task]]

    def split(self, mine: list[str]) -> tuple[list[str], list[str], list[str]]:
        """The rater's prompts for ACR/MUSHRA, for A/B and for SMOS: a prompt several could use goes to one.

        A clip heard in two task groups would reappear within the packet for exactly the candidates
        the second one uses (A/B leaves the reference out unless ``include_reference``): whether a
        clip comes back would tell the conditions apart. Each such prompt goes to the group fewer of
        its raters so far had, then the group this rater has fewer prompts in, then the first group.
        """
        groups: tuple[list[str], list[str], list[str]] = ([], [], [])
        mine_counts = [0, 0, 0]
        for p in mine:
            category = next(iter(self.by_prompt[p].values())).category
            uses = [g for g in GROUPS if any(c.applies_to(category) for c in self.protocol.criteria if GROUP_OF[c.task] == g)]
            if len(uses) < 2:
                groups[uses[0] if uses else 0].append(p)
                continue
            counts = self.prompt_groups.setdefault(p, [0, 0, 0])
            g = min(uses, key=lambda i: (counts[i], mine_counts[i], i))
            counts[g] += 1
            mine_counts[g] += 1
            groups[g].append(p)
        return groups

    def acr(self, mine: list[str], heard: list[str]) -> list[TrialPlan]:
        rounds: list[list[TrialPlan]] = []
        for p in mine:
            cands = sorted(self.by_prompt[p])
            crits = tuple(c.name for c in self.protocol.criteria if c.task == "acr" and c.applies_to(self.by_prompt[p][cands[0]].category))
            turn = self.rotation("acr", *cands) if crits else 0
            for j in range(len(cands) if crits else 0):
                cand = cands[(j + turn) % len(cands)]
                trial = TrialPlan("acr", crits, (self.slot("stimulus", self.by_prompt[p][cand]),), positions=[(cand, j)])
                while len(rounds) <= j:
                    rounds.append([])
                rounds[j].append(trial)
        flat = [t for rnd in rounds for t in self.rng.permutation(np.array(rnd, dtype=object)).tolist()]
        for check in self.checks(heard):
            flat.insert(int(self.rng.integers(1, len(flat) + 1)) if flat else 0, check)
        return flat

    def checks(self, mine: list[str]) -> list[TrialPlan]:
        check = self.protocol.check_criterion()
        if check is None:
            return []
        out: list[TrialPlan] = []
        usable = [p for p in self.by_prompt if self.ref in self.by_prompt[p] and check.applies_to(self.by_prompt[p][self.ref].category)]
        # gold items come from prompts the rater does not otherwise hear, so they cannot be linked to
        # the same recording elsewhere in the packet (e.g. a labelled MUSHRA reference)
        with_ref = [p for p in usable if p not in mine] or [p for p in usable if p in mine]
        for i in range(self.protocol.design.gold_items):
            if not with_ref:
                self.skipped.append(f"gold items: no prompt has the reference candidate {self.ref!r} under criterion {check.name!r}")
                break
            ref = self.by_prompt[with_ref[int(self.rng.integers(len(with_ref)))]][self.ref]
            self.gold_prompts.add(ref.prompt_id)
            crits = tuple(c.name for c in self.protocol.criteria if c.task == "acr" and c.applies_to(ref.category))
            slot = (
                self.slot("gold", ref, expected=check.scale.max)
                if i % 2 == 0
                else self.slot("gold", ref, source=f"gold_bad:{ref.prompt_id}", candidate=GOLD_BAD, expected=check.scale.min)
            )
            out.append(TrialPlan("acr", crits, (slot,)))
        for _ in range(self.protocol.design.attention_checks):
            # wording, answer and voice are drawn at export from a generator keyed by the home's
            # secret (instructions.personalise_attention): the public seed must not predict them
            slot = Slot("attention", ATTENTION, "", "", "attention", "", None)
            out.append(TrialPlan("acr", (check.name,), (slot,)))
        return out

    def mushra(self, mine: list[str]) -> list[TrialPlan]:
        out: list[TrialPlan] = []
        for crit in (c for c in self.protocol.criteria if c.task == "mushra"):
            for p in mine:
                cands = self.by_prompt[p]
                ref = cands.get(self.ref)
                if not crit.applies_to(next(iter(cands.values())).category):
                    continue
                if ref is None:
                    self.skipped.append(f"mushra {crit.name}: prompt {p} has no reference candidate {self.ref!r}")
                    continue
                # BS.1534-3 anchors: the reference low-passed at 3.5 kHz (low) and 7 kHz (mid)
                anchors = {LOW_ANCHOR: crit.low_anchor_cutoff_hz, MID_ANCHOR: crit.mid_anchor_cutoff_hz}
                anchors = {n: hz for n, hz in anchors.items() if hz is not None}
                names = sorted(cands) + sorted(anchors)
                turn = self.rotation("mushra", crit.name, *names) % len(names)
                names = names[turn:] + names[:turn]
                slots = tuple(
                    self.slot(n, ref, source=f"anchor:{p}:{anchors[n]:g}", candidate=n)  # type: ignore[arg-type]
                    if n in anchors
                    else self.slot("hidden_reference" if n == self.ref else "stimulus", cands[n])
                    for n in names
                )
                out.append(
                    TrialPlan("mushra", (crit.name,), slots, self.slot("open_reference", ref), [(n, i) for i, n in enumerate(names)])
                )
        return [out[i] for i in self.rng.permutation(len(out))]

    def smos(self, mine: list[str], heard: list[str]) -> list[TrialPlan]:
        """SMOS trials: each candidate of a prompt against one recording of the target speaker saying another prompt.

        Every candidate of a prompt is compared with the same reference (so the reference is no
        condition); it is drawn from prompts the rater hears nowhere else in the packet (nor as a
        gold item), so the reference is never a clip the rater rates. Rounds and rotation as ACR.
        """
        crits_of = [c for c in self.protocol.criteria if c.task == "smos"]
        if not crits_of:
            self.gold_prompts = set()
            return []
        usable = sorted(p for p in self.by_prompt if self.ref in self.by_prompt[p])
        rounds: list[list[TrialPlan]] = []
        for p in mine:
            cands = sorted(self.by_prompt[p])
            crits = tuple(c.name for c in crits_of if c.applies_to(self.by_prompt[p][cands[0]].category))
            if not crits:
                continue
            others = [q for q in usable if q != p]
            pool = [q for q in others if q not in heard and q not in self.gold_prompts] or [q for q in others if q not in heard] or others
            if not pool:
                self.skipped.append(
                    f"smos {', '.join(crits)}: prompt {p}: no other prompt has a reference candidate {self.ref!r} recording"
                )
                continue
            ref = self.slot("open_reference", self.by_prompt[pool[int(self.rng.integers(len(pool)))]][self.ref])
            turn = self.rotation("smos", *cands)
            for j in range(len(cands)):
                cand = cands[(j + turn) % len(cands)]
                trial = TrialPlan("smos", crits, (self.slot("stimulus", self.by_prompt[p][cand]),), ref, positions=[(cand, j)])
                while len(rounds) <= j:
                    rounds.append([])
                rounds[j].append(trial)
        self.gold_prompts = set()
        return [t for rnd in rounds for t in self.rng.permutation(np.array(rnd, dtype=object)).tolist()]

    def ab(self, mine: list[str], heard: list[str]) -> list[TrialPlan]:
        out: list[TrialPlan] = []
        ab_crits = [c for c in self.protocol.criteria if c.task == "ab"]
        for p in mine:
            cands = self.by_prompt[p]
            category = next(iter(cands.values())).category
            for a, b in combinations(sorted(cands), 2):
                has_ref = self.ref in (a, b)
                crits = tuple(c.name for c in ab_crits if c.applies_to(category) and (not has_ref or c.include_reference))
                if not crits:
                    continue
                if self.rotation("ab", a, b) % 2:
                    a, b = b, a
                out.append(
                    TrialPlan("ab", crits, (self.slot("stimulus", cands[a]), self.slot("stimulus", cands[b])), positions=[(a, 0), (b, 1)])
                )
        out += self.comparison_gold(heard)
        return [out[i] for i in self.rng.permutation(len(out))]

    def comparison_gold(self, mine: list[str]) -> list[TrialPlan]:
        """A/B gold trials: the reference against its scrambled copy, sides alternating.

        Both files have the reference's spectrum, loudness and length, so neither a quality proxy nor
        a file feature says which is which; the words do. The known answer sits on B (the rated
        sample): the scale's end that says B is better when B is the reference, the other end when
        B is the scrambled copy. Prompts come from those the rater does not otherwise hear.
        """
        crit = self.protocol.comparison_criterion()
        n = self.protocol.design.comparison_gold_items
        if crit is None or not n:
            return []
        usable = [p for p in self.by_prompt if self.ref in self.by_prompt[p] and crit.applies_to(self.by_prompt[p][self.ref].category)]
        pool = [p for p in usable if p not in mine] or usable
        if not pool:
            self.skipped.append(f"comparison gold items: no prompt has the reference candidate {self.ref!r} under criterion {crit.name!r}")
            return []
        out: list[TrialPlan] = []
        for _ in range(n):
            ref = self.by_prompt[pool[int(self.rng.integers(len(pool)))]][self.ref]
            src = f"gold_bad:{ref.prompt_id}"
            if self.rotation("comparison_gold") % 2 == 0:  # scrambled copy as B: B is worse
                a, b = self.slot("gold", ref), self.slot("gold", ref, source=src, candidate=GOLD_BAD, expected=crit.scale.min)
            else:
                a, b = self.slot("gold", ref, source=src, candidate=GOLD_BAD), self.slot("gold", ref, expected=crit.scale.max)
            out.append(TrialPlan("ab", (crit.name,), (a, b)))
        return out


def balance_audit(incidence: np.ndarray, k: int, trials: dict[str, list[TrialPlan]]) -> BalanceAudit:
    """Coverage, block sizes, pair concurrence and position counts of the design as built."""
    n_raters, n_prompts = incidence.shape
    per_rater = incidence.sum(axis=1)
    per_prompt = incidence.sum(axis=0)
    concurrence = (incidence.T @ incidence)[np.triu_indices(n_prompts, 1)]
    overlap = (incidence @ incidence.T)[np.triu_indices(n_raters, 1)]
    ideal = float(k * (per_rater.mean() - 1) / (n_prompts - 1)) if n_prompts > 1 else 0.0
    counts: dict[tuple[str, str], Counter[int]] = {}
    for plans in trials.values():
        for t in plans:
            for cand, pos in t.positions:
                counts.setdefault((t.task, cand), Counter())[pos] += 1
    width = {task: 1 + max(pos for (tk, _), c in counts.items() if tk == task for pos in c) for task, _ in counts}
    positions = tuple(
        PositionBalance(task=task, candidate=cand, counts=tuple(c[i] for i in range(width[task])))  # type: ignore[arg-type]
        for (task, cand), c in sorted(counts.items())
    )
    sizes = [len(v) for v in trials.values()]
    return BalanceAudit(
        prompts=n_prompts,
        raters=n_raters,
        raters_per_prompt=k,
        raters_per_prompt_min=int(per_prompt.min()),
        raters_per_prompt_max=int(per_prompt.max()),
        prompts_per_rater_min=int(per_rater.min()),
        prompts_per_rater_max=int(per_rater.max()),
        trials_per_rater_min=min(sizes),
        trials_per_rater_max=max(sizes),
        prompt_pair_concurrence_min=int(concurrence.min()) if concurrence.size else 0,
        prompt_pair_concurrence_max=int(concurrence.max()) if concurrence.size else 0,
        prompt_pair_concurrence_ideal=round(ideal, 4),
        rater_pair_overlap_min=int(overlap.min()) if overlap.size else 0,
        rater_pair_overlap_max=int(overlap.max()) if overlap.size else 0,
        positions=positions,
        position_spread_max=max((max(p.counts) - min(p.counts) for p in positions), default=0),
    )
