"""The shipped demo gate's catastrophic-prompt rows run through the stages' own functions and hold their bounds."""

from __future__ import annotations

from voxledger.bench_sections.stats_catastrophic import outlier_rows, shipped_gate_rows


def test_the_shipped_gate_at_36_prompts_holds_its_bounds_under_catastrophic_prompts() -> None:
    figures = shipped_gate_rows(36, 40, seed=41)  # a smoke run: docs/statistics.md has the 500-data-set rows
    assert len(figures) == 8
    bounded = [f for f in figures if "false pass" in f.name and "contrast" not in f.goal]
    assert len(bounded) == 4 and not [f"{f.name} = {f.value} ({f.goal})" for f in bounded if "SHORT" in f.goal]
    assert "(new_failure_rate_high <= 0.15, kept_delta_high <= 0.15)" in figures[0].name


def test_outliers_both_ways_are_covered_by_both_interval_methods() -> None:
    by = {f.name.split(",")[0]: f for f in outlier_rows(100, seed=44)}
    assert "SHORT" not in by["cluster_t"].goal and "SHORT" not in by["cluster_bootstrap_t"].goal
    assert by["bootstrap-t alone (former cluster_bootstrap_t)"].value < by["cluster_bootstrap_t"].value
