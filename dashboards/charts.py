"""Vega-Lite chart specs rendered to inline SVG (vl-convert: offline, no JavaScript in the page)."""

from __future__ import annotations

from typing import Any

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"


def svg(spec: dict[str, Any]) -> str:
    """Render a Vega-Lite spec to an SVG string."""
    import vl_convert as vlc

    return str(vlc.vegalite_to_svg({"$schema": SCHEMA, **spec}))


def training_curves(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Train and CV loss per epoch, one panel per run."""
    data = [{"run": f"{r['mode']} {r['run_key'][:8]}", "epoch": r["epoch"], "loss": r[k], "curve": k.replace("_loss", "")}
            for r in rows for k in ("train_loss", "cv_loss")]  # fmt: skip
    return {"data": {"values": data}, "width": 260, "height": 160,
            "mark": {"type": "line", "point": True},
            "encoding": {"x": {"field": "epoch", "type": "quantitative"}, "y": {"field": "loss", "type": "quantitative", "scale": {"zero": False}},
                         "color": {"field": "curve", "type": "nominal"}, "column": {"field": "run", "type": "nominal", "title": None}}}  # fmt: skip


def metric_intervals(rows: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """Per candidate and category: mean with its bootstrap CI."""
    data = [r for r in rows if r["metric"] == metric]
    return {"data": {"values": data}, "width": 220, "height": 120, "title": metric,
            "encoding": {"y": {"field": "candidate", "type": "nominal", "title": None}, "color": {"field": "category", "type": "nominal"},
                         "yOffset": {"field": "category"}},
            "layer": [{"mark": {"type": "rule"}, "encoding": {"x": {"field": "low", "type": "quantitative", "title": metric}, "x2": {"field": "high"}}},
                      {"mark": {"type": "point", "filled": True}, "encoding": {"x": {"field": "mean", "type": "quantitative"}}}]}  # fmt: skip


def forest(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Paired deltas (candidate - baseline) with CIs, one row per comparison, zero marked."""
    data = [{**r, "label": f"{r['candidate']} - {r['baseline']}"} for r in rows]
    return {"data": {"values": data}, "width": 240, "height": {"step": 18},
            "facet": {"row": {"field": "metric", "type": "nominal", "title": None}},
            "resolve": {"scale": {"x": "independent"}},
            "spec": {"width": 240, "layer": [
                {"mark": "rule", "encoding": {"y": {"field": "label", "type": "nominal", "title": None},
                                              "x": {"field": "low", "type": "quantitative", "title": "delta"}, "x2": {"field": "high"}}},
                {"mark": {"type": "point", "filled": True}, "encoding": {"y": {"field": "label", "type": "nominal"}, "x": {"field": "delta", "type": "quantitative"}}},
                {"mark": {"type": "rule", "strokeDash": [3, 3], "color": "gray"}, "encoding": {"x": {"datum": 0}}},
            ]}}  # fmt: skip


def listening(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Listening-test means with rater-clustered CIs per criterion and candidate."""
    return {"data": {"values": rows}, "width": 220, "height": 100,
            "facet": {"column": {"field": "criterion", "type": "nominal"}}, "resolve": {"scale": {"x": "independent"}},
            "spec": {"layer": [
                {"mark": "rule", "encoding": {"y": {"field": "candidate", "type": "nominal"}, "x": {"field": "ci_low", "type": "quantitative", "title": "score"}, "x2": {"field": "ci_high"}}},
                {"mark": {"type": "point", "filled": True}, "encoding": {"y": {"field": "candidate", "type": "nominal"}, "x": {"field": "mean", "type": "quantitative"}}},
            ]}}  # fmt: skip
