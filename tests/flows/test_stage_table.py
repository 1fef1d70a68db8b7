"""The stage table is the one place a stage is spelled; plans are read once; flows keep the
caller's home settings (``--lock-timeout``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.flows.conftest import run
from tests.flows.toy_stage import toy, toy_register
from voxledger.cli import main
from voxledger.flows import stages as stage_table_module
from voxledger.flows.deploy import deployment_specs
from voxledger.flows.pipeline import _Dispatch, stage_arguments
from voxledger.flows.stages import STAGES, StageSpec
from voxledger.schemas.audit import AuditPolicy
from voxledger.schemas.core import PlanReceipt
from voxledger.schemas.pipeline import PipelinePlan, PipelineRunReceipt
from voxledger.schemas.training import TrainingPlan
from voxledger.stores.home import Home, HomeRef
from voxledger.tasks.plans import PlanRef, load_plan, plan_digest
from voxledger.tasks.stages.contract import StageContext

pytestmark = pytest.mark.prefect

TOY = StageSpec("toy", toy, toy_register, PlanReceipt, lambda ctx: {"corpus": ctx.corpus}, "audit_policy", AuditPolicy)


@pytest.fixture
def with_toy(monkeypatch: pytest.MonkeyPatch) -> tuple[StageSpec, ...]:
    """The table with the toy stage added after the audit: one entry."""
    table = (STAGES[0], TOY, *STAGES[1:])
    monkeypatch.setattr(stage_table_module, "STAGES", table)
    return table


def test_a_toy_stage_is_one_table_entry(first_run, corpus: Path, with_toy: tuple[StageSpec, ...]) -> None:  # type: ignore[no-untyped-def]
    home_dir, plans, first, _ = first_run
    # the pipeline, run here: the toy runs after the audit and its record is in the pipeline receipt
    summary = run(home_dir, corpus, plans)
    enabled = [s.name for s in with_toy if s.enabled(load_plan(plans / "pipeline.yaml", PipelinePlan))]
    assert "import_base" not in enabled and "toy" in enabled  # this plan trains its base
    assert [s["stage"] for s in summary["stages"]] == enabled
    assert summary["toy"]["status"] == "succeeded" and summary["toy"]["receipt_id"]
    receipt = Home(home_dir).receipts.read(summary["pipeline_receipt"], PipelineRunReceipt)
    assert "toy" in [s.stage for s in receipt.stages]
    assert ("stage:toy", summary["toy"]["receipt_id"]) in {(i.role, i.sha256) for i in receipt.inputs}
    # dispatched: with the toy on its own pool the pipeline starts the toy's deployment, with the same arguments
    plan = load_plan(plans / "pipeline.yaml", PipelinePlan).model_copy(update={"stage_pools": {"toy": "toy-pool"}})
    ctx = StageContext(
        HomeRef(root=str(home_dir)), str(corpus), plan, {"audit_policy": PlanRef.load(plans / "audit.yaml", AuditPolicy)}, None
    )
    dispatch = _Dispatch(ctx, enabled=True)
    assert dispatch.remote("toy") and not dispatch.remote("audit")
    assert TOY.deployment(plan) == "toy/p-toy"
    assert stage_arguments(TOY, ctx) == {"plan": ctx.plans["audit_policy"], "corpus": str(corpus)}
    # deploy: a deployment of the toy's flow on its pool, loaded from this checkout
    specs = {s.name: s for s in deployment_specs(plan, plans / "pipeline.yaml", home="/h", corpus="/c")}
    assert specs["p-toy"].entrypoint == "tests/flows/toy_stage.py:toy" and specs["p-toy"].work_pool == "toy-pool"
    assert specs["p-toy"].parameters == {"home": "/h", "corpus": "/c", "plan": str((plans / "audit.yaml").resolve())}
    # the CLI's stage listing
    out = CliRunner().invoke(main, ["pipeline", "stages", str(plans / "pipeline.yaml"), "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["stage"]: r for r in json.loads(out.output)}
    assert list(rows) == [s.name for s in with_toy] and rows["toy"]["flow"] == "toy" and rows["toy"]["enabled"]


def test_a_plan_edited_while_the_pipeline_runs_is_not_what_ran(
    first_run, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    import voxledger.flows.audit as audit_flow

    home_dir, plans, first, _ = first_run
    copy = tmp_path / "plans"
    shutil.copytree(plans, copy)
    lora = copy / "lora.yaml"
    original = plan_digest(load_plan(lora, TrainingPlan))
    real = audit_flow.audit_corpus_fn

    def edit_then_audit(*args, **kwargs):  # type: ignore[no-untyped-def]
        doc = yaml.safe_load(lora.read_text())
        doc["max_epochs"] = doc["max_epochs"] + 5  # the pipeline has started: its plans were read already
        lora.write_text(yaml.safe_dump(doc))
        return real(*args, **kwargs)

    monkeypatch.setattr(audit_flow, "audit_corpus_fn", edit_then_audit)
    summary = run(home_dir, corpus, copy)
    edited = plan_digest(load_plan(lora, TrainingPlan))
    assert edited != original
    h = Home(home_dir)
    pipe = h.receipts.read(summary["pipeline_receipt"], PipelineRunReceipt)
    ran = h.receipts.read_document(summary["train_adapter"]["receipt_id"])["parameters"]["bound"]["plan_sha256"]
    assert pipe.parameters.stage_plans["adapter_training"] == ran == original
    assert summary["train_adapter"]["receipt_id"] == first["train_adapter"]["receipt_id"]  # what ran is the first run's plan


def test_lock_timeout_reaches_the_flow(tmp_path: Path) -> None:
    from tests.corpus_factory import build_small_corpus

    corpus = build_small_corpus(tmp_path / "c")
    home = Home(tmp_path / "h")
    with home.catalog.connect():
        pass  # the catalog exists; now another process holds its lock
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from filelock import FileLock; l = FileLock(sys.argv[1]); l.acquire(); "
         "print('held', flush=True); time.sleep(120)", str(home.catalog.path) + ".lock"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        policy = Path(__file__).resolve().parents[2] / "plans" / "audit-demo.yaml"
        t0 = time.perf_counter()
        result = CliRunner().invoke(main, ["--home", str(home.root), "--lock-timeout", "1", "audit", str(corpus), "--policy", str(policy)])
        took = time.perf_counter() - t0
    finally:
        holder.kill()
        holder.wait()
    assert result.exit_code == 1, result.output
    assert "--lock-timeout" in result.output and "more than 1 s" in result.output and "Traceback" not in result.output
    assert took < 10, f"a 1 s lock timeout took {took:.1f} s (the default would be 60 s, retried)"


def test_each_receipt_names_the_prefect_task_run_that_wrote_it(first_run) -> None:  # type: ignore[no-untyped-def]
    import asyncio
    from collections import Counter, defaultdict

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterId

    home = Home(first_run[0])
    with home.catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT kind, doc->>'$.producer.flow', doc->>'$.producer.task', doc->>'$.producer.task_run_id', "
            "doc->>'$.producer.flow_run_id' FROM receipts"
        ).fetchall()
    assert len(rows) >= 20
    assert not [r for r in rows if r[1] == "cli" or r[4] is None], "every receipt names the Prefect flow (run) that wrote it"
    # from here on: the receipts the session's first pipeline run wrote (other tests add runs to this home)
    first_flow_run = home.receipts.read(first_run[2]["pipeline_receipt"], PipelineRunReceipt).producer.flow_run_id
    rows = [r for r in rows if r[4] == first_flow_run]
    assert len(rows) >= 20
    by_task_run: dict[str, list[str]] = defaultdict(list)
    for kind, _, _, task_run, _ in rows:
        if kind != "pipeline_run":  # the pipeline's own receipt is written by the flow, after its stages
            assert task_run is not None, kind
            by_task_run[task_run].append(kind)
    shared = {t: Counter(kinds) for t, kinds in by_task_run.items() if len(kinds) > 1}
    # a training run's checkpoints are recorded as it trains, inside its task; nothing else shares a task run
    training = [c for c in shared.values() if set(c) == {"training_run", "checkpoint"} and c["training_run"] == 1]
    assert len(training) == 2 and len(shared) == 2, shared
    kinds = Counter(kind for kind, *_ in rows)
    assert kinds["equivalence"] == 1 and kinds["package"] == 1 and kinds["evaluation"] == 2  # the package's check; promotion's gate

    async def names(ids: list[str]) -> dict[str, str]:
        async with get_client() as client:
            runs = await client.read_task_runs(task_run_filter=TaskRunFilter(id=TaskRunFilterId(any_=ids)), limit=len(ids) + 10)
        return {str(r.id): r.name for r in runs}

    found = asyncio.run(names(list(by_task_run)))
    assert set(found) == set(by_task_run), "every task run a receipt names is in Prefect's API"
    # each receipt's producer task is the Prefect task that ran (a checkpoint is recorded by its run's task)
    for kind, _, task_name, task_run, _ in rows:
        if task_run is not None:
            expected = "train_" if kind == "checkpoint" else f"{task_name}-"
            assert found[task_run].startswith(expected), (kind, task_name, found[task_run])
    trainings = sorted(t for k, _, t, _, _ in rows if k == "training_run")
    assert trainings == ["train_adapter", "train_base"]  # the base run says it trained a base
