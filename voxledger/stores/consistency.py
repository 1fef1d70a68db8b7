"""Does a receipt agree with itself and with what it names? Checked when recorded and when served.

A receipt that hashes right and validates can still lie: a promotion copied from a genuine one
whose ``moves`` point the champion at a challenger it says failed, an evaluation whose summaries
count other rows than its generations. Anyone who can write to a shared store can push such a
receipt through ``Home.record`` or a pull. So every receipt kind with parts that must agree has a
check here (a closed registry keyed by ``kind``), run at three places: ``tasks.stage.record``
before a stage's receipt is committed, ``tasks.stage.reuse`` before a cached receipt is served (a
failing one is passed over, and the stage runs again), and the catalog's promotion projector, the
one place an alias moves: an inconsistent promotion keeps its rows as evidence but moves no alias,
whichever way it arrived (record, pull, rebuild). What each check compares:

- ``promotion``: each rule's verdict follows from its value, op and threshold; each challenger's
  verdict from its rules; ``promoted`` names a challenger that passed, and the status says whether
  one did; the policy (read from the plan receipt it names) moves its champion alias only to the
  promoted tree and its candidate alias only to the lowest-CV tree, each alias at most once; the
  line it names is its training run's and its policy's (no promotion moves another line's aliases).
- ``evaluation``: the generation and observation rows (its outputs) are as many as it says, each
  candidate's ``n_rows`` and ``invalid_rate`` follow from its generation rows, and every row names a
  candidate and prompt of its plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.errors import VoxledgerError
from voxledger.schemas.evaluation import EvaluationReceipt
from voxledger.schemas.promotion import PromotionReceipt, model_line

Load = Callable[[str], bytes]
"""Reads a stored object by digest, verified (``LocalBlobStore.get_bytes``)."""
Check = Callable[[Any, Load | None], list[str]]


def _rule_verdicts(receipt: PromotionReceipt) -> list[str]:
    out = []
    for d in receipt.result.challengers:
        for r in d.rules:
            holds = r.value is not None and (r.value <= r.threshold if r.op == "<=" else r.value >= r.threshold)
            if r.passed != holds:
                out.append(
                    f"challenger {d.name}: rule {r.statistic}({r.metric}) says passed={r.passed} for value {r.value} {r.op} {r.threshold}"
                )
        if d.passed != all(r.passed for r in d.rules):
            out.append(f"challenger {d.name} says passed={d.passed} but its rules say {all(r.passed for r in d.rules)}")
    return out


def _policy_doc(receipt: PromotionReceipt, load: Load | None) -> dict[str, Any] | None:
    """The policy document the promotion names, None when it cannot be read."""
    policy_rid = next((i.sha256 for i in receipt.inputs if i.role == "policy" and i.ref == "receipt"), None)
    if policy_rid is None or load is None:
        return None
    try:
        plan = json.loads(load(policy_rid))
        doc = json.loads(load(plan["subjects"][0]["sha256"]))
    except (VoxledgerError, ValueError, KeyError, IndexError, TypeError):
        return None
    return doc if isinstance(doc, dict) else None


def _policy_aliases(receipt: PromotionReceipt, load: Load | None) -> tuple[str, str] | None:
    """(champion alias, candidate alias) of the policy the promotion names, None when it cannot be read."""
    doc = _policy_doc(receipt, load)
    if doc is None:
        return None
    return str(doc.get("alias", "champion")), str(doc.get("candidate_alias", "candidate"))


UNKNOWN_LINE = "unknown/unknown"
"""The line of a promotion written before lines whose training run is not in the store (the catalog
migration ``0015_model_lines`` names it the same way)."""


def run_line(receipt: PromotionReceipt, load: Load | None) -> str | None:
    """The model line of the training run a promotion judged (``VOICE/BACKEND``), None when it cannot be read."""
    if load is None:
        return None
    try:
        params = json.loads(load(receipt.parameters.training_run))["parameters"]
        return model_line(params["effective_config"]["plan"].get("new_speaker"), params["backend"])
    except (VoxledgerError, ValueError, KeyError, TypeError, AttributeError):
        return None


def promotion_line(receipt: PromotionReceipt, load: Load | None) -> str:
    """The line whose aliases a promotion moves: the one it names, or (written before lines) its run's."""
    return receipt.parameters.line or run_line(receipt, load) or UNKNOWN_LINE


