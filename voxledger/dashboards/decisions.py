"""Dashboard sections about what was decided: the promotion gate, evaluation, equivalence."""

from __future__ import annotations

from html import escape
from typing import Any

import duckdb

from voxledger.dashboards import charts
from voxledger.dashboards.html import band, digest, footnotes, iv, nothing, status, table, when
from voxledger.dashboards.runs import chart
from voxledger.schemas.equivalence_receipt import EquivalenceReceipt
from voxledger.schemas.evaluation import EvaluationReceipt, PairedTest
from voxledger.schemas.multiplicity import family_line, p_with_adjusted
from voxledger.schemas.promotion import PromotionReceipt
from voxledger.stores import dashboard_queries as q

KEY_METRICS = ("wer:whisper_en", "cer:basic", "speaker_sim", "predicted_mos_ovrl", "content_gate_pass")


def promotion(con: duckdb.DuckDBPyConnection, plan_names: dict[str, str]) -> str:
    """The newest promotion: policy, incumbent, and every gate rule as judged for every challenger."""
    ids = q.latest_of_kind(con, "promotion")
    if not ids:
        return nothing("no promotions yet")
    p = q.receipt(con, ids[0], PromotionReceipt)
    params, result = p.parameters, p.result
    verdict = (
        f"promoted <b>{escape(result.promoted)}</b>" if result.promoted else "<span class='bad'>no challenger passed every gate</span>"
    )
    head = (
        f"<p>policy <b>{escape(plan_names.get(params.policy_sha256, params.policy_sha256[:12]))}</b>: incumbent "
        f"<b>{escape(params.incumbent)}</b> {digest(params.incumbent_sha256)}, {len(result.challengers)} challenger(s); {verdict}"
        f" &middot; <span class='muted'>{when(p.finished_at)}, receipt {digest(ids[0])}</span></p>"
        + (f"<p class='muted'>error control: {escape(result.error_control)}</p>" if result.error_control else "")
    )
    rows = [
        {
            "challenger": f"{c.name} (epoch {c.epoch}, cv {c.cv_loss:.4g})",
            "rule": r.metric,
            "statistic": r.statistic,
            "value": r.value,
            "threshold": f"{r.op} {r.threshold:g}",
            "passed": r.passed,
            "detail": r.detail,
        }
        for c in result.challengers
        for r in c.rules
    ]
    moves = [{"alias": m.alias, "target": m.target_sha256, "previous": m.previous_sha256, "reason": m.reason} for m in result.moves]
    return (
        head
        + table(
            rows,
            ["challenger", "rule", "statistic", "value", "threshold", "passed", "detail"],
            {"passed": status, "value": _value},
            empty="no challengers",
            cls="gate-rules",
        )
        + "<h3>Alias moves</h3>"
        + table(moves, ["alias", "target", "previous", "reason"], empty="no alias moved")
    )


def _value(v: float | None) -> str:
    return '<span class="warn">not estimable</span>' if v is None else f"{v:.4g}"


def evaluation(con: duckdb.DuckDBPyConnection, evaluation_sha256: str | None) -> str:
    """Per metric and candidate: mean and CI (or "no CI" and why), with per-category charts."""
    if evaluation_sha256 is None:
        return nothing("no evaluations yet")
    ev = q.receipt(con, evaluation_sha256, EvaluationReceipt)
    summaries = ev.result.summaries
    metrics = sorted(
        {m for s in summaries for m in s.overall}, key=lambda m: (m not in KEY_METRICS, KEY_METRICS.index(m) if m in KEY_METRICS else 0, m)
    )
    notes: list[str] = []
    rows = [{"metric": m, **{s.candidate: iv(s.overall[m], notes) if m in s.overall else "-" for s in summaries}} for m in metrics]
    cols = [s.candidate for s in summaries]
    points = [
        {"candidate": s.candidate, "category": cat, "metric": m, "mean": i.mean, "low": i.low, "high": i.high}
        for s in summaries
        for cat, by in s.by_category.items()
        for m, i in by.items()
    ]
    shown = [m for m in KEY_METRICS if any(p["metric"] == m for p in points)]
    validity = [
        {"candidate": s.candidate, "rows": s.n_rows, "invalid rate": s.invalid_rate, "content gate fail rate": s.content_gate_fail_rate}
        for s in summaries
    ]
    head = (
        f"<p>plan <b>{escape(ev.parameters.plan_name)}</b>, {len(summaries)} candidates, {ev.parameters.n_generations} generations"
        f" &middot; <span class='muted'>{when(ev.finished_at)}, receipt {digest(evaluation_sha256)}; predicted MOS is a model's "
        "prediction, not a listener rating; a point without a bar has no CI</span></p>"
    )
    interval_charts = '<div class="charts">' + "".join(chart(charts.metric_intervals(points, m)) for m in shown) + "</div>"
    metric_table = table(rows, ["metric", *cols], {c: str for c in cols})
    validity_table = table(validity, ["candidate", "rows", "invalid rate", "content gate fail rate"])
    return head + interval_charts + metric_table + footnotes(notes) + validity_table + _protocol(ev)


