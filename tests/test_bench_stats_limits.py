"""The round-three statistics rows run through the stages' own functions and meet their goals."""

from __future__ import annotations

from voxledger.bench_sections.stats_limits import bench_limits


def test_round_three_rows_meet_their_goals() -> None:
    figures = bench_limits(40)
    assert len(figures) == 13
    short = [f"{f.name} = {f.value} ({f.goal})" for f in figures if "SHORT" in f.goal]
    assert not short, short
