"""``verify``: the deep scrub's throughput against ``sha256sum`` over the same files, and what reuse's
check of a served receipt's outputs costs per cached stage of a demo pipeline run.

Throughput: a home holding ``n`` stored objects plus ``n`` corpus-like files its stat cache vouches
for (half of each 64 KiB, half 1 MiB), all in the page cache; ``verify_store(deep=True)`` (the
body of the ``scrub_store`` flow, without Prefect's start-up) re-hashes both, ``sha256sum`` reads
the same files in one process. Each is the best of three, alternating.

Reuse: for each stage receipt of the latest pipeline run in ``--home`` (a demo run), the time
``damaged_outputs`` takes on a freshly opened home (stat cache on disk, nothing in memory: how a
cached re-run meets it), summed over the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from voxledger.bench_sections.common import Figure
from voxledger.schemas.errors import VoxledgerError


def _files(root: Path, n: int, tag: bytes) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        size = (1 << 20) if i % 2 else (64 << 10)
        p = root / f"{i:06d}.bin"
        p.write_bytes((tag + i.to_bytes(4, "big")) * (size // (len(tag) + 4)))
        out.append(p)
    return out


def _sha256sum(paths: list[Path]) -> float:
    t0 = time.perf_counter()
    subprocess.run(["sha256sum", "--", *map(str, paths)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def bench_scrub_throughput(work: Path, n: int) -> list[Figure]:
    """``store verify --deep`` over ``n`` objects and ``n`` stat-cached files, beside ``sha256sum`` of the same files."""
    from voxledger.stores.hashing import SETTLE_NS, hash_files
    from voxledger.stores.home import Home
    from voxledger.stores.verify import verify_store

    if shutil.which("sha256sum") is None:
        return [Figure("verify: not measured (no sha256sum on PATH)", 0.0, "")]
    home = Home(work / "verify-home")
    sources = _files(work / "verify-src", n, b"object")
    with home.blobs.deferred_sync():
        for p in sources:
            home.blobs.put_file(p)
    shutil.rmtree(work / "verify-src")
    corpus = _files(work / "verify-corpus", n, b"corpus")
    time.sleep(SETTLE_NS / 1e9 + 0.02)
    hash_files(corpus, cache=home.stat_cache)
    objects = [home.blobs.path_of(d) for d in home.blobs.iter_digests()]
    paths = objects + corpus
    total_mb = sum(os.path.getsize(p) for p in paths) / 1e6
    ours, theirs = [], []
    for _ in range(3):
        theirs.append(_sha256sum(paths))
        t0 = time.perf_counter()
        report = verify_store(Home(home.root), deep=True)
        ours.append(time.perf_counter() - t0)
        if report.problems or report.stat_cache is None or report.stat_cache.rehashed != n:
            raise VoxledgerError(f"the bench home did not verify clean: {report.problems[:3]}, {report.stat_cache}")
    t_ours, t_theirs = min(ours), min(theirs)
    label = f"{n:,} objects + {n:,} stat-cached files ({total_mb:,.0f} MB)"
    return [
        Figure(f"store verify --deep, {label}", total_mb / t_ours, "MB/s"),
        Figure("sha256sum, same files, one process", total_mb / t_theirs, "MB/s"),
        Figure("store verify --deep / sha256sum throughput", t_theirs / t_ours, "x", ">= 0.8"),
    ]


def bench_reuse_output_checks(home: str | None) -> list[Figure]:
    """Per stage receipt of ``home``'s latest pipeline run: the ms reuse spends checking its outputs."""
    from voxledger.schemas.stages import PIPELINE_RECEIPT
    from voxledger.stores.home import Home, resolve_home
    from voxledger.tasks.stage import damaged_outputs

    root = resolve_home(home)
    if not (root / "catalog.duckdb").is_file():
        return [Figure(f"reuse output checks: no home at {root} (`voxledger demo run`, then --home)", 0, "stages")]
    h = Home(root, read_only=True)
    runs = [h.receipts.read(r) for r in h.receipts.ids()]
    pipelines = sorted((r for r in runs if r.kind == PIPELINE_RECEIPT), key=lambda r: r.finished_at)  # type: ignore[attr-defined]
    if not pipelines:
        return [Figure(f"reuse output checks: no pipeline run in {root} (`voxledger demo run` makes one)", 0, "stages")]
    stages = [i.sha256 for i in pipelines[-1].inputs if i.role.startswith("stage:")]
    figures, total = [], 0.0
    for rid in stages:
        fresh = Home(root, read_only=True)  # nothing hashed in this process yet: the stat cache decides, as in a re-run
        receipt = fresh.receipts.read(rid)
        t0 = time.perf_counter()
        bad = damaged_outputs(fresh, receipt)
        ms = (time.perf_counter() - t0) * 1000
        total += ms
        n = len(receipt.subjects)
        figures.append(Figure(f"reuse output check: {receipt.kind} {rid[:12]} ({n} outputs{', DAMAGED' if bad else ''})", ms, "ms"))  # type: ignore[attr-defined]
    figures.append(Figure(f"reuse output checks, whole cached pipeline ({len(stages)} stages)", total / 1000, "s", "<= 1"))
    return figures
