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
import statistics
import subprocess
import sys
import time
from pathlib import Path

from voxledger.bench_sections.common import Figure, make_corpus
from voxledger.schemas.errors import VoxledgerError
from voxledger.settings import load_settings


def _dvc() -> str | None:
    dvc = load_settings().bench.dvc
    return str(dvc) if dvc else shutil.which("dvc")


def _run(cmd: list[str], cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, check=False, capture_output=True, text=True, env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    if proc.returncode != 0:
        raise VoxledgerError(
            f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}; run it by hand in {cwd} to see why"
        )
    return time.perf_counter() - t0


def _voxledger(home: Path, data: Path) -> list[str]:
    # the CLI's ``main`` in a process of its own; unlike the ``voxledger`` script (``program``) it never hands
    # ``store put``'s flow to a resident runner, so no runner starts in the background while a pass is timed
    return [sys.executable, "-c", "from voxledger.cli import main; main()", "--home", str(home), "store", "put", str(data)]


def bench_store_dvc(work: Path, n: int) -> list[Figure]:
    """Both tools over the same files (page cache warmed first), in one run.

    ``VOXLEDGER_BENCH_ROUNDS`` rounds (default 3), each with a fresh home and a fresh DVC repo, the
    tools taking turns at going first (disk write-back left by one tool lands on the next);
    each figure is the median over rounds and the ratios' range across rounds is reported too.
    """
    from voxledger.stores.hashing import hash_files

    rounds = load_settings().bench.rounds
    repo = work / "dvc-repo"
    data = repo / "data"
    files = make_corpus(data, n, 64 * 1024)
    hash_files(files, workers=1)  # warm the page cache for both tools
    dvc = _dvc()
    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    for r in range(rounds):
        order = ("ours", "dvc") if r % 2 == 0 else ("dvc", "ours")
        for tool in order:
            if tool == "ours":
                home = work / f"put-home-{r}"
                ours.append((_run(_voxledger(home, data), work), _run(_voxledger(home, data), work)))
                shutil.rmtree(home)
            elif dvc is not None:
                for leftover in (repo / ".dvc", repo / "data.dvc", repo / ".dvcignore"):
                    shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink(missing_ok=True)
                _run([dvc, "init", "--no-scm", "-q"], repo)
                theirs.append((_run([dvc, "add", "-q", "data"], repo), _run([dvc, "add", "-q", "data"], repo)))
    ours_first, ours_again = (statistics.median(t[i] for t in ours) for i in (0, 1))
    figures = [
        Figure(f"store put {n:,} x 64 KiB, first pass (median of {rounds})", n / ours_first, "files/s"),
        Figure(f"store put {n:,} x 64 KiB, unchanged pass (median of {rounds})", n / ours_again, "files/s"),
    ]
    if dvc is None:
        return figures + [
            Figure(
                "dvc add: not measured (install: python -m venv /tmp/dvc && /tmp/dvc/bin/pip install dvc==3.67.1; "
                "then VOXLEDGER_BENCH_DVC=/tmp/dvc/bin/dvc)",
                0.0,
                "",
            )
        ]
    dvc_first, dvc_again = (statistics.median(t[i] for t in theirs) for i in (0, 1))
    per_round = [(d[0] / o[0], d[1] / o[1]) for o, d in zip(ours, theirs, strict=True)]
    return figures + [
        Figure(f"dvc add {n:,} x 64 KiB, first pass (median of {rounds})", n / dvc_first, "files/s"),
        Figure(f"dvc add {n:,} x 64 KiB, unchanged pass (median of {rounds})", n / dvc_again, "files/s"),
        Figure("store put / dvc add throughput, first pass (medians)", dvc_first / ours_first, "x", ">= 1.5"),
        Figure("store put / dvc add throughput, unchanged pass (medians)", dvc_again / ours_again, "x", ">= 1.5"),
        Figure("  first pass ratio, lowest round", min(p[0] for p in per_round), "x"),
        Figure("  first pass ratio, highest round", max(p[0] for p in per_round), "x"),
        Figure("  unchanged pass ratio, lowest round", min(p[1] for p in per_round), "x"),
        Figure("  unchanged pass ratio, highest round", max(p[1] for p in per_round), "x"),
    ]
