"""The tiny backend's log-mel features are the same bytes whatever number of threads BLAS is given.

A BLAS matmul splits its sums by thread count, so with ``fb @ spec`` a 2-core and a 16-core machine (or two
sweep members side by side, each limited otherwise) computed other features from the same clip, and a
re-run elsewhere could not be exact. Each count runs in a process of its own: BLAS reads it at start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DIGEST = """
import hashlib, numpy as np
from voxledger.tasks.backends.tiny.audio import log_mel
wave = (np.random.default_rng(0).standard_normal(16000 * 3) * 0.1).astype(np.float32)
print(hashlib.sha256(log_mel(wave).tobytes()).hexdigest())
"""


def _digest(threads: int) -> str:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", DIGEST], env=env, capture_output=True, text=True, check=True, timeout=120).stdout.strip()


def test_log_mel_bytes_do_not_depend_on_blas_threads() -> None:
    one, four = _digest(1), _digest(4)
    assert len(one) == 64 and one == four
