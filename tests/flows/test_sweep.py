"""A sweep of 4 tiny members on the test corpus, 2 at a time: ordinary member runs, one gate decision, a re-run all cached."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.flows.conftest import write_plans
from tests.stores import test_s3
from voxledger.flows.audit import audit
from voxledger.flows.sweep import sweep
from voxledger.flows.train import train
from voxledger.schemas.errors import PlanError
from voxledger.schemas.evaluation import EvaluationReceipt
from voxledger.schemas.promotion import PromotionReceipt
from voxledger.schemas.sweep import SweepPlan, sweep_members
from voxledger.schemas.training import CheckpointReceipt, TrainingPlan, TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.tasks.plans import load_plan, plan_digest
from voxledger.tasks.stages.sweep import members

pytestmark = pytest.mark.prefect

endpoint, client, make_store = test_s3.endpoint, test_s3.client, test_s3.make_store

SWEEP = {
    "kind": "sweep_plan",
    "name": "lr-seed",
    "training": "lora.yaml",
    "policy": "promo.yaml",
    "grid": {"peak_lr": [0.002, 0.004], "seed": [0, 1]},
    "workers": 2,
    "threads_per_member": 1,
}


@pytest.fixture(scope="module")
def trained_base(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str, str]:
    """(home, plans, audit id, base tree): the smallest base the flow tests train (2 epochs x 3 steps)."""
    root = tmp_path_factory.mktemp("sweep")
    plans = write_plans(root / "plans")
    lora = yaml.safe_load((plans / "lora.yaml").read_text())
    (plans / "lora.yaml").write_text(yaml.safe_dump(lora | {"steps_per_epoch": 2}))
    (plans / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    home = root / "h"
    audited = audit(str(home), str(corpus), str(plans / "audit.yaml"))
    base = train(str(home), str(corpus), audited.receipt_id, str(plans / "base.yaml"))
    return home, plans, audited.receipt_id, base.receipt.subject("best").sha256


def test_members_are_derived_deterministically(trained_base: tuple[Path, Path, str, str]) -> None:
    _, plans, _, _ = trained_base
    sweep_plan, training = load_plan(plans / "sweep.yaml", SweepPlan), load_plan(plans / "lora.yaml", TrainingPlan)
    derived = sweep_members(sweep_plan, training)
    assert [m.name for m, _ in derived] == ["m0", "m1", "m2", "m3"]
    assert [(p.optim.peak_lr, p.seed) for _, p in derived] == [(0.002, 0), (0.002, 1), (0.004, 0), (0.004, 1)]
    assert {p.threads for _, p in derived} == {1} and len({plan_digest(p) for _, p in derived}) == 4
    assert [plan_digest(p) for _, p in sweep_members(sweep_plan, training)] == [plan_digest(p) for _, p in derived]
    with pytest.raises(PlanError, match="exactly one of `grid`"):
        bad = plans / "bad-sweep.yaml"
        bad.write_text(yaml.safe_dump({k: v for k, v in SWEEP.items() if k != "grid"}))
        load_plan(bad, SweepPlan)


def test_a_sweep_trains_every_member_once_and_judges_all_in_one_decision(corpus: Path, trained_base: tuple[Path, Path, str, str]) -> None:
    home_dir, plans, audit_rid, base = trained_base
    first = sweep(str(home_dir), str(corpus), audit_rid, str(plans / "sweep.yaml"), str(plans), base)
    h = Home(home_dir)
    r = first.receipt.result
    assert not first.cached and r.members_trained == 4 and [m.name for m in r.members] == ["m0", "m1", "m2", "m3"]
    from voxledger.tasks.plans import PlanRef

    refs = members(PlanRef.load(plans / "sweep.yaml", SweepPlan), PlanRef.load(plans / "lora.yaml", TrainingPlan))
    for m, (_, ref) in zip(r.members, refs, strict=True):
        run = h.receipts.read(m.training_run, TrainingRunReceipt)  # an ordinary training run of the member's own plan
        assert run.parameters.bound.plan_sha256 == m.plan_sha256 == ref.sha256 and run.parameters.bound.base_sha256 == base
        assert run.parameters.effective_config["plan"]["optim"]["peak_lr"] == m.settings.peak_lr  # type: ignore[index]
    decision = h.receipts.read(r.promotion, PromotionReceipt)
    judged = {c.name.rsplit("-epoch", 1)[0] for c in decision.result.challengers}
    assert judged == {"m0", "m1", "m2", "m3"} and len(decision.result.challengers) == r.family.challengers >= 4
    assert r.family.members == 4 and r.family.method == "bonferroni" and r.family.rules == 1
    assert r.family.per_challenger_confidence == pytest.approx(1 - 0.05 / r.family.challengers)
    assert (
        "Bonferroni over the" in (decision.result.error_control or "")
        and f"{r.family.challengers} challengers" in decision.result.error_control
    )  # type: ignore[operator]
    assert r.promoted is not None and decision.result.promoted == r.promoted  # the test policy's rule always passes: one winner
    assert r.promoted_member == r.promoted.rsplit("-epoch", 1)[0]
    winner = next(m for m in r.members if m.name == r.promoted_member)
    assert decision.parameters.training_run == winner.training_run
    champion = [mv for mv in decision.result.moves if mv.alias == "champion"]
    assert len(champion) == 1 and champion[0].target_sha256 == next(
        c.tree_sha256 for c in decision.result.challengers if c.name == r.promoted
    )
    with h.catalog.connect(read_only=True) as con:
        gates = con.execute("SELECT count(*) FROM receipts WHERE kind = 'evaluation'").fetchone()
    assert gates == (1,)  # one gate evaluation for every challenger of every member

    again = sweep(str(home_dir), str(corpus), audit_rid, str(plans / "sweep.yaml"), str(plans), base)
    assert again.cached and again.receipt_id == first.receipt_id  # every member, the decision and the sweep from cache
    with h.catalog.connect(read_only=True) as con:
        runs = con.execute("SELECT count(*) FROM receipts WHERE kind = 'training_run'").fetchone()
    assert runs == (5,)  # the base and the 4 members, none trained twice


def test_the_sweep_report_dashboard_and_provenance_name_the_winning_member(
    corpus: Path, trained_base: tuple[Path, Path, str, str], tmp_path: Path
) -> None:
    import json

    from click.testing import CliRunner

    from voxledger.cli import main
    from voxledger.dashboards.report import build_dashboard

    home_dir, plans, audit_rid, base = trained_base
    out = sweep(str(home_dir), str(corpus), audit_rid, str(plans / "sweep.yaml"), str(plans), base)  # stored above
    r, h = out.receipt.result, Home(home_dir)

    def cli(*args: str) -> str:
        res = CliRunner().invoke(main, ["--home", str(home_dir), *args])
        assert res.exit_code == 0, res.output
        return res.output

    decision = h.receipts.read(r.promotion, PromotionReceipt)
    gate = h.receipts.read(decision.parameters.evaluation, EvaluationReceipt).result
    means = {(c.candidate, metric): iv for c in gate.summaries for metric, iv in c.overall.items()}
    rep = json.loads(cli("sweep", "report", out.receipt_id[:12], "--json"))
    assert rep["sweep"] == out.receipt_id and rep["name"] == "lr-seed" and rep["axes"] == ["peak_lr", "seed"]
    assert [m["name"] for m in rep["members"]] == ["m0", "m1", "m2", "m3"] and rep["promoted"] == r.promoted
    assert [m["name"] for m in rep["members"] if m["won"]] == [r.promoted_member] and r.promoted in rep["why"]
    for m, stored in zip(rep["members"], r.members, strict=True):
        run = h.receipts.read(stored.training_run, TrainingRunReceipt).result
        assert [e["cv_loss"] for e in m["curve"]] == [e.cv_loss for e in run.epochs]  # the member's CV curve
        assert len(m["gate"]) == stored.challengers * r.family.rules
        for g in m["gate"]:  # each rule's value with the interval it was read from (challenger_mean: the mean's interval)
            iv = means[(g["challenger"], g["metric"])]
            assert g["statistic"] == "challenger_mean" and (g["value"], g["low"], g["high"]) == (iv.mean, iv.low, iv.high), g
    assert sum(len(m["gate"]) for m in rep["members"]) == r.family.challengers * r.family.rules
    text = cli("sweep", "report")  # the newest sweep
    assert f"sweep lr-seed (receipt {out.receipt_id})" in text and f"promoted {r.promoted} (member {r.promoted_member})" in text
    assert all(f" m{i} (peak_lr=" in text for i in range(4)) and "CV loss per epoch" in text

    page = build_dashboard(h.catalog, tmp_path / "dash.html").read_text()
    section = page.split('<h2 id="sweep">', 1)[1].split("<h2 ", 1)[0]
    assert 'class="sweep-grid"' in section and 'class="sweep-gate"' in section and "<svg" in section
    assert all(f"m{i}" in section for i in range(4)) and r.promoted in section

    champ = json.loads(cli("provenance", "champion-at", "2100-01-01T00:00:00Z", "--json"))
    assert [(c["receipt"], c["sweep_member"]) for c in champ] == [(r.promotion, r.promoted_member)]  # the member behind the champion


def test_a_grown_sweep_trains_only_its_new_members(corpus: Path, trained_base: tuple[Path, Path, str, str]) -> None:
    """A member is its derived plan: the same values under the same sweep name are the same run, so a
    sweep grown by an axis value (or run again after being killed) trains only what is not stored."""
    home_dir, plans, audit_rid, base = trained_base
    first = sweep(str(home_dir), str(corpus), audit_rid, str(plans / "sweep.yaml"), str(plans), base)  # stored when run above
    (plans / "sweep-6.yaml").write_text(yaml.safe_dump(SWEEP | {"grid": {"peak_lr": [0.002, 0.004, 0.008], "seed": [0, 1]}}))
    grown = sweep(str(home_dir), str(corpus), audit_rid, str(plans / "sweep-6.yaml"), str(plans), base).receipt.result
    assert [m.name for m in grown.members] == ["m0", "m1", "m2", "m3", "m4", "m5"] and grown.members_trained == 2
    assert [m.training_run for m in grown.members[:4]] == [m.training_run for m in first.receipt.result.members]
    assert grown.family.members == 6 and grown.promotion != first.receipt.result.promotion


def doc_commands() -> list[str]:
    """The lines of docs/sweeps.md's ``# doc-test: sweep`` block."""
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "sweeps.md").read_text()
    (block,) = re.findall(r"```bash\n# doc-test: sweep\n(.*?)```", text, flags=re.S)
    return [line for line in block.splitlines() if line.strip()]