def _protocol(ev: EvaluationReceipt) -> str:
    """The published protocol the plan named and every way the run differs from it; how failures counted."""
    out = ""
    if ev.result.profile:
        items = "".join(f"<li>{escape(line)}</li>" for line in ev.result.deviations) or "<li>no difference found</li>"
        out += f"<h3>Beside the {escape(ev.result.profile)} protocol</h3><p>This run differs from it in:</p><ul>{items}</ul>"
    if ev.result.failures:
        out += f"<p class='muted'>{escape(ev.result.failures)}</p>"
    return out


def forest(con: duckdb.DuckDBPyConnection, evaluation_sha256: str | None) -> str:
    """Paired deltas (candidate - baseline) with their CIs and tests, or why there are none."""
    if evaluation_sha256 is None:
        return nothing("no comparisons yet")
    ev = q.receipt(con, evaluation_sha256, EvaluationReceipt)
    comps = ev.result.comparisons
    if not comps:
        return nothing("no comparisons in the newest evaluation")
    notes: list[str] = []
    points = [
        {
            "candidate": c.candidate,
            "baseline": c.baseline,
            "metric": c.metric,
            "delta": c.delta.mean,
            "low": c.delta.low,
            "high": c.delta.high,
        }
        for c in comps
        if c.metric in KEY_METRICS
    ]
    rows = [
        {
            "comparison": f"{c.candidate} - {c.baseline}",
            "metric": c.metric,
            "delta": iv(c.delta, notes),
            "p": _p(c.test, notes),
            "test": c.test.method,
            "pairs": c.n_pairs,
            "better": "lower" if c.lower_is_better else "higher",
        }
        for c in comps
    ]
    skipped = [{"metric": k, "why": v} for k, v in ev.result.not_compared.items()]
    adjusted = next((c.test for c in comps if c.test.adjustment is not None), None)
    family = "" if adjusted is None else family_line(adjusted.adjustment, adjusted.family, adjusted.family_size)
    return (
        (chart(charts.forest(points)) if points else "")
        + table(rows, ["comparison", "metric", "delta", "p", "test", "pairs", "better"], {"delta": str, "p": str})
        + (f"<p class='muted'>{escape(family)}</p>" if family else "")
        + footnotes(notes)
        + (("<h3>Not compared</h3>" + table(skipped, ["metric", "why"])) if skipped else "")
    )


def _p(test: PairedTest, notes: list[str]) -> str:
    if test.p_value is not None:
        return escape(p_with_adjusted(test.p_value, test.p_adjusted, test.adjustment))
    note = test.note or "test not estimable"
    if note not in notes:
        notes.append(note)
    return f'<span class="warn" title="{escape(note)}">no test<sup>{notes.index(note) + 1}</sup></span>'


def equivalence(con: duckdb.DuckDBPyConnection, limit: int = 3) -> str:
    """The newest equivalence reports: overall band and, per stage, ``rel`` against the bands."""
    ids = q.latest_of_kind(con, "equivalence", limit)
    if not ids:
        return nothing("no equivalence reports yet")
    return "".join(_equivalence_one(q.receipt(con, rid, EquivalenceReceipt), rid) for rid in ids)


