"""Write the measured tables of docs/statistics.md from a ``voxledger bench --only stats --json`` run.

    voxledger bench --only stats --json > stats.json
    python -m voxledger.bench_sections.stats_doc stats.json --write

The tables between the ``<!-- bench:stats -->`` markers are replaced, and so is the table of each
method's limits between the ``<!-- bench:limits -->`` markers (``LIMITS``: which rows speak for
which method); the prose around them is kept. Rows whose names end in ``: Type-I at 5%`` /
``: coverage at 95%`` are paired into one line.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "statistics.md"
BEGIN, END = "<!-- bench:stats begin -->", "<!-- bench:stats end -->"
LIMITS_BEGIN, LIMITS_END = "<!-- bench:limits begin -->", "<!-- bench:limits end -->"
LIMITS: tuple[tuple[str, str, str], ...] = (
    ("`cluster_t` (prompt means)", r"^(eval cluster_t|cluster_t, 20 x 1|catastrophic .*cluster_t)",
     "a mean of error rates with catastrophic prompts is optimistic whenever the sample misses them"),
    ("`cluster_bootstrap_t`", r"^(eval cluster_bootstrap_t|cluster_bootstrap_t, 20 x 1)",
     "each side at least as wide as the t interval's (outliers both ways); heavy tails stay short"),
    ("`wilson` (`content_gate_pass`, `invalid_rate`)", r"Wilson", "conservative with several seeds per prompt"),
    ("`newcombe_paired` (paired 0/1, failure rates)", r"Newcombe", "conservative at rare failures"),
    ("shipped demo gate (`new_failure_rate_high` + `kept_delta_high`)", r"^shipped demo gate",
     "bounds the newly failed share at its margin (15% at 36 prompts); a 5% catastrophic rate needs 94 prompts (`plan check`)"),
    ("two-part rule (`failure_rate_delta_high` + `kept_delta_*`)", r"two-part rule", "Newcombe's failure margin needs ~75 prompts to pass"),
    ("`delta_high` on error rates (former demo rule)", r"^(catastrophic .*(delta_high|sign-flip)|former rule)",
     "holds on ordinary data; not under catastrophic prompts"),
    ("round-off tolerance (all methods)", r"^(round-off|identical challenger|float32)", "a real spread below 1e-5 of the scale in float32 reads as none"),
    ("failed generations as failures", r"^failed generations", "similarity and MOS rest on the valid prompts only"),
    ("Holm over an evaluation", r"^18-way family", "-"),
    ("Bonferroni over a round", r"^3-challenger round", "assumes ordinary data (see the shipped gate's rows for catastrophic prompts)"),
    ("`two_way_cluster_t_pretested_bootstrap` (listening)", r"^(listening two_way|listening 6 pairs|15 MUSHRA|bounded: (MUSHRA|ACR))",
     "normal additive working model; families past 1,000 pairs hit the 200,000-draw cap"),
    ("`plan power`", r"^power, ", "normal model of prompt deltas; the catastrophic pilot is simulated"),
)  # fmt: skip
"""(method, the figure names that speak for it, what the bench does not measure)."""
PAIRED = re.compile(r"^(?P<label>.*): (?P<what>Type-I at 5%|coverage at 95%)$")


def _cell(fig: dict[str, Any]) -> str:
    short = "SHORT" in fig["goal"]
    return f"{fig['value']:.2f}" + (" **short**" if short else "")


def tables(figures: list[dict[str, Any]]) -> str:
    """Markdown: the paired Type-I / coverage table, then every other figure with its goal."""
    pairs: dict[str, dict[str, dict[str, Any]]] = {}
    rest = []
    for f in figures:
        m = PAIRED.match(f["name"])
        if m:
            pairs.setdefault(m["label"], {})[m["what"]] = f
        else:
            rest.append(f)
    lines = ["| method, design, data | Type-I % (goal 3-7) | coverage % (goal >= 93) |", "|---|---|---|"]
    for label, both in pairs.items():
        t1, cov = both.get("Type-I at 5%"), both.get("coverage at 95%")
        legacy = "legacy" in (t1 or cov or {}).get("goal", "")
        lines.append(f"| {label}{' (legacy, removed)' if legacy else ''} | {_cell(t1) if t1 else '-'} | {_cell(cov) if cov else '-'} |")
    lines += ["", "| scenario: figure | value % | goal |", "|---|---|---|"]
    lines += [f"| {f['name']} | {f['value']:.2f} | {f['goal']} |" for f in rest]
    return "\n".join(lines)


def _verdict(fig: dict[str, Any]) -> str | None:
    """``ok`` / ``SHORT`` for a figure with a goal, None for contrast, descriptive and legacy rows."""
    goal = fig["goal"]
    if "legacy" in goal or not goal.endswith((": ok", ": SHORT")):
        return None
    return "SHORT" if goal.endswith("SHORT") else "ok"


def _span(figs: list[dict[str, Any]]) -> str:
    by_goal: dict[str, list[float]] = {}
    for f in figs:
        by_goal.setdefault(f["goal"].rsplit(":", 1)[0], []).append(f["value"])
    return "; ".join(f"goal {g}: {len(v)} row(s), {min(v):.2f}-{max(v):.2f}%" for g, v in by_goal.items())


def limits_table(figures: list[dict[str, Any]]) -> str:
    """Markdown: each method's rows within and short of their goals (``LIMITS``), from the bench figures."""
    lines = ["| method | within goal (measured) | short of goal (measured) | not measured here |", "|---|---|---|---|"]
    for method, pattern, unmeasured in LIMITS:
        rows = [f for f in figures if re.search(pattern, f["name"]) and _verdict(f) is not None]
        held = [f for f in rows if _verdict(f) == "ok"]
        short = [f for f in rows if _verdict(f) == "SHORT"]
        worst = "; ".join(f"{f['name']} {f['value']:.2f}%" for f in short[:4]) + (f" (+{len(short) - 4} more)" if len(short) > 4 else "")
        lines.append(f"| {method} | {_span(held) or '-'} | {worst or '-'} | {unmeasured} |")
    return "\n".join(lines)


def _replace(doc: str, begin: str, end: str, block: str) -> str:
    start, stop = doc.index(begin) + len(begin), doc.index(end)
    return doc[:start] + "\n" + block + "\n" + doc[stop:]


def main() -> None:
    """Print the tables, or write them into docs/statistics.md (``--write``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_json", type=Path)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    text = args.bench_json.read_text(encoding="utf-8")
    figures = json.loads(text[text.index("[") :])
    block, limits = tables(figures), limits_table(figures)
    if not args.write:
        print(block + "\n\n" + limits)
        return
    doc = _replace(_replace(DOC.read_text(encoding="utf-8"), BEGIN, END, block), LIMITS_BEGIN, LIMITS_END, limits)
    tmp = DOC.with_suffix(".md.tmp")
    tmp.write_text(doc, encoding="utf-8")
    tmp.replace(DOC)


if __name__ == "__main__":
    main()
