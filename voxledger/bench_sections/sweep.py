"""``sweep``: four tiny members trained two at a time against the same four one at a time, and the gate's cost per member.

One run builds the demo corpus, audits it and trains a tiny base once; two copies of that home
then train the same four members (learning rate x seed), one copy with one worker and one with
two (each member in its own process with one torch thread, as ``voxledger sweep run`` trains them),
so neither is served from the other's cache. Beside it, the ceiling: pure-Python work in two
processes at once against one after the other, measured in the same run, interleaved with the
members (on a machine shared with other work, two cores are not always two free cores); each
figure is the best of ``ROUNDS`` rounds.
The gate's cost per member: the one gate over all four members against the same gate over one
member, the difference per added member. Then the sweep-gate statistics rows (``stats_sweep``).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from voxledger.bench_sections.common import Figure, audit_policy, timed, train_plan
from voxledger.bench_sections.stats_sweep import sweep_gate_rows
from voxledger.schemas.training import BackendName

if TYPE_CHECKING:
    from voxledger.stores.home import Home

MEMBERS = {"peak_lr": [0.002, 0.004], "seed": [0, 1]}
TARGET = "spk-t1"  # the demo corpus's held-out voice
ROUNDS = 2
"""Rounds of (ceiling, sequence, 2 workers), interleaved; each figure is the best of its rounds."""


def _policy(corpus: Path) -> dict[str, Any]:
    """A gate on two of the target voice's test prompts (speaker references from its dev clip)."""
    rows = [json.loads(line) for line in (corpus / "manifest.jsonl").read_text().splitlines()]
    test = [r for r in rows if r["speaker"] == TARGET and r["split"] == "test"][:2]
    ref = next(r for r in rows if r["speaker"] == TARGET and r["split"] == "target_dev")["audio"]
    prompts = [{"id": f"p{i}", "category": "short", "text": r["text"], "recording": r["audio"]} for i, r in enumerate(test)]
    return {
        "kind": "promotion_policy",
        "name": "bench-sweep-promo",
        "best_k": 1,
        "baseline_speaker": "spk-b1",
        "gate_plan": {"name": "g", "prompts": prompts, "seeds": [0], "speaker_references": {f"p{i}:0": ref for i in range(len(prompts))}, "metrics": {"mos": None}},
        "rules": [{"metric": "content_gate_pass", "statistic": "challenger_mean", "op": ">=", "threshold": 0.0}],
    }  # fmt: skip


def _lora(quick: bool) -> dict[str, Any]:
    plan = train_plan(True, name="bench-sweep-lora", mode="lora", train_splits=("target_train",), cv_splits=("target_dev",),
                      new_speaker=TARGET, lora={"r": 8, "alpha": 16}, steps_per_epoch=3 if quick else 8)  # fmt: skip
    doc: dict[str, Any] = plan.model_dump(mode="json")
    return doc


