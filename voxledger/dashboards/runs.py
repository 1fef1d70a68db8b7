"""Dashboard sections about what ran: pipeline stages and their times, the corpus audit, training."""

from __future__ import annotations

from html import escape

import duckdb

from voxledger.dashboards import charts
from voxledger.dashboards.html import digest, nothing, seconds, status, table, when
from voxledger.stores import dashboard_queries as q


def chart(spec: dict[str, object]) -> str:
    """A Vega-Lite spec as an inline SVG block."""
    return f'<div class="chart">{charts.svg(spec)}</div>'


def pipelines(con: duckdb.DuckDBPyConnection, plan_names: dict[str, str], runs: int = 5) -> str:
    """The newest pipeline runs, each with its own stages: status, cached or not, the stage's wall
    time and offset in that run, and the stage receipt by name. The newest run gets a Gantt chart."""
    recent = q.pipeline_runs(con, runs)
    if not recent:
        return nothing("no pipeline runs yet")
    parts = []
    for i, run in enumerate(recent):
        stages = q.pipeline_stages(con, run["receipt_sha256"])
        names = {n["receipt_sha256"]: n for n in q.receipt_nodes(con, [s["stage_receipt"] for s in stages if s["stage_receipt"]])}
        total = sum(s["wall_s"] for s in stages)
        plan = plan_names.get(run["plan_sha256"], run["plan_sha256"][:12])
        parts.append(
            f"<h3>{escape(plan)} on corpus {escape(run['corpus_name'])} &middot; {status(run['status'])}</h3>"
            f"<p class='muted'>started {when(run['started_at'])}, finished {when(run['finished_at'])}; "
            f"stages {total:.1f} s; pipeline receipt {digest(run['receipt_sha256'])}</p>"
        )
        if i == 0:
            parts.append(chart(charts.stage_times(stages)))
        parts.append(_stage_table(stages, names))
    return "".join(parts)


def _stage_table(stages: list[q.Row], names: dict[str, q.Row]) -> str:
    offset, rows = 0.0, []
    for s in stages:
        node = names.get(s["stage_receipt"] or "")
        made = "reused from cache; made " + when(s["receipt_finished_at"]) if s["cached"] else when(s["receipt_finished_at"])
        receipt = f"{escape(node['kind'])} <b>{escape(node['name'] or '')}</b> " + digest(s["stage_receipt"]) if node else "-"
        rows.append({**s, "offset": f"+{offset:.1f} s", "made": made if node else "-", "receipt": receipt})
        offset += s["wall_s"]
    return table(
        rows,
        ["stage", "status", "cached", "offset", "wall_s", "receipt", "made", "detail"],
        {"status": status, "wall_s": seconds, "receipt": str, "made": str, "detail": lambda d: escape(d[:300])},
        headers={"offset": "start", "wall_s": "wall time", "receipt": "stage receipt", "made": "receipt finished"},
    )


def audit(con: duckdb.DuckDBPyConnection) -> str:
    """Every corpus's newest audit in one table, then the newest audit's findings counted by code and
    severity and its top findings (a home holding several voices shows each corpus's verdict)."""
    a = q.latest_audit(con)
    if a is None:
        return nothing("no audits yet")
    counts = q.audit_counts(con, a["receipt_sha256"])
    corpora = q.latest_audits(con)
    every = ""
    if len(corpora) > 1:
        for c in corpora:
            c |= {"corpus": c["corpus_name"], "utterances": c["n_utterances"], "audited": c["finished_at"], "receipt": c["receipt_sha256"]}
        every = f"<h3>Every corpus in this home ({len(corpora)}), newest audit each</h3>" + table(
            corpora, ["corpus", "utterances", "verdict", "findings", "audited", "receipt"], {"verdict": status}
        )
    head = every + (
        f"<p>corpus <b>{escape(a['corpus_name'])}</b>: {a['n_utterances']} utterances, verdict {status(a['verdict'])}, "
        f"{sum(c['findings'] for c in counts)} findings &middot; <span class='muted'>audited {when(a['finished_at'])}, "
        f"receipt {digest(a['receipt_sha256'])}</span></p>"
    )
    if not counts:
        return head + nothing("no findings: every check passed")
    top = q.top_findings(con, a["receipt_sha256"])
    for f in top:
        ids = list(f["utterance_ids"])
        f["utterances"] = ", ".join(ids[:4]) + (f" (+{len(ids) - 4})" if len(ids) > 4 else "")
        f["where"] = f"{f['file']}:{f['line']}" if f["file"] else ""
    sev = {"severity": lambda v: f'<span class="{ {"error": "bad", "warning": "warn"}.get(v, "muted") }">{escape(v)}</span>'}
    return (
        head
        + "<h3>Counts by code and severity</h3>"
        + table(counts, ["code", "severity", "findings", "utterances"], sev)
        + f"<h3>Top findings ({len(top)} most severe)</h3>"
        + table(top, ["severity", "code", "message", "value", "bound", "utterances", "where"], sev)
    )


def training(con: duckdb.DuckDBPyConnection) -> str:
    """Loss curves of the newest training runs, one panel with its own axes per run."""
    rows = q.training_epochs(con)
    if not rows:
        return nothing("no training runs yet")
    best = {(r["plan_name"], r["mode"], r["backend"], r["run_key"]): r for r in rows if r["is_best"]}
    summary = [
        {
            "run": f"{k[0]} ({k[1]}, {k[2]})",
            "epochs": sum(1 for r in rows if r["run_key"] == k[3]),
            "best epoch": r["epoch"],
            "best cv loss": r["cv_loss"],
            "run key": r["run_key"],
        }
        for k, r in best.items()
    ]
    return chart(charts.training_curves(rows)) + table(summary, ["run", "epochs", "best epoch", "best cv loss", "run key"])
