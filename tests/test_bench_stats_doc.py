"""docs/statistics.md's limits table is written from the bench figures, not copied by hand."""

from __future__ import annotations

from voxledger.bench_sections.stats_doc import DOC, LIMITS, LIMITS_BEGIN, LIMITS_END, limits_table


def test_the_limits_table_is_generated_from_figures() -> None:
    figures = [
        {"name": "eval cluster_t, k=5 x 4 seeds, heavy: coverage at 95%", "value": 83.9, "goal": ">= 93: SHORT"},
        {"name": "eval cluster_t, k=5 x 4 seeds, heterogeneous: coverage at 95%", "value": 95.7, "goal": ">= 93: ok"},
        {"name": "shipped demo gate, 36 prompts (...): x: false pass per challenger", "value": 0.2, "goal": "<= 0.83 (+2 se: 1.40): ok"},
        {"name": "former rule delta_high <= 0.15, 36 prompts: false pass per challenger (contrast)", "value": 10.0, "goal": "contrast"},
    ]
    table = limits_table(figures).splitlines()
    assert len(table) == 2 + len(LIMITS) == 15
    cluster_t = next(line for line in table if line.startswith("| `cluster_t`"))
    assert "goal >= 93: 1 row(s), 95.70-95.70%" in cluster_t and "heavy: coverage at 95% 83.90%" in cluster_t
    gate = next(line for line in table if line.startswith("| shipped demo gate"))
    assert "goal <= 0.83 (+2 se: 1.40): 1 row(s), 0.20-0.20%" in gate
    former = next(line for line in table if "former demo rule" in line)
    assert "| - | - |" in former  # a contrast row is neither within nor short of a goal


def test_the_doc_holds_the_generated_limits_block() -> None:
    doc = DOC.read_text(encoding="utf-8")
    block = doc[doc.index(LIMITS_BEGIN) + len(LIMITS_BEGIN) : doc.index(LIMITS_END)]
    assert block.count("\n| ") == 1 + len(LIMITS)  # the separator and one line per method
