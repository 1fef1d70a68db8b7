"""A child voxledger waits on (the reload probe, a decode command) dies when voxledger is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from voxledger.tasks.processes import pid_alive

PARENT = """
import subprocess, sys
from voxledger.tasks.processes import die_with_parent
use = sys.argv[1] == "yes"
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=die_with_parent if use else None)
print(child.pid, flush=True)
child.wait()
"""


def _orphan_survives(use: bool, wait_s: float) -> bool:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, "yes" if use else "no"], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)  # what a killed worker or a SIGKILLed package build gets
    parent.wait()
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and pid_alive(child):
        try:  # reap it if it was re-parented to us (a subreaper); otherwise init does
            os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    alive = pid_alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    return alive


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_a_waited_child_dies_with_its_parent() -> None:
    assert not _orphan_survives(use=True, wait_s=5.0)  # it dies within milliseconds of the kill
    assert _orphan_survives(use=False, wait_s=1.0)  # the control: without it the child is orphaned and keeps running


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_exited_child_not_yet_reaped_is_not_alive() -> None:
    """A server this process started and has not waited on stays a zombie after it exits: signal 0
    still reaches it, yet waiting for it to answer would wait out the whole start-up timeout."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        assert pid_alive(os.getpid()) and pid_alive(1)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].startswith(" Z"):
            time.sleep(0.02)
        os.kill(child.pid, 0)  # still there, as a zombie
        assert not pid_alive(child.pid)
    finally:
        child.wait()
    assert not pid_alive(child.pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_group_is_alive_while_any_member_is_though_its_leader_exited() -> None:
    """What `voxledger server stop` waits on: the whole process group (Prefect and what it started), not its leader."""
    from voxledger.tasks.processes import group_alive

    leader = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert leader.stdout is not None
    member = int(leader.stdout.readline())
    leader.wait()
    try:
        assert not pid_alive(leader.pid) and pid_alive(member)
        assert group_alive(leader.pid)  # the leader is gone, its group is not
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and group_alive(leader.pid):
        time.sleep(0.05)
    assert not group_alive(leader.pid)
