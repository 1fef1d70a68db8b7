"""``voxledger bench --only listening-server``: the load test's section, run small (4 raters) in this process.

The section runs the real server in its own process and real HTTP clients; only the size differs
from ``voxledger bench --quick`` (10 raters) and a full run (50).
"""

from __future__ import annotations

import math
from pathlib import Path

from voxledger.bench import SECTIONS
from voxledger.bench_sections.listening_server import bench_listening_server

SERVED = {
    "served test: 4 raters at once, requests": "requests", "served test: throughput": "requests/s",
    "served test: median latency": "ms", "served test: p95 latency": "ms", "served test: refused or failed requests": "requests",
    "served test: raters finished": "raters", "served test: answers lost (acknowledged, not journalled)": "answers",
    "served test: answers journalled / sent": "x",
}  # fmt: skip


def test_listening_server_load_loses_no_answer(tmp_path: Path) -> None:
    assert "listening-server" in SECTIONS
    figures = bench_listening_server(tmp_path, 4)
    assert {f.name: f.unit for f in figures} == SERVED
    value = {f.name: f.value for f in figures}
    assert all(math.isfinite(v) for v in value.values())
    assert value["served test: answers lost (acknowledged, not journalled)"] == 0
    assert value["served test: refused or failed requests"] == 0 and value["served test: raters finished"] == 4
    assert value["served test: answers journalled / sent"] == 1.0
    assert value["served test: 4 raters at once, requests"] >= 4 * 20  # every rater went through every trial
    assert value["served test: throughput"] > 0 and 0 < value["served test: median latency"] <= value["served test: p95 latency"]
