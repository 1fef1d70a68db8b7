"""A receipt-level lineage graph drawn as layered SVG (left: sources, right: results)."""

from __future__ import annotations

from collections import defaultdict
from html import escape

import duckdb

RECEIPT_EDGES = """
    SELECT e.src AS a, e.dst AS b FROM edges e WHERE e.direction = 'input' AND e.src_ref = 'receipt'
    UNION
    SELECT o.src AS a, i.dst AS b FROM edges o JOIN edges i ON i.src = o.dst
    WHERE o.direction = 'output' AND i.direction = 'input'
"""


def receipt_graph(con: duckdb.DuckDBPyConnection, roots_up: list[str], roots_down: list[str], depth: int = 12) -> tuple[dict[str, str], set[tuple[str, str]]]:
    """Receipts reachable upward from ``roots_up`` and downward from ``roots_down``; (labels, edges)."""
    pairs = con.execute(RECEIPT_EDGES).fetchall()
    up: dict[str, set[str]] = defaultdict(set)
    down: dict[str, set[str]] = defaultdict(set)
    for a, b in pairs:
        if a != b:
            up[b].add(a)
            down[a].add(b)
    keep: set[str] = set()
    for roots, nxt in ((roots_up, up), (roots_down, down)):
        frontier = set(roots)
        for _ in range(depth):
            keep |= frontier
            frontier = {n for f in frontier for n in nxt[f]} - keep
    keep |= set(roots_up) | set(roots_down)
    labels = dict(con.execute("SELECT receipt_sha256, kind FROM receipts WHERE receipt_sha256 IN (SELECT unnest(?))", [sorted(keep)]).fetchall())
    edges = {(a, b) for a, b in pairs if a in labels and b in labels and a != b and labels[a] != "plan"}
    return {k: v for k, v in labels.items() if v != "plan"}, edges


def draw(labels: dict[str, str], edges: set[tuple[str, str]]) -> str:
    """Layered SVG: a node's column is its longest distance from a source."""
    if not labels:
        return "<p>No receipts to draw yet.</p>"
    preds: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        preds[b].add(a)
    level: dict[str, int] = {}

    def lvl(n: str, seen: frozenset[str] = frozenset()) -> int:
        if n not in level:
            level[n] = 1 + max((lvl(p, seen | {n}) for p in preds[n] if p not in seen), default=-1)
        return level[n]

    columns: dict[int, list[str]] = defaultdict(list)
    for n in sorted(labels, key=lambda n: (labels[n], n)):
        columns[lvl(n)].append(n)
    w, h, gx, gy = 150, 34, 60, 14
    pos = {n: (20 + c * (w + gx), 20 + r * (h + gy)) for c, ns in columns.items() for r, n in enumerate(ns)}
    width = 40 + (max(columns) + 1) * (w + gx)
    height = 40 + max(len(ns) for ns in columns.values()) * (h + gy)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
             '<defs><marker id="arr" markerWidth="8" markerHeight="8" refX="8" refY="4" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#888"/></marker></defs>']  # fmt: skip
    for a, b in sorted(edges):
        (x1, y1), (x2, y2) = pos[a], pos[b]
        parts.append(f'<line x1="{x1 + w}" y1="{y1 + h / 2}" x2="{x2}" y2="{y2 + h / 2}" stroke="#aaa" marker-end="url(#arr)"/>')
    for n, (x, y) in pos.items():
        parts.append(f'<g><title>{escape(n)}</title><rect x="{x}" y="{y}" width="{w}" height="{h}" rx="5" fill="#eef4fb" stroke="#4a78b0"/>'
                     f'<text x="{x + 8}" y="{y + 14}" font-weight="bold">{escape(labels[n])}</text>'
                     f'<text x="{x + 8}" y="{y + 27}" fill="#555">{n[:16]}</text></g>')  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)