def _equivalence_one(e: EquivalenceReceipt, rid: str) -> str:
    rep, bands = e.report, e.report.bands
    rows: list[dict[str, Any]] = [
        {
            "stage": s.stage,
            "kind": s.kind,
            "band": s.band,
            "rel": s.rel,
            "max_abs_err": s.max_abs_err,
            "compared": s.n_compared,
            "tokens": _tokens(s.tokens_equal, s.first_divergence),
        }
        for s in rep.stages
    ]
    rows += [
        {"stage": s.stage, "kind": "-", "band": None, "rel": None, "max_abs_err": None, "compared": 0, "tokens": f"skipped: {s.reason}"}
        for s in rep.skipped
    ]
    drawn = [{"stage": s.stage, "rel": s.rel, "band": s.band} for s in rep.stages if s.rel is not None]
    verdict = "passed" if rep.passed else "<span class=bad>failed</span>"
    head = (
        f"<h3>{escape(e.parameters.reference.name)} vs {escape(e.parameters.candidate.name)}: {band(rep.band)} {verdict}</h3>"
        f"<p class='muted'>GREEN: rel &le; {bands.green_max_rel:g}; YELLOW: rel &le; {bands.yellow_max_rel:g}; RED above; "
        f"{when(e.finished_at)}, receipt {digest(rid)}</p>"
    )
    band_chart = chart(charts.equivalence_bands(drawn, bands.green_max_rel, bands.yellow_max_rel)) if drawn else ""
    stage_cols = ["stage", "kind", "band", "rel", "max_abs_err", "compared", "tokens"]
    return head + band_chart + table(rows, stage_cols, {"band": band, "rel": _rel}, cls="equivalence-bands")


def _rel(v: float | None) -> str:
    if v is None:
        return '<span class="muted">-</span>'
    return "0 (exact)" if v == 0 else f"{v:.3g}"


def _tokens(equal: bool | None, first: int | None) -> str:
    if equal is None:
        return "-"
    return "identical" if equal else f"diverge at {first}"


def sweep(con: duckdb.DuckDBPyConnection) -> str:
    """The newest sweep: the grid, every member's CV curve overlaid, each challenger's gate values with
    their intervals, the winner and why (``stores/sweep_report.py``, read from the catalog)."""
    from voxledger.stores.sweep_report import sweep_report

    ids = q.latest_of_kind(con, "sweep")
    if not ids:
        return nothing("no sweeps yet (voxledger sweep run)")
    rep = sweep_report(lambda rid, model: q.receipt(con, rid, model), ids[0])
    f = rep.family
    won = (
        f"<b>{escape(rep.promoted)}</b> (member {escape(rep.promoted_member or '')})"
        if rep.promoted
        else "<span class='bad'>nothing</span>"
    )
    head = (
        f"<p>sweep <b>{escape(rep.name)}</b> {digest(rep.sweep)}: {len(rep.members)} members varying {escape(', '.join(rep.axes) or '-')}; "
        f"one gate over {f.challengers} challengers x {f.rules} rule(s) against the {escape(rep.incumbent)} ({f.method}, "
        f"{100 * f.per_challenger_confidence:.2f}% per challenger; P(any false pass) &le; {100 * f.familywise_one_sided:.2f}% one-sided); "
        f"promoted {won}</p><p>why: {escape(rep.why)} &middot; <span class='muted'>decision {digest(rep.promotion)}</span></p>"
    )
    grid = [
        {"member": m.name, **{a: getattr(m.settings, a) for a in rep.axes}, "best epoch": m.best_epoch, "best cv loss": m.best_cv_loss,
         "won": m.won, "run": m.training_run}
        for m in rep.members
    ]  # fmt: skip
    curves = [{"member": m.name, "epoch": e.epoch, "cv_loss": e.cv_loss, "won": m.won} for m in rep.members for e in m.curve]
    values = [
        {"challenger": f"{g.challenger} (cv {g.cv_loss:.4g})", "rule": f"{g.statistic}({g.metric}) {g.op} {g.threshold:g}",
         "value": g.value, "interval": _bounds(g.low, g.high), "passed": g.passed}
        for m in rep.members
        for g in m.gate
    ]  # fmt: skip
    return (
        head
        + table(grid, ["member", *rep.axes, "best epoch", "best cv loss", "won", "run"], {"won": status}, cls="sweep-grid")
        + chart(charts.sweep_curves(curves))
        + table(
            values,
            ["challenger", "rule", "value", "interval", "passed"],
            {"passed": status, "value": _value},
            empty="no challengers",
            cls="sweep-gate",
        )
    )


def _bounds(low: float | None, high: float | None) -> str:
    return "not estimable" if low is None or high is None else f"[{low:.4g}, {high:.4g}]"
