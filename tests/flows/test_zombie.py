"""A flow run whose process is SIGKILLed (its worker's machine died) is marked Crashed by the
automation ``voxledger deploy`` installs, instead of staying Running forever."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROBE = """
import time
from prefect import flow
from prefect.runtime import flow_run

@flow(name="zombie-probe")
def probe():
    print(flow_run.id, flush=True)
    time.sleep(600)

probe()
"""
CRASH_AFTER_S = 40  # the shortest window Prefect's 30 s minimum heartbeat interval allows, with margin


@pytest.mark.slow
def test_a_killed_run_is_marked_crashed_within_the_window(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    vx = [sys.executable, "-m", "voxledger.cli", "--home", str(tmp_path / "h")]
    subprocess.run([*vx, "server", "start"], check=True, capture_output=True, env=env)  # the full server, with its services
    status = subprocess.run([*vx, "server", "status", "--json"], check=True, capture_output=True, text=True, env=env).stdout
    api = json.loads(status)["api_url"]
    env |= {"PREFECT_API_URL": api, "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30"}
    try:
        install = f"from voxledger.flows.deploy import ensure_zombie_automation as z; print(z({CRASH_AFTER_S}))"
        subprocess.run([sys.executable, "-c", install], check=True, capture_output=True, env=env)
        probe = subprocess.Popen([sys.executable, "-c", PROBE], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
        assert probe.stdout is not None
        run_id = probe.stdout.readline().strip()
        assert re.fullmatch(r"[0-9a-f-]{36}", run_id), run_id
        time.sleep(3.0)  # its first heartbeat has gone out
        os.killpg(probe.pid, signal.SIGKILL)  # no final state is ever reported
        probe.wait()
        killed = time.monotonic()
        read = (
            f"from prefect import get_client\nwith get_client(sync_client=True) as c: print(c.read_flow_run('{run_id}').state.type.value)"
        )
        states = []
        while time.monotonic() - killed < CRASH_AFTER_S + 60:
            states.append(subprocess.run([sys.executable, "-c", read], capture_output=True, text=True, env=env).stdout.strip())
            if states[-1] == "CRASHED":
                break
            time.sleep(2.0)
        took = time.monotonic() - killed
    finally:
        subprocess.run([*vx, "server", "stop"], capture_output=True, env=env)
    assert states[0] == "RUNNING", states
    assert states[-1] == "CRASHED", f"still {states[-1]} {took:.0f} s after the kill: {states}"
    print(f"marked crashed {took:.0f} s after SIGKILL (window {CRASH_AFTER_S} s)")
