"""Process helpers shared by the packaging publisher and the flows' server supervisor."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists and has not exited (one we may not signal counts as
    alive). A zombie, exited but not yet reaped by its parent (a server this very process started
    and has not waited on), answers signal 0 like a live process: on Linux its state is read."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True  # no /proc (not Linux), or it ended just now: signal 0 said it existed
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")  # the state after "(comm) "


def group_alive(pgid: int) -> bool:
    """True while any process of process group ``pgid`` is alive (zombies not counted; see `pid_alive`).
    Without ``/proc`` (not Linux): whether the group can still be signalled."""
    proc = "/proc"
    if not os.path.isdir(proc):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # state, ppid, pgrp, ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def die_with_parent() -> None:
    """``preexec_fn`` for a child the caller waits on: the kernel kills it when the parent dies.

    A SIGKILLed voxledger (a killed worker, an interrupted package build) must not leave a reload
    probe or a decode command running on its own. Linux only (``PR_SET_PDEATHSIG``); elsewhere a
    no-op. Only for children waited on by the thread that starts them: the signal follows the
    starting thread, so a long-lived helper started from a short-lived thread must not use it.
    """
    import ctypes
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died between fork and prctl: follow it now
        os._exit(1)
