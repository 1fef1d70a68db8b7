"""Process helpers shared by the packaging publisher and the flows' server supervisor."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
