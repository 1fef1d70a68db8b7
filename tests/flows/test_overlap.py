"""One pipeline per home at a time: an overlapping run (a schedule tick while the last run still
runs, a second worker on the same home) stops before any work, naming the run that holds the home."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from voxledger.flows.deploy import deployment_specs
from voxledger.flows.pipeline import _pipeline
from voxledger.schemas.errors import HomeBusyError
from voxledger.schemas.pipeline import PipelinePlan
from voxledger.stores.home import Home, HomeRef
from voxledger.tasks.plans import load_plan

HOLD = """
import sys, time
from voxledger.stores.home import Home
with Home(sys.argv[1]).pipeline_slot():
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_a_second_run_on_a_held_home_is_skipped_at_once(tmp_path: Path) -> None:
    root = tmp_path / "home"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(root), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        t0 = time.perf_counter()
        # the pipeline body: the slot is taken before the plan is even read (this plan file does not exist)
        with pytest.raises(HomeBusyError, match=rf"another pipeline run holds home .*\(pid {holder.pid} since "):
            _pipeline(HomeRef(root=str(root)), str(tmp_path), tmp_path / "no-such-plan.yaml", None, None)
        assert time.perf_counter() - t0 < 5
    finally:
        holder.kill()
        holder.wait()
    with Home(root).pipeline_slot():  # the holder died: its lock went with it
        pass
    assert not (root / "pipeline.holder").exists()


def test_seven_overlapping_ticks_give_one_run_at_a_time(tmp_path: Path) -> None:
    """Seven runs started together: exactly one gets the home, the six others are skipped.

    A run that gets the home holds it until its stdin closes, which happens once six runs have
    ended (or after two minutes): every run tries while one holds, however slowly they start."""
    root = tmp_path / "home"
    Home(root)
    script = HOLD.replace('print("holding", flush=True)', 'print("ran", flush=True)').replace(
        "time.sleep(float(sys.argv[2]))", "sys.stdin.read()"
    )
    wrapper = f"import sys\ntry:\n    exec({script!r})\nexcept Exception as e:\n    print(type(e).__name__, flush=True)\n"
    procs = [
        subprocess.Popen([sys.executable, "-c", wrapper, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(7)
    ]
    deadline = time.monotonic() + 120
    while sum(p.poll() is not None for p in procs) < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
    outputs = sorted(p.communicate(input="", timeout=60)[0].strip() for p in procs)
    assert outputs == ["HomeBusyError"] * 6 + ["ran"]


def test_the_pipeline_deployment_allows_one_run_at_a_time(tmp_path: Path) -> None:
    plans = Path(__file__).resolve().parents[2] / "voxledger" / "plans"
    plan_file = plans / "pipeline-demo.yaml"
    specs = deployment_specs(load_plan(plan_file, PipelinePlan), plan_file, home=str(tmp_path / "home"), corpus=str(tmp_path))
    assert [s.name.rsplit("-", 1)[-1] for s in specs if s.one_at_a_time] == ["pipeline"]
