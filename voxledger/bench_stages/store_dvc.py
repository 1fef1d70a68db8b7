"""``store-dvc``: ``voxledger store put`` against DVC's ``dvc add`` on the same 10,000 x 64 KiB files,
first pass and unchanged pass, each tool run as a user runs it (its own command, its own process).

DVC is never a voxledger dependency. To include it, install it beside voxledger, e.g.

    python -m venv /tmp/dvc && /tmp/dvc/bin/pip install 'dvc==3.67.1'
    VOXLEDGER_BENCH_DVC=/tmp/dvc/bin/dvc voxledger bench --only store-dvc

(or put ``dvc`` on PATH). Without it the section reports voxledger's own figures only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from voxledger.bench_stages.common import Figure, make_corpus
from voxledger.schemas.errors import VoxledgerError


def _dvc() -> str | None:
    return os.environ.get("VOXLEDGER_BENCH_DVC") or shutil.which("dvc")


def _run(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, check=False, capture_output=True, text=True, env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    if proc.returncode != 0:
        raise VoxledgerError(
            f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}; run it by hand in {cwd} to see why"
        )
    return time.perf_counter() - t0


def _voxledger(home: Path, data: Path) -> list[str]:
    # what the ``voxledger`` script runs (``-m voxledger.cli`` would register commands on a second copy of ``main``)
    return [sys.executable, "-c", "from voxledger.cli import main; main()", "--home", str(home), "store", "put", str(data)]


def bench_store_dvc(work: Path, n: int) -> list[Figure]:
    """Both tools over the same files (page cache warmed first), in one run."""
    from voxledger.stores.hashing import hash_files

    repo = work / "dvc-repo"
    data = repo / "data"
    files = make_corpus(data, n, 64 * 1024)
    hash_files(files, workers=1)  # warm the page cache for both tools
    ours_first = _run(_voxledger(work / "put-home", data), work)
    ours_again = _run(_voxledger(work / "put-home", data), work)
    figures = [
        Figure(f"store put {n:,} x 64 KiB, first pass", n / ours_first, "files/s"),
        Figure(f"store put {n:,} x 64 KiB, unchanged pass", n / ours_again, "files/s"),
    ]
    dvc = _dvc()
    if dvc is None:
        return figures + [Figure("dvc add: not measured (install: python -m venv /tmp/dvc && /tmp/dvc/bin/pip install dvc==3.67.1; "
                                 "then VOXLEDGER_BENCH_DVC=/tmp/dvc/bin/dvc)", 0.0, "")]  # fmt: skip
    _run([dvc, "init", "--no-scm", "-q"], repo)
    dvc_first = _run([dvc, "add", "-q", "data"], repo)
    dvc_again = _run([dvc, "add", "-q", "data"], repo)
    return figures + [
        Figure(f"dvc add {n:,} x 64 KiB, first pass", n / dvc_first, "files/s"),
        Figure(f"dvc add {n:,} x 64 KiB, unchanged pass", n / dvc_again, "files/s"),
        Figure("store put / dvc add throughput, first pass", dvc_first / ours_first, "x", ">= 1.5"),
        Figure("store put / dvc add throughput, unchanged pass", dvc_again / ours_again, "x", ">= 1.5"),
    ]
