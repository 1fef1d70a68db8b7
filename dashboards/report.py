"""``voxledger dashboard``: a static HTML report generated from the catalog alone.

No network when viewed: charts are Vega-Lite specs rendered to inline SVG at build time, styles
are inline, and nothing is fetched. The file is written atomically (temp file, then rename).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

import duckdb
from voxledger.dashboards import charts
from voxledger.dashboards.lineage_svg import draw, receipt_graph
from voxledger.stores.catalog import Catalog

CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}h1{margin-bottom:0}
h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}th{background:#f4f6f8}.ok{color:#1a7f37}.bad{color:#c62828}
.muted{color:#777;font-size:12px}.chart{overflow-x:auto}code{font-size:12px}"""


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, params or [])
    cols = [d[0] for d in cur.description or []]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _table(rows: list[dict[str, Any]], cols: list[str], fmt: dict[str, Any] | None = None) -> str:
    if not rows:
        return '<p class="muted">nothing recorded yet</p>'
    fmt = fmt or {}
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{fmt.get(c, _cell)(r[c])}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, str) and len(v) == 64:
        return f"<code title='{v}'>{v[:12]}</code>"
    return escape(str(v))


def _status(v: Any) -> str:
    return f'<span class="{"ok" if v in ("succeeded", "pass", True) else "bad"}">{escape(str(v))}</span>'


def _chart(spec: dict[str, Any]) -> str:
    return f'<div class="chart">{charts.svg(spec)}</div>'


def build_dashboard(catalog: Catalog, out: Path) -> Path:
    """Write the dashboard HTML for everything in ``catalog``; return its path."""
    with catalog.connect(read_only=True) as con:
        sections = [
            ("Pipeline runs", _pipelines(con)),
            ("Training curves", _training(con)),
            ("Evaluation: candidates x metrics (95% prompt-clustered bootstrap CIs)", _evaluation(con)),
            ("Paired deltas vs baseline (forest plot)", _forest(con)),
            ("Listening tests", _listening(con)),
            ("Alias history", _table(_rows(con, "SELECT alias, target_sha256, moved_at, reason, receipt_sha256 FROM alias_history ORDER BY moved_at DESC"),
                                     ["alias", "target_sha256", "moved_at", "reason", "receipt_sha256"])),
            ("Packages", _table(_rows(con, "SELECT package_sha256, size_bytes, reload_bitwise_equal, equivalence_band, finished_at FROM packages ORDER BY finished_at DESC"),
                                ["package_sha256", "size_bytes", "reload_bitwise_equal", "equivalence_band", "finished_at"])),
            ("Lineage of the latest package, from corpus to ratings", _lineage(con)),
        ]  # fmt: skip
        counts = _rows(con, "SELECT kind, count(*) AS n FROM receipts GROUP BY kind ORDER BY kind")
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = "".join(f"<h2>{escape(t)}</h2>{html}" for t, html in sections)
    summary = ", ".join(f"{r['kind']}: {r['n']}" for r in counts)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>voxledger dashboard</title><style>{CSS}</style></head><body>"
            f"<h1>voxledger</h1><p class='muted'>generated {now} from {escape(str(catalog.path))} &middot; receipts: {escape(summary)}</p>"
            f"{body}</body></html>")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)  # the dashboard is a derived view, regenerated at will: replacing it loses no evidence
    return out


def _pipelines(con: duckdb.DuckDBPyConnection) -> str:
    rows = _rows(con, """SELECT receipt_sha256 AS run, run_status, finished_at, stage, status, cached, wall_s, detail
                         FROM pipeline_stages WHERE receipt_sha256 IN (SELECT receipt_sha256 FROM pipeline_stages
                         GROUP BY receipt_sha256 ORDER BY max(finished_at) DESC LIMIT 5) ORDER BY finished_at DESC, seq""")
    return _table(rows, ["run", "run_status", "finished_at", "stage", "status", "cached", "wall_s", "detail"], {"status": _status, "run_status": _status})


def _training(con: duckdb.DuckDBPyConnection) -> str:
    rows = _rows(con, "SELECT run_key, mode, epoch, train_loss, cv_loss, is_best FROM training_epochs ORDER BY run_key, epoch")
    if not rows:
        return '<p class="muted">no training runs yet</p>'
    return _chart(charts.training_curves(rows))


def _latest_eval(con: duckdb.DuckDBPyConnection) -> str | None:
    row = con.execute("SELECT receipt_sha256 FROM receipts WHERE kind = 'evaluation' ORDER BY finished_at DESC LIMIT 1").fetchone()
    return row[0] if row else None


def _evaluation(con: duckdb.DuckDBPyConnection) -> str:
    rid = _latest_eval(con)
    if rid is None:
        return '<p class="muted">no evaluations yet</p>'
    rows = _rows(con, "SELECT candidate, category, metric, mean, low, high, n FROM evaluation_summaries WHERE receipt_sha256 = ? AND category <> 'all' ORDER BY metric, candidate, category", [rid])
    overall = _rows(con, "SELECT candidate, metric, mean, low, high, n FROM evaluation_summaries WHERE receipt_sha256 = ? AND category = 'all' ORDER BY metric, candidate", [rid])
    metrics = [m for m in ("wer:whisper_en", "speaker_sim", "predicted_mos_ovrl", "content_gate_pass") if any(r["metric"] == m for r in rows)]
    charts_html = "".join(_chart(charts.metric_intervals(rows, m)) for m in metrics)
    return f"<p class='muted'>evaluation <code>{rid[:16]}</code>; predicted MOS is a model's prediction, not a listener rating</p>{charts_html}" + _table(overall, ["candidate", "metric", "mean", "low", "high", "n"])


def _forest(con: duckdb.DuckDBPyConnection) -> str:
    rid = _latest_eval(con)
    rows = _rows(con, "SELECT candidate, baseline, metric, delta, low, high, p_value, n_pairs FROM evaluation_comparisons WHERE receipt_sha256 = ? AND metric IN ('wer:whisper_en','cer:basic','speaker_sim','predicted_mos_ovrl')", [rid]) if rid else []
    if not rows:
        return '<p class="muted">no comparisons yet</p>'
    return _chart(charts.forest(rows)) + _table(rows, ["candidate", "baseline", "metric", "delta", "low", "high", "p_value", "n_pairs"])


def _listening(con: duckdb.DuckDBPyConnection) -> str:
    rows = _rows(con, "SELECT criterion, task, candidate, ratings, raters, mean, ci_low, ci_high FROM listening_scores ORDER BY criterion, candidate")
    if not rows:
        return '<p class="muted">no ratings aggregated yet (packets are exported; run <code>voxledger ratings aggregate</code> when submissions arrive)</p>'
    return _chart(charts.listening([r for r in rows if r["ci_low"] is not None])) + _table(rows, list(rows[0]))


def _lineage(con: duckdb.DuckDBPyConnection) -> str:
    pkg = con.execute("SELECT receipt_sha256 FROM receipts WHERE kind IN ('package', 'promotion') ORDER BY (kind = 'package') DESC, finished_at DESC LIMIT 1").fetchone()
    if pkg is None:
        return '<p class="muted">no package yet</p>'
    evals = [r[0] for r in con.execute("SELECT receipt_sha256 FROM receipts WHERE kind = 'evaluation' ORDER BY finished_at DESC LIMIT 1").fetchall()]
    labels, edges = receipt_graph(con, [pkg[0], *evals], evals)
    return draw(labels, edges)
