"""Freed per-clip buffers are reused instead of faulting in fresh pages (glibc only)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import resource, sys
import numpy as np
from voxledger.tasks.heap import keep_freed_memory
ok = keep_freed_memory() if sys.argv[1] == "on" else True
def clip():  # a few buffers of a 10 s clip alive at once, then all freed, as the audit does per clip
    bufs = [np.ones(160_000, dtype=np.float32) for _ in range(4)]
    return sum(float(b.sum()) for b in bufs)
for _ in range(20):
    clip()  # warm up: the first buffers fault in either way
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    clip()
print(int(ok), (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 200)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt thresholds are glibc's")
def test_raised_thresholds_stop_page_faults_per_buffer() -> None:
    def faults(mode: str) -> tuple[int, float]:
        out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout.split()
        return int(out[0]), float(out[1])

    ok, on = faults("on")
    _, off = faults("off")
    assert ok == 1
    assert on < 5 and off > 50 * max(on, 1), (on, off)
