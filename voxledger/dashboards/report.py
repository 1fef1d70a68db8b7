"""``voxledger dashboard``: a static HTML report generated from the catalog alone.

No network when viewed: charts are Vega-Lite specs rendered to inline SVG at build time, styles
are inline, audio clips are embedded as ``data:`` URIs, and nothing is fetched or executed. Every
catalog read goes through ``voxledger.stores.dashboard_queries``. The file is written atomically
(temp file, then rename).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from voxledger.dashboards import audio, charts, decisions, runs
from voxledger.dashboards.audio import BlobReader
from voxledger.dashboards.html import CSS, Cell, cell, digest, nothing, status, table
from voxledger.dashboards.lineage_svg import lineage
from voxledger.schemas.listening_receipts import AggregateReceipt
from voxledger.stores import dashboard_queries as q
from voxledger.stores.catalog import Catalog

SECTIONS = (
    ("pipeline", "Pipeline runs and per-stage times"),
    ("lines", "Model lines: each voice's newest training, gate and evaluation"),
    ("audit", "Corpus audit findings"),
    ("training", "Training curves"),
    ("gate", "Promotion gate"),
    ("sweep", "Sweep: members, CV curves and the one gate"),
    ("evaluation", "Evaluation: candidates x metrics"),
    ("forest", "Paired deltas vs baseline (forest plot)"),
    ("audio", "Listen: candidates side by side"),
    ("equivalence", "Equivalence bands"),
    ("listening", "Listening tests"),
    ("packages", "Packages and model lines"),
    ("reproductions", "Reproductions: receipts re-run and their verdicts"),
    ("lineage", "Lineage of the latest package, from corpus to ratings"),
)


def build_dashboard(catalog: Catalog, out: Path, *, blobs: BlobReader | None = None, audio_prompts: int = 3) -> Path:
    """Write the dashboard HTML for everything in ``catalog``; return its path.

    ``blobs`` reads stored bytes by digest (``home.blobs.get_bytes``); with it the page embeds
    audio for ``audio_prompts`` prompts per candidate and shows prompt texts, without it the
    audio section lists digests only.
    """
    with catalog.connect(read_only=True) as con:
        plans = q.plan_names(con)
        ev = q.main_evaluation(con)
        html = {
            "pipeline": runs.pipelines(con, plans),
            "lines": _lines(q.line_overview(con)),
            "audit": runs.audit(con),
            "training": runs.training(con),
            "gate": decisions.promotion(con, plans),
            "sweep": decisions.sweep(con),
            "evaluation": decisions.evaluation(con, ev),
            "forest": decisions.forest(con, ev),
            "audio": audio.players(con, ev, blobs, prompts=audio_prompts),
            "equivalence": decisions.equivalence(con),
            "listening": _listening(q.listening_scores(con), q.packet_sets(con)) + _verdicts(q.latest_aggregate(con)),
            "packages": _packages(q.packages(con), q.model_lines(con), q.alias_history(con)),
            "reproductions": _reproductions(q.reproductions(con)),
            "lineage": lineage(con),
        }
        counts = q.receipt_counts(con)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    nav = "".join(f'<a href="#{key}">{escape(title.split(":")[0])}</a>' for key, title in SECTIONS)
    body = "".join(f'<h2 id="{key}">{escape(title)}</h2>{html[key]}' for key, title in SECTIONS)
    summary = ", ".join(f"{r['kind']}: {r['n']}" for r in counts)
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>voxledger dashboard</title><style>{CSS}</style></head><body>"
        f"<h1>voxledger</h1><p class='muted'>generated {now} from {escape(str(catalog.path))} &middot; receipts: {escape(summary)}</p>"
        f"<nav>{nav}</nav>{body}</body></html>"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)  # the dashboard is a derived view, regenerated at will: replacing it loses no evidence
    return out


def _listening(rows: list[q.Row], packet_sets: int) -> str:
    if not rows and not packet_sets:
        return nothing(
            "no packets exported yet (the pipeline exports them after a promotion; by hand: "
            "`voxledger packets export --evaluation RECEIPT`)"
        )
    if not rows:
        return nothing(
            f"no ratings aggregated yet ({packet_sets} packet set(s) exported; run `voxledger ratings aggregate` when submissions arrive)"
        )
    ci = [r for r in rows if r["ci_low"] is not None and r["ci_high"] is not None]
    fmt = {"ci_low": lambda v: cell(v) if v is not None else '<span class="warn">no CI</span>'}
    return (runs.chart(charts.listening(ci)) if ci else "") + table(rows, list(rows[0]), fmt)


def _verdicts(aggregate: AggregateReceipt | None) -> str:
    """The newest aggregate's verdicts, each with the raters it rests on; a verdict resting on suspicious raters is FLAGGED."""
    if aggregate is None:
        return ""
    res = aggregate.result
    checks = {(v.criterion, v.task, v.a, v.b): v for v in res.robustness.verdicts} if res.robustness else {}
    rows = []
    for d in res.deltas:
        v = checks.get((d.criterion, d.task, d.a, d.b))
        rows.append(
            {
                "criterion": d.criterion,
                "pair": f"{d.b} - {d.a}",
                "delta": d.mean_delta,
                "p_adjusted": d.p_adjusted,
                "verdict": d.better or "none",
                "robust": (v.robust_better or "none") if v else None,
                "changes without": ", ".join(v.flipped_by) if v else None,
                "flag": ("FLAGGED: " + "; ".join(v.reasons)) if v and v.flagged else ("ok" if v else "not assessed (older aggregate)"),
            }
        )
    flag = {"flag": lambda x: f'<span class="bad">{escape(x)}</span>' if x.startswith("FLAGGED") else escape(x)}
    bots = [s for s in res.robustness.bot_scores if s.flagged] if res.robustness else []
    note = nothing(
        "raters flagged by the bot score: " + ", ".join(f"{s.rater_id} (r {s.max_abs_r}, p {s.p_value})" for s in bots)
        if bots
        else "no rater flagged by the bot score"
    )
    return "<h3>Verdicts of the newest aggregate</h3>" + table(rows, list(rows[0]) if rows else [], flag, cls="verdicts") + note


