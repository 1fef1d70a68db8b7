"""Write the measured tables of docs/statistics.md from a ``voxledger bench --only stats --json`` run.

    voxledger bench --only stats --json > stats.json
    python -m voxledger.bench_stages.stats_doc stats.json --write

The tables between the ``<!-- bench:stats -->`` markers are replaced; the prose around them is
kept. Rows whose names end in ``: Type-I at 5%`` / ``: coverage at 95%`` are paired into one line.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "statistics.md"
BEGIN, END = "<!-- bench:stats begin -->", "<!-- bench:stats end -->"
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


def main() -> None:
    """Print the tables, or write them into docs/statistics.md (``--write``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_json", type=Path)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    text = args.bench_json.read_text(encoding="utf-8")
    figures = json.loads(text[text.index("[") :])
    block = tables(figures)
    if not args.write:
        print(block)
        return
    doc = DOC.read_text(encoding="utf-8")
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    tmp = DOC.with_suffix(".md.tmp")
    tmp.write_text(doc[:start] + "\n" + block + "\n" + doc[end:], encoding="utf-8")
    tmp.replace(DOC)


if __name__ == "__main__":
    main()
