"""A receipt-level lineage graph drawn as layered SVG (left: sources, right: results).

Receipts are named by what they are about (plan, corpus, backend) rather than by digest (the
digest is in each box's tooltip), and each training run's checkpoints collapse into one box:
"checkpoints x9 (epochs 0-8), best = epoch 6".
"""

from __future__ import annotations

from collections import defaultdict
from html import escape
from typing import TypedDict

import duckdb

from voxledger.dashboards.html import nothing
from voxledger.stores import dashboard_queries as q


class Node(TypedDict):
    """One box: a receipt kind (bold), a human name and a tooltip (the digests it stands for)."""

    kind: str
    name: str
    title: str


Edges = set[tuple[str, str]]


def lineage(con: duckdb.DuckDBPyConnection) -> str:
    """The newest package's lineage, from corpus to the newest evaluation's downstream."""
    up, down = q.newest_lineage_roots(con)
    if not up:
        return nothing("no package yet")
    nodes, edges, series = receipt_graph(con, up, down)
    nodes, edges = collapse_checkpoints(nodes, edges, series, q.best_epochs(con, sorted({k for k, _ in series.values()})))
    return f'<div class="chart">{draw(nodes, edges)}</div>'


def receipt_graph(
    con: duckdb.DuckDBPyConnection,
    roots_up: list[str],
    roots_down: list[str],
    depth: int = 12,
) -> tuple[dict[str, Node], Edges, dict[str, tuple[str, int]]]:
    """Receipts reachable upward from ``roots_up`` and downward from ``roots_down``, plans left out.

    Returns (nodes, edges, checkpoint id -> (run key, epoch)).
    """
    pairs = q.receipt_edges(con)
    up: dict[str, set[str]] = defaultdict(set)
    down: dict[str, set[str]] = defaultdict(set)
    for a, b in pairs:
        if a != b:
            up[b].add(a)
            down[a].add(b)
    keep: set[str] = set(roots_up) | set(roots_down)
    for roots, nxt in ((roots_up, up), (roots_down, down)):
        frontier = set(roots)
        for _ in range(depth):
            keep |= frontier
            frontier = {n for f in frontier for n in nxt[f]} - keep
    rows = [r for r in q.receipt_nodes(con, sorted(keep)) if r["kind"] != "plan"]
    nodes = {r["receipt_sha256"]: Node(kind=r["kind"], name=r["name"] or "", title=r["receipt_sha256"]) for r in rows}
    series = {r["receipt_sha256"]: (r["run_key"], r["epoch"]) for r in rows if r["run_key"] is not None}
    edges = {(a, b) for a, b in pairs if a in nodes and b in nodes and a != b}
    return nodes, edges, series


def collapse_checkpoints(
    nodes: dict[str, Node], edges: Edges, series: dict[str, tuple[str, int]], best: dict[str, int]
) -> tuple[dict[str, Node], Edges]:
    """Replace each run's checkpoint boxes with one box naming the count, epoch range and best epoch."""
    groups: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for rid, (run_key, epoch) in series.items():
        groups[run_key].append((epoch, rid))
    alias: dict[str, str] = {}
    out = {k: v for k, v in nodes.items() if k not in series}
    for run_key, members in groups.items():
        members.sort()
        gid = f"checkpoints:{run_key}"
        epochs = [e for e, _ in members]
        span = f"epoch {epochs[0]}" if len(epochs) == 1 else f"epochs {epochs[0]}-{epochs[-1]}"
        best_txt = f", best = epoch {best[run_key]}" if run_key in best else ""
        out[gid] = Node(
            kind=f"checkpoints x{len(members)}",
            name=f"{span}{best_txt}",
            title=f"run key {run_key}\n" + "\n".join(f"epoch {e}: {rid}" for e, rid in members),
        )
        alias.update({rid: gid for _, rid in members})
    merged = {(alias.get(a, a), alias.get(b, b)) for a, b in edges}
    return out, {(a, b) for a, b in merged if a != b}


def draw(nodes: dict[str, Node], edges: Edges) -> str:
    """Layered SVG: a node's column is its longest distance from a source."""
    if not nodes:
        return nothing("no receipts to draw yet")
    preds: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        preds[b].add(a)
    level: dict[str, int] = {}

    def lvl(n: str, seen: frozenset[str] = frozenset()) -> int:
        if n not in level:
            level[n] = 1 + max((lvl(p, seen | {n}) for p in preds[n] if p not in seen), default=-1)
        return level[n]

    columns: dict[int, list[str]] = defaultdict(list)
    for n in sorted(nodes, key=lambda n: (nodes[n]["kind"], nodes[n]["name"], n)):
        columns[lvl(n)].append(n)
    w, h, gx, gy = 180, 36, 50, 14
    pos = {n: (20 + c * (w + gx), 20 + r * (h + gy)) for c, ns in columns.items() for r, n in enumerate(ns)}
    width = 40 + (max(columns) + 1) * (w + gx)
    height = 40 + max(len(ns) for ns in columns.values()) * (h + gy)
    parts = [
        f'<svg class="lineage" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">',
        '<defs><marker id="arr" markerWidth="8" markerHeight="8" refX="8" refY="4" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#888"/></marker></defs>',
    ]
    for a, b in sorted(edges):
        (x1, y1), (x2, y2) = pos[a], pos[b]
        parts.append(f'<line x1="{x1 + w}" y1="{y1 + h / 2}" x2="{x2}" y2="{y2 + h / 2}" stroke="#aaa" marker-end="url(#arr)"/>')
    for n, (x, y) in pos.items():
        node = nodes[n]
        fill = "#f3eefb" if node["kind"].startswith("checkpoints") else "#eef4fb"
        parts.append(
            f'<g><title>{escape(node["title"])}</title><rect x="{x}" y="{y}" width="{w}" height="{h}" rx="5" fill="{fill}" stroke="#4a78b0"/>'
            f'<text x="{x + 8}" y="{y + 14}" font-weight="bold">{escape(_fit(node["kind"]))}</text>'
            f'<text x="{x + 8}" y="{y + 28}" fill="#555">{escape(_fit(node["name"]))}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _fit(text: str, chars: int = 29) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "\u2026"
