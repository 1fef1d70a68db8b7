"""``voxledger bench --only cli``: the wall time of read commands, each a whole process, beside
``python -c pass`` (the interpreter's own floor) measured in the same run.

The home holds a short chain of receipts (two ingests, one naming the other) so that ``lineage``,
``receipt show`` and ``provenance`` walk real rows; every command's median of ``rounds`` runs is
reported, with the goal of one second each.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from voxledger.bench_sections.common import Figure
from voxledger.schemas.errors import VoxledgerError


def _seed_home(root: Path) -> str:
    """Two ingest receipts, the second naming the first: the id of the second."""
    from voxledger.schemas.base import InputRef, utc_now
    from voxledger.schemas.core import IngestParameters, IngestReceipt
    from voxledger.stores.home import Home
    from voxledger.stores.trees import TREE_MEDIA_TYPE, put_tree
    from voxledger.tasks.receipting import artifact, build_receipt, cache_key

    home, parent = Home(root), None
    for name in ("first", "second"):
        src = root.parent / f"bench-tree-{name}"
        src.mkdir(parents=True, exist_ok=True)
        (src / "weights.bin").write_bytes(name.encode() * 4096)
        tree_sha, _ = put_tree(home.blobs, src)
        inputs: list[InputRef] = [InputRef(role="parent", sha256=parent, ref="receipt")] if parent else []
        receipt = build_receipt(
            IngestReceipt,
            flow="bench",
            task=name,
            started_at=utc_now(),
            key=cache_key("bench", {"name": name}, None, {}),
            subjects=[artifact(home.blobs, "tree", tree_sha, TREE_MEDIA_TYPE)],
            inputs=inputs,
            parameters=IngestParameters(source="tree", name=name, file_count=1, total_bytes=4096 * len(name)),
        )
        parent = home.record(receipt)
    assert parent is not None
    return parent


def bench_cli_reads(work: Path, rounds: int) -> list[Figure]:
    """Median process wall of each read command against ``python -c pass``."""
    root = work / "cli-read-home"
    rid = _seed_home(root)
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL",)}
    vx = [sys.executable, "-m", "voxledger.cli", "--home", str(root)]
    commands: list[tuple[str, list[str]]] = [
        ("python -c pass (floor)", [sys.executable, "-c", "pass"]),
        ("voxledger --help", [*vx, "--help"]),
        ("voxledger query", [*vx, "query", "SELECT kind, count(*) FROM receipts GROUP BY kind"]),
        ("voxledger lineage --up", [*vx, "lineage", rid, "--up"]),
        ("voxledger receipt show", [*vx, "receipt", "show", rid]),
        ("voxledger provenance downstream", [*vx, "provenance", "downstream", rid]),
        ("voxledger alias history", [*vx, "alias", "history"]),
        ("voxledger base list", [*vx, "base", "list"]),
    ]
    walls: dict[str, float] = {}
    for label, cmd in commands:
        runs = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
            runs.append(time.perf_counter() - t0)
            if proc.returncode != 0:
                raise VoxledgerError(f"bench command {label!r} exited {proc.returncode}: {proc.stderr[-800:]}")
        walls[label] = statistics.median(runs)
    floor = walls.pop("python -c pass (floor)")
    figures = [Figure("python -c pass (floor)", floor, "s")]
    for label, wall in walls.items():
        figures.append(Figure(f"{label} (median of {rounds})", wall, "s", "< 1"))
    figures.append(Figure("slowest read command / floor", max(walls.values()) / floor, "x"))
    return figures
