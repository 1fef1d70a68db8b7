"""``voxledger bench --only listening-server``: the load test through the real entry point (quick: 10 raters)."""

from __future__ import annotations

import math
from pathlib import Path

from tests.test_bench import bench_json

SERVED = {
    "served test: 10 raters at once, requests": "requests", "served test: throughput": "requests/s",
    "served test: median latency": "ms", "served test: p95 latency": "ms", "served test: refused or failed requests": "requests",
    "served test: raters finished": "raters", "served test: answers lost (acknowledged, not journalled)": "answers",
    "served test: answers journalled / sent": "x",
}  # fmt: skip


def test_quick_listening_server_load_loses_no_answer(tmp_path: Path) -> None:
    figures = bench_json(tmp_path / "home", "listening-server")
    assert {f["name"]: f["unit"] for f in figures} == SERVED
    value = {f["name"]: f["value"] for f in figures}
    assert all(math.isfinite(v) for v in value.values())
    assert value["served test: answers lost (acknowledged, not journalled)"] == 0
    assert value["served test: refused or failed requests"] == 0 and value["served test: raters finished"] == 10
    assert value["served test: answers journalled / sent"] == 1.0
    assert value["served test: 10 raters at once, requests"] >= 10 * 20  # every rater went through every trial
    assert value["served test: throughput"] > 0 and 0 < value["served test: median latency"] <= value["served test: p95 latency"]