PACKAGE_COLUMNS = [
    "package_sha256",
    "line",
    "backend",
    "size_bytes",
    "reload_bitwise_equal",
    "equivalence_band",
    "promotion",
    "published_name",
    "finished_at",
]
PACKAGE_HEADERS = {
    "package_sha256": "package",
    "size_bytes": "bytes",
    "reload_bitwise_equal": "reload bitwise equal",
    "equivalence_band": "equivalence",
    "published_name": "published as",
    "finished_at": "finished",
}
MOVE_COLUMNS = ["line", "alias", "target_sha256", "moved_at", "reason", "receipt_sha256"]
LINE_COLUMNS = ["line", "champion", "candidate", "moves", "last_moved_at"]
LINE_HEADERS = {"last_moved_at": "last move"}
MOVE_HEADERS = {"target_sha256": "target", "moved_at": "moved", "receipt_sha256": "receipt"}


def _promotion(value: object) -> str:
    if value is None:
        return '<span class="bad">unpromoted: passed no gate</span>'
    return digest(str(value))


def _packages(pkgs: list[q.Row], lines: list[q.Row], moves: list[q.Row]) -> str:
    cells = {"reload_bitwise_equal": status, "package_sha256": digest, "promotion": _promotion}
    package_table = table(pkgs, PACKAGE_COLUMNS, cells, empty="no packages yet", headers=PACKAGE_HEADERS)
    line_table = table(
        lines, LINE_COLUMNS, {"champion": digest, "candidate": digest}, empty="no model line has moved an alias yet", headers=LINE_HEADERS
    )
    move_table = table(moves, MOVE_COLUMNS, empty="no alias moves yet", headers=MOVE_HEADERS)
    return (
        package_table
        + "<h3>Model lines (one voice on one backend, each with its own aliases)</h3>"
        + line_table
        + "<h3>Alias history</h3>"
        + move_table
    )


LINE_OVERVIEW_HEADERS = {"training_run": "newest training run", "trained_at": "trained", "best_cv_loss": "best CV loss",
                         "gate": "newest gate", "gated_at": "gated", "evaluation": "newest evaluation", "evaluated_at": "evaluated"}  # fmt: skip


def _lines(rows: list[q.Row]) -> str:
    """One row per model line (one voice on one backend): a home holding several voices shows each."""
    digests: dict[str, Cell] = {k: digest for k in ("training_run", "gate", "evaluation", "champion")}
    return table(rows, list(rows[0]) if rows else [], digests, empty="no training run yet", headers=LINE_OVERVIEW_HEADERS)


REPRODUCTION_COLUMNS = [
    "original",
    "original_kind",
    "stage",
    "verdict",
    "code_drift_allowed",
    "rerun_wall_s",
    "finished_at",
    "reproduction",
]


def _reproductions(rows: list[q.Row]) -> str:
    cells: dict[str, Cell] = {"original": digest, "reproduction": digest}
    empty = "no reproductions yet (`voxledger reproduce RECEIPT --corpus CORPUS` re-runs a stage and records its verdict)"
    return table(
        rows, REPRODUCTION_COLUMNS, cells, empty=empty, headers={"rerun_wall_s": "re-run s", "original_kind": "kind"}, cls="reproductions"
    )
