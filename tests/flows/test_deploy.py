"""``voxledger deploy``: deployments per stage and for the pipeline, on the plan's work pools, registered
against the session's local Prefect server (127.0.0.1) and read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from voxledger.cli import main
from voxledger.flows.deploy import deployment_specs, ensure_pools, register
from voxledger.flows.stages import stage_names
from voxledger.schemas.errors import PlanError
from voxledger.schemas.pipeline import PipelinePlan
from voxledger.tasks.plans import load_plan, plan_digest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "plans" / "pipeline-demo-train-base.yaml"  # the demo with its own base training: every stage but import_base


def _plan_with_pools(tmp_path: Path, **pools: object) -> Path:
    doc = yaml.safe_load(DEMO.read_text()) | {"name": "demo"}
    doc.update(pools)
    out = tmp_path / "pipeline.yaml"
    out.write_text("# voxledger deploy pipeline.yaml --corpus ./corpus\n" + yaml.safe_dump(doc))
    return out


def test_pool_fields_leave_existing_plan_digests_unchanged(tmp_path: Path) -> None:
    plan = load_plan(_plan_with_pools(tmp_path), PipelinePlan)
    # produced by plan_digest() of plans/pipeline-demo.yaml before work_pool/stage_pools existed (commit 1767e52),
    # which is the train-base plan under the name "demo"
    assert plan_digest(plan) == "c207f30ab305764cdf3f8a913c22c5066df3d31bea20d0c6277c663da5dda88e"
    assert "work_pool" not in plan.model_dump(mode="json") and "stage_pools" not in plan.model_dump(mode="json")
    pooled = load_plan(_plan_with_pools(tmp_path, work_pool="cpu"), PipelinePlan)
    assert plan_digest(pooled) != plan_digest(plan)


def test_specs_map_stages_to_pools_and_the_pipeline_to_the_schedule(tmp_path: Path) -> None:
    plan_file = _plan_with_pools(tmp_path, work_pool="cpu", stage_pools={"train_base": "gpu", "train_adapter": "gpu"})
    specs = deployment_specs(load_plan(plan_file, PipelinePlan), plan_file, home="/h", corpus="/c")
    assert len(specs) == len(stage_names()) == 8  # every stage but import_base (the demo plan trains its base), and the pipeline
    pools = {s.name: s.work_pool for s in specs}
    assert pools == {"demo-audit": "cpu", "demo-train_base": "gpu", "demo-train_adapter": "gpu", "demo-promote": "cpu",
                     "demo-evaluate": "cpu", "demo-package": "cpu", "demo-export_packets": "cpu", "demo-pipeline": "cpu"}  # fmt: skip
    assert [s.cron for s in specs if s.cron] == ["0 3 * * *"] and specs[-1].name == "demo-pipeline"
    assert specs[0].parameters == {"home": "/h", "corpus": "/c", "plan": str(tmp_path / "audit-demo.yaml")}
    assert specs[-1].parameters == {"home": "/h", "corpus": "/c", "plan_file": str(plan_file)}
    no_base = _plan_with_pools(tmp_path, base_training=None, stage_pools={"train_base": "gpu"})
    with pytest.raises(PlanError, match="train_base"):
        deployment_specs(load_plan(no_base, PipelinePlan), no_base, home="/h", corpus="/c")


@pytest.mark.prefect
def test_register_against_a_local_server_and_read_back(tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    plan_file = _plan_with_pools(tmp_path, name="deploytest", work_pool="vox-cpu", stage_pools={"train_adapter": "vox-gpu"})
    specs = deployment_specs(load_plan(plan_file, PipelinePlan), plan_file, home=str(tmp_path / "home"), corpus=str(tmp_path))
    assert set(ensure_pools({"vox-cpu", "vox-gpu"})) <= {"vox-cpu", "vox-gpu"}
    assert ensure_pools({"vox-cpu", "vox-gpu"}) == []  # idempotent
    ids = register(specs)
    assert len(set(ids)) == 8
    assert register(specs) == ids  # re-registering updates the same deployments
    with get_client(sync_client=True) as client:
        pool = client.read_work_pool("vox-gpu")
        assert pool.type == "process"
        got = {d.name: d for d in (client.read_deployment(i) for i in ids)}
    assert got["deploytest-train_adapter"].work_pool_name == "vox-gpu"
    assert got["deploytest-audit"].work_pool_name == "vox-cpu"
    assert got["deploytest-pipeline"].entrypoint == "voxledger/flows/pipeline.py:pipeline"
    assert [s.schedule.cron for s in got["deploytest-pipeline"].schedules] == ["0 3 * * *"]  # type: ignore[union-attr]
    assert got["deploytest-audit"].schedules == []
    pipeline = got["deploytest-pipeline"]  # a tick while the last run still runs is cancelled, not stacked
    assert pipeline.global_concurrency_limit is not None and pipeline.global_concurrency_limit.limit == 1
    assert pipeline.concurrency_options is not None and pipeline.concurrency_options.collision_strategy == "CANCEL_NEW"
    assert got["deploytest-audit"].global_concurrency_limit is None
    # runs send heartbeats, and a run whose heartbeats stop (its worker was SIGKILLed) is marked Crashed
    assert all(d.job_variables["env"]["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] == "30" for d in got.values())
    from prefect.automations import Automation

    from voxledger.flows.deploy import CRASH_AFTER_S, ZOMBIE_AUTOMATION

    zombie = Automation.read(name=ZOMBIE_AUTOMATION)
    assert zombie.trigger.posture == "Proactive" and zombie.trigger.within.total_seconds() == CRASH_AFTER_S  # type: ignore[union-attr]
    assert [(a.type, a.state) for a in zombie.actions] == [("change-flow-run-state", "CRASHED")]  # type: ignore[attr-defined]
    register(specs)  # created once, not once per registration
    with get_client(sync_client=True) as client:
        assert [a.name for a in client.read_automations()].count(ZOMBIE_AUTOMATION) == 1


def test_cli_dry_run_lists_deployments_as_json(tmp_path: Path) -> None:
    plan_file = _plan_with_pools(tmp_path, work_pool="cpu")
    result = CliRunner().invoke(main, ["--home", str(tmp_path / "home"), "deploy", str(plan_file), "--corpus", str(tmp_path),
                                       "--dry-run", "--json"], catch_exceptions=False)  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["work_pool"] for r in rows] == ["cpu"] * 8 and rows[-1]["cron"] == "0 3 * * *"