def _spin(n: int) -> int:
    """Pure-Python work with no I/O: what two processes can do side by side on this machine right now."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def _ceiling(n: int, backend: BackendName) -> tuple[float, float]:
    """The same CPU-bound work twice: seconds one after the other and seconds in 2 processes at once
    (their ratio is the speed-up's ceiling here)."""
    from concurrent.futures import ProcessPoolExecutor

    from voxledger.tasks.stages.sweep.members import member_processes

    with ProcessPoolExecutor(2, mp_context=member_processes(backend)) as pool:
        list(pool.map(time.sleep, [0.5, 0.5]))  # the fork server and both processes up before the clock
        one, _ = timed(lambda: [pool.submit(_spin, n).result() for _ in range(2)])
        two, _ = timed(lambda: list(pool.map(_spin, [n, n])))
    return one, two


def _train_fresh(base: Path, dest: Path, train: Callable[[Home], list[Any]]) -> tuple[float, Home, list[tuple[str, str]]]:
    """Seconds ``train`` takes on a fresh copy of home ``base`` at ``dest``, that home, and each member's (name, run id)."""
    from voxledger.stores.home import Home

    shutil.copytree(base, dest, ignore=shutil.ignore_patterns("prefect", "*.lock"))
    home = Home(dest)
    wall, outcomes = timed(lambda: train(home))
    if any(o.cached for _, _, o in outcomes):
        raise RuntimeError("a member was served from cache: the comparison needs fresh homes")
    return wall, home, [(m.name, o.receipt_id) for m, _, o in outcomes]


def bench_sweep(work: Path, quick: bool) -> list[Figure]:
    """Members on 2 workers vs in sequence (same run, same 4 members), the gate's extra cost per member, the null rows."""
    import yaml

    from voxledger.schemas.sweep import SweepPlan
    from voxledger.schemas.training import TrainingPlan
    from voxledger.stores.home import Home
    from voxledger.tasks.corpus.demo import build_demo_corpus
    from voxledger.tasks.plans import PlanRef
    from voxledger.tasks.stages.audit import audit_corpus_fn
    from voxledger.tasks.stages.sweep import beside, gate_members, members, train_members_locally
    from voxledger.tasks.stages.train import run_training

    corpus = work / "sweep-corpus"
    build_demo_corpus(corpus, size="tiny" if quick else "small")
    plans = work / "sweep-plans"
    plans.mkdir()
    (plans / "lora.yaml").write_text(yaml.safe_dump(_lora(quick)))
    (plans / "promo.yaml").write_text(yaml.safe_dump(_policy(corpus)))
    (plans / "sweep.yaml").write_text(
        yaml.safe_dump({"kind": "sweep_plan", "name": "bench", "training": "lora.yaml", "policy": "promo.yaml", "grid": MEMBERS})
    )
    base_home = Home(work / "sweep-home")
    audit = audit_corpus_fn(base_home, corpus, audit_policy(), policy_name="bench-audit.yaml").receipt_id
    base = (
        run_training(base_home, corpus, audit, train_plan(True, steps_per_epoch=3), plan_name="bench-base.yaml")
        .receipt.subject("best")
        .sha256
    )
    plan = PlanRef.load(plans / "sweep.yaml", SweepPlan)
    training, policy = beside(plan, plans)
    listed = members(plan, training)
    spins, backend = 3_000_000 if quick else 20_000_000, training.validated(TrainingPlan).backend
    walls: dict[int, list[float]] = {1: [], 2: []}
    ceiling: list[tuple[float, float]] = []
    homes: dict[int, Home] = {}
    trained: dict[int, list[tuple[str, str]]] = {}
    for r in range(ROUNDS):  # interleaved, each figure the best of its rounds: other work's load moves from second to second
        ceiling.append(_ceiling(spins, backend))  # the first also starts the members' fork server before the members' clocks
        for workers in (1, 2):
            wall, homes[workers], trained[workers] = _train_fresh(
                base_home.root, work / f"sweep-home-{workers}-{r}",
                lambda h, w=workers: train_members_locally(h, corpus, audit, listed, base_sha=base, workers=w, flow="bench"),  # type: ignore[misc]
            )  # fmt: skip
            walls[workers].append(wall)
    best = {w: min(t) for w, t in walls.items()}
    gate_all, _ = timed(lambda: gate_members(homes[2], corpus, trained[2], policy, flow="bench"))
    gate_one, _ = timed(lambda: gate_members(homes[1], corpus, trained[1][:1], policy, flow="bench"))
    n = len(listed)
    label = f"sweep of {n} tiny LoRA members ({_lora(quick)['steps_per_epoch']} steps x 2 epochs each, 1 torch thread)"
    return [
        Figure(f"{label}: in sequence (1 worker), best of {ROUNDS}", best[1], "s"),
        Figure(f"{label}: 2 workers, best of {ROUNDS}", best[2], "s"),
        Figure(f"{label}: speed-up of 2 workers over 1", best[1] / best[2], "x", ">= 1.6"),
        Figure(
            f"the same pure-Python work in 2 processes over 1 after the other, best of {ROUNDS} interleaved with the members "
            "(this machine's ceiling now)",
            min(one for one, _ in ceiling) / min(two for _, two in ceiling),
            "x",
        ),
        Figure(f"sweep gate over {n} members ({2 * n} challengers at most, 2 prompts)", gate_all, "s"),
        Figure("sweep gate over 1 member (the same policy)", gate_one, "s"),
        Figure("sweep gate: extra cost per added member", (gate_all - gate_one) / (n - 1), "s/member"),
        *sweep_gate_rows(40 if quick else 300, seed=41),
    ]