def test_the_sweeps_page_runs_as_written(
    corpus: Path, trained_base: tuple[Path, Path, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re
    import shlex

    from click.testing import CliRunner

    from voxledger.cli import main

    home_dir, plans, audit_rid, base = trained_base
    (tmp_path / "plans").symlink_to(plans)
    monkeypatch.chdir(tmp_path)
    commands = doc_commands()
    assert [c.split()[:3] for c in commands] == [
        ["voxledger", "sweep", "run"],
        ["voxledger", "receipt", "show"],
        ["voxledger", "receipt", "show"],
        ["voxledger", "sweep", "report"],
        ["voxledger", "alias", "history"],
        ["voxledger", "lineage", "$PROMOTION"],
    ]
    ids = {"$CORPUS": str(corpus), "$AUDIT": audit_rid, "$BASE": base}
    outputs = []
    for line in commands:
        for name, value in ids.items():
            line = line.replace(name, value)
        r = CliRunner().invoke(main, ["--home", str(home_dir), *shlex.split(line)[1:]])
        assert r.exit_code == 0, (line, r.output)
        outputs.append(r.output)
        if "$SWEEP" not in ids:
            ids["$SWEEP"] = re.search(r"sweep receipt ([0-9a-f]{64})", r.output).group(1)  # type: ignore[union-attr]
            ids["$PROMOTION"] = re.search(r"promotion receipt ([0-9a-f]{64})", r.output).group(1)  # type: ignore[union-attr]
    assert "4 members" in outputs[0] and "in one family (bonferroni)" in outputs[0]
    assert '"kind": "sweep"' in outputs[1] and '"kind": "promotion"' in outputs[2]
    assert all(f"sweep_member:m{i}" in outputs[2] for i in range(4))  # the decision names every member's run
    assert "promoted " in outputs[3] and "(member m" in outputs[3] and "CV loss per epoch" in outputs[3]


def _member_outputs(home: Home, runs: list[str]) -> list[tuple[str, ...]]:
    """Each member run's output digests (best and last trees, every checkpoint tree): what two
    machines must agree on (receipt ids differ: they carry times and the audit each home recorded)."""
    out = []
    for rid in runs:
        run = home.receipts.read(rid, TrainingRunReceipt)
        checkpoints = sorted(i.sha256 for i in run.inputs if i.role.startswith("checkpoint"))
        trees = [home.receipts.read(c, CheckpointReceipt).subject("checkpoint").sha256 for c in checkpoints]
        out.append((*(s.sha256 for s in run.subjects), *sorted(trees)))
    return out


def test_members_on_two_workers_sharing_one_bucket_match_the_local_pool_and_survive_a_killed_worker(
    corpus: Path, trained_base: tuple[Path, Path, str, str], make_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same sweep with ``work_pool``: members are flow runs on two ``prefect worker start`` processes
    (each its own home) sharing one moto bucket. One worker is SIGKILLed while its member trains; its
    flow run is marked Crashed here, as the automation ``voxledger deploy`` installs does once the run's
    heartbeats stop (tests/flows/test_zombie.py, 40 s and more); the dispatcher starts that member
    again and the surviving worker trains it. Same member outputs and decision as the local pool, one
    run per member in the bucket, and a second run of the sweep dispatches nothing."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType, FlowRunFilterTags
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    from tests.flows.test_workers import _pull, _stop, _worker
    from tests.stores import test_s3

    home_dir, plans, audit_rid, base = trained_base
    local = sweep(str(home_dir), str(corpus), audit_rid, str(plans / "sweep.yaml"), str(plans), base).receipt  # stored above
    remote = make_store()
    s3_env = {**test_s3.FAKE_ENV, "VOXLEDGER_S3_BUCKET": remote.config.bucket, "VOXLEDGER_S3_PREFIX": "team",
              "VOXLEDGER_S3_ENDPOINT_URL": str(remote.config.endpoint_url)}  # fmt: skip
    for k, v in s3_env.items():
        monkeypatch.setenv(k, v)
    # the dispatcher's home: its own audit and the same base, trained again (bitwise the same on one machine)
    dispatcher = tmp_path / "dispatcher"
    audited = audit(str(dispatcher), str(corpus), str(plans / "audit.yaml")).receipt_id
    assert train(str(dispatcher), str(corpus), audited, str(plans / "base.yaml")).receipt.subject("best").sha256 == base
    (plans / "sweep-pool.yaml").write_text(yaml.safe_dump(SWEEP | {"work_pool": "sweep-pool"}))

    homes = [tmp_path / "worker-0", tmp_path / "worker-1"]
    workers = [_worker("sweep-pool", h, s3_env, tmp_path / f"worker-{i}.log") for i, h in enumerate(homes)]
    running = FlowRunFilter(tags=FlowRunFilterTags(all_=["sweep:lr-seed"]), state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING])))  # fmt: skip
    try:
        with ThreadPoolExecutor(1) as pool:
            started = pool.submit(sweep, str(dispatcher), str(corpus), audited, str(plans / "sweep-pool.yaml"), str(plans), base)
            deadline = time.monotonic() + 300
            while not (busy := [i for i, h in enumerate(homes) if list(h.glob("runs/*"))]):  # a member is training
                assert time.monotonic() < deadline and not started.done(), [p.read_text()[-2000:] for p in tmp_path.glob("*.log")]
                time.sleep(0.05)
            victim, victim_home = workers[busy[0]], homes[busy[0]]
            with get_client(sync_client=True) as client:
                while not (killed := [r for r in client.read_flow_runs(flow_run_filter=running) if _runs_in(r, victim_home)]):
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
                os.killpg(victim.pid, signal.SIGKILL)  # the worker
                for r in killed:  # and the member's flow-run process (Prefect starts it in a session of its own)
                    os.killpg(os.getpgid(int(r.infrastructure_pid)), signal.SIGKILL)
                victim.wait()
                for r in killed:  # what the heartbeat automation does once the window passes
                    client.set_flow_run_state(r.id, Crashed(message="its worker was killed"), force=True)
            out = started.result(timeout=600)
        # run again (the survivor still up): every member is served from the home, nothing is dispatched
        again = sweep(str(dispatcher), str(corpus), audited, str(plans / "sweep-pool.yaml"), str(plans), base)
    finally:
        for w in workers:
            _stop(w)
    r = out.receipt.result
    assert r.members_trained == 4 and [m.name for m in r.members] == ["m0", "m1", "m2", "m3"] and out.receipt.parameters.work_pool
    d = Home(dispatcher)
    assert _member_outputs(d, [m.training_run for m in r.members]) == _member_outputs(
        Home(home_dir), [m.training_run for m in local.result.members]
    )  # the same member runs, bit for bit
    assert (r.promoted, r.family) == (local.result.promoted, local.result.family)  # the same decision
    ours, theirs = d.receipts.read(r.promotion, PromotionReceipt), Home(home_dir).receipts.read(local.result.promotion, PromotionReceipt)
    assert [(c.name, c.tree_sha256, c.passed) for c in ours.result.challengers] == [
        (c.name, c.tree_sha256, c.passed) for c in theirs.result.challengers
    ]
    assert again.cached and again.receipt_id == out.receipt_id
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=["sweep:lr-seed"])))
        slots = client.read_global_concurrency_limit_by_name("voxledger-devices-sweep-pool")
    assert len(runs) == 5 and sum(x.state_type == StateType.CRASHED for x in runs) == 1  # the killed member started once more
    assert slots.limit == 2  # the pool's device slots: the sweep's `workers`
    check = Home(tmp_path / "check")
    _pull(check, s3_env)
    with check.catalog.connect(read_only=True) as con:
        plan_shas = con.execute(
            "SELECT doc->>'$.parameters.bound.plan_sha256' FROM receipts WHERE kind = 'training_run' AND status = 'succeeded'"
        ).fetchall()
    # in the bucket: the base and exactly one run per member, none lost, none twice
    assert sorted(s for (s,) in plan_shas if s in {m.plan_sha256 for m in r.members}) == sorted(m.plan_sha256 for m in r.members)
    assert len(plan_shas) == 5


def _runs_in(run: Any, home: Path) -> bool:
    """Whether a flow run's process (a worker's child) works in ``home`` (its environment says so)."""
    try:
        env = Path(f"/proc/{int(run.infrastructure_pid or 0)}/environ").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return False
    return f"VOXLEDGER_HOME={home}".encode() in env