def _line_agreement(receipt: PromotionReceipt, load: Load | None) -> list[str]:
    """A promotion that names a line names its run's line and its policy's (a cross-line move is refused)."""
    named = receipt.parameters.line
    if named is None:
        return []
    out = []
    own = run_line(receipt, load)
    if own is not None and own != named:
        out.append(f"moves aliases of line {named!r}, but its training run belongs to line {own!r}")
    doc = _policy_doc(receipt, load)
    if doc is not None and doc.get("line") not in (None, named):
        out.append(f"moves aliases of line {named!r}, but its policy names line {doc.get('line')!r}")
    return out


def check_promotion(receipt: PromotionReceipt, load: Load | None) -> list[str]:
    """See the module docstring."""
    out = _rule_verdicts(receipt) + _line_agreement(receipt, load)
    result = receipt.result
    by_name = {d.name: d for d in result.challengers}
    promoted = by_name.get(result.promoted) if result.promoted is not None else None
    if result.promoted is not None and (promoted is None or not promoted.passed):
        out.append(f"promoted {result.promoted!r} is not a challenger that passed every gate")
    if (receipt.status == "succeeded") != (result.promoted is not None):
        out.append(f"status {receipt.status} but promoted is {result.promoted!r}")
    aliases = [m.alias for m in result.moves]
    if len(aliases) != len(set(aliases)):
        out.append(f"an alias moves twice ({aliases})")
    named = _policy_aliases(receipt, load)
    if named is None:
        out.append("its promotion policy (the plan receipt it names) cannot be read, so its alias moves cannot be checked")
        return out
    champion, candidate = named
    best_cv = min(result.challengers, key=lambda d: (d.cv_loss, d.epoch)) if result.challengers else None
    for m in result.moves:
        if m.alias == champion and (promoted is None or m.target_sha256 != promoted.tree_sha256):
            out.append(
                f"moves {champion!r} to {m.target_sha256[:12]}, which is not the tree of the promoted challenger ({result.promoted!r})"
            )
        elif m.alias == candidate and (best_cv is None or m.target_sha256 != best_cv.tree_sha256):
            out.append(f"moves {candidate!r} to {m.target_sha256[:12]}, which is not the lowest-CV challenger's tree")
        elif m.alias not in (champion, candidate):
            out.append(f"moves alias {m.alias!r}, which its policy does not name")
    return out


def check_evaluation(receipt: EvaluationReceipt, load: Load | None) -> list[str]:
    """See the module docstring."""
    if load is None:
        return []
    try:
        gens = json.loads(load(receipt.subject("generations").sha256))
        n_obs = len(json.loads(load(receipt.subject("observations").sha256)))
    except (VoxledgerError, ValueError, KeyError, StopIteration) as exc:
        return [f"its generation or observation rows cannot be read ({str(exc)[:120]})"]
    out = []
    p = receipt.parameters
    if (len(gens), n_obs) != (p.n_generations, p.n_observations):
        out.append(f"says {p.n_generations} generations and {p.n_observations} observations; its rows hold {len(gens)} and {n_obs}")
    names = {c.name for c in p.candidates}
    for s in receipt.result.summaries:
        rows = [g for g in gens if g["candidate"] == s.candidate]
        invalid = sum(not g["valid"] for g in rows) / max(1, len(rows))
        if s.candidate not in names or s.n_rows != len(rows) or abs(s.invalid_rate - invalid) > 1e-9:
            out.append(
                f"summary of {s.candidate!r} (n_rows {s.n_rows}, invalid_rate {s.invalid_rate:g}) disagrees with its rows ({len(rows)}, {invalid:g})"
            )
    strays = sorted({g["candidate"] for g in gens} - names)
    if strays:
        out.append(f"generation rows name candidates {strays} the evaluation does not list")
    return out


CHECKS: dict[str, Check] = {"promotion": check_promotion, "evaluation": check_evaluation}
"""Receipt kind -> its consistency check; kinds without parts that must agree are not listed."""


def inconsistencies(receipt: ReceiptBase, load: Load | None) -> list[str]:
    """Every way ``receipt`` disagrees with itself or what it names (empty when it agrees or has no check);
    without ``load`` only what the receipt holds itself is compared."""
    check = CHECKS.get(str(getattr(receipt, "kind", "")))
    return check(receipt, load) if check is not None else []
