"""Small HTML helpers shared by the dashboard sections: tables, cells, statuses and intervals."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from html import escape
from typing import Any

from voxledger.schemas.evaluation import Interval

Cell = Callable[[Any], str]

CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}h1{margin-bottom:0}
h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f6f8}.ok{color:#1a7f37}.bad{color:#c62828}.warn{color:#a05a00}.muted{color:#777;font-size:12px}
.chart{overflow-x:auto}.charts{display:flex;flex-wrap:wrap;gap:16px}code{font-size:12px}.num{text-align:right;font-variant-numeric:tabular-nums}
.band{padding:1px 6px;border-radius:3px;font-weight:600;font-size:12px}.GREEN{background:#dcf3e2;color:#1a7f37}
.YELLOW{background:#fff3c4;color:#7a5b00}.RED{background:#fde0e0;color:#c62828}audio{height:32px;width:220px}
nav a{margin-right:10px;font-size:13px}"""


def nothing(what: str) -> str:
    """A muted line saying what has not been recorded yet."""
    return f'<p class="muted">{escape(what)}</p>'


def table(
    rows: list[dict[str, Any]],
    cols: list[str],
    fmt: dict[str, Cell] | None = None,
    *,
    empty: str = "nothing recorded yet",
    headers: dict[str, str] | None = None,
    cls: str = "",
) -> str:
    """An HTML table of ``cols`` from ``rows``; ``fmt`` renders chosen columns, ``headers`` renames them,
    ``cls`` names the table's class (so a test or a style can find it)."""
    if not rows:
        return nothing(empty)
    fmt, headers = fmt or {}, headers or {}
    head = "".join(f"<th>{escape(headers.get(c, c))}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{fmt.get(c, cell)(r[c])}</td>" for c in cols) + "</tr>" for r in rows)
    attr = f' class="{escape(cls)}"' if cls else ""
    return f"<table{attr}><tr>{head}</tr>{body}</table>"


def cell(v: Any) -> str:
    """A value as table text: floats to 4 significant digits, digests shortened, times in UTC."""
    if v is None:
        return '<span class="muted">-</span>'
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, datetime):
        return when(v)
    if isinstance(v, str) and len(v) == 64:
        return digest(v)
    return escape(str(v))


def digest(sha256: str | None) -> str:
    """A digest shortened to 12 characters, the full value in its tooltip."""
    if not sha256:
        return '<span class="muted">-</span>'
    return f"<code title='{escape(sha256)}'>{escape(sha256[:12])}</code>"


def when(t: datetime | None) -> str:
    """A timestamp to the second, in UTC."""
    return "-" if t is None else escape(t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))


def status(v: Any) -> str:
    """Success-like values in green, anything else in red."""
    return (
        f'<span class="{"ok" if v in ("succeeded", "pass", True) else "bad"}">{escape(cell(v) if isinstance(v, bool) else str(v))}</span>'
    )


def band(v: str | None) -> str:
    """An equivalence band as a coloured chip."""
    return '<span class="muted">-</span>' if v is None else f'<span class="band {escape(v)}">{escape(v)}</span>'


def seconds(v: float | None) -> str:
    """A duration in seconds, right-aligned."""
    return '<span class="muted">-</span>' if v is None else f'<span class="num">{v:.1f} s</span>'


def interval(mean: float, low: float | None, high: float | None, note: str | None, notes: list[str] | None = None) -> str:
    """``mean [low, high]``; an interval that could not be estimated reads "no CI" with its note,
    never as a zero-width interval. With ``notes`` the note becomes a numbered footnote there."""
    if low is not None and high is not None:
        return f"{mean:.4g} <span class='muted'>[{low:.4g}, {high:.4g}]</span>"
    note = note or "interval not estimable"
    if notes is None:
        return f'{mean:.4g} <span class="warn" title="{escape(note)}">no CI</span> <span class="muted">({escape(note)})</span>'
    if note not in notes:
        notes.append(note)
    return f'{mean:.4g} <span class="warn" title="{escape(note)}">no CI<sup>{notes.index(note) + 1}</sup></span>'


def footnotes(notes: list[str]) -> str:
    """The numbered notes collected by ``interval``."""
    items = "".join(f"<li>{escape(n)}</li>" for n in notes)
    return f'<ol class="muted">{items}</ol>' if notes else ""


def iv(i: Interval, notes: list[str] | None = None) -> str:
    """``interval`` for a recorded ``Interval``."""
    return interval(i.mean, i.low, i.high, i.note, notes)
