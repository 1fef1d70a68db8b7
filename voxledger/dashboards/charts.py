"""Vega-Lite chart specs rendered to inline SVG (vl-convert: offline, no JavaScript in the page)."""

from __future__ import annotations

from typing import Any

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"


def svg(spec: dict[str, Any]) -> str:
    """Render a Vega-Lite spec to an SVG string."""
    import vl_convert as vlc

    return str(vlc.vegalite_to_svg({"$schema": SCHEMA, **spec}))


def training_curves(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Train and CV loss per epoch, one panel per run with its own axes (a 9-epoch run is not
    squashed onto a 60-epoch one); panels are titled by plan name, mode and backend, and the
    best epoch is ringed."""
    data = [
        {
            "run": f"{r['plan_name']} ({r['mode']}, {r['backend']})",
            "epoch": r["epoch"],
            "loss": r[k],
            "curve": k.replace("_loss", ""),
            "best": bool(r["is_best"]) and k == "cv_loss",
        }
        for r in rows
        for k in ("train_loss", "cv_loss")
    ]
    x = {"field": "epoch", "type": "quantitative", "axis": {"tickMinStep": 1, "format": "d"}, "scale": {"nice": False}}
    y = {"field": "loss", "type": "quantitative", "scale": {"zero": False}}
    return {
        "data": {"values": data},
        "columns": 3,
        "facet": {
            "field": "run",
            "type": "nominal",
            "title": None,
            "sort": None,
            "header": {"labelFontSize": 12, "labelFontWeight": "bold"},
        },
        "resolve": {"scale": {"x": "independent", "y": "independent"}},
        "spec": {
            "width": 260,
            "height": 150,
            "layer": [
                {"mark": {"type": "line", "point": True}, "encoding": {"x": x, "y": y, "color": {"field": "curve", "type": "nominal"}}},
                {
                    "transform": [{"filter": "datum.best"}],
                    "mark": {"type": "point", "size": 160, "color": "#c62828", "strokeWidth": 2},
                    "encoding": {"x": x, "y": y},
                },
            ],
        },
    }


def stage_times(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A Gantt bar per stage of one run: offset from the run's start to the stage's end, seconds."""
    data, t = [], 0.0
    for r in rows:
        data.append(
            {
                "stage": r["stage"],
                "start": t,
                "end": t + r["wall_s"],
                "wall_s": round(r["wall_s"], 1),
                "how": "cached" if r["cached"] else r["status"],
            }
        )
        t += r["wall_s"]
    colors = {"domain": ["succeeded", "cached", "failed", "skipped"], "range": ["#4a78b0", "#9bbbe0", "#c62828", "#bbbbbb"]}
    return {
        "data": {"values": data},
        "width": 520,
        "height": {"step": 20},
        "encoding": {"y": {"field": "stage", "type": "nominal", "sort": None, "title": None}},
        "layer": [
            {
                "mark": {"type": "bar", "minBandWidth": 2},
                "encoding": {
                    "x": {"field": "start", "type": "quantitative", "title": "seconds from the run's start"},
                    "x2": {"field": "end"},
                    "color": {"field": "how", "type": "nominal", "scale": colors, "title": None},
                },
            },
            {
                "mark": {"type": "text", "align": "left", "dx": 4, "fontSize": 10},
                "encoding": {
                    "x": {"field": "end", "type": "quantitative"},
                    "text": {"field": "wall_s", "type": "quantitative", "format": ".1f"},
                },
            },
        ],
    }


def metric_intervals(rows: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """Per candidate and category: the mean, with its CI where one was estimated (a point alone
    means no CI, never a zero-width interval)."""
    data = [r for r in rows if r["metric"] == metric]
    return {
        "data": {"values": data},
        "width": 220,
        "height": 120,
        "title": metric,
        "encoding": {
            "y": {"field": "candidate", "type": "nominal", "title": None},
            "color": {"field": "category", "type": "nominal"},
            "yOffset": {"field": "category"},
        },
        "layer": [
            {
                "transform": [{"filter": "isValid(datum.low) && isValid(datum.high)"}],
                "mark": {"type": "rule"},
                "encoding": {"x": {"field": "low", "type": "quantitative", "title": metric}, "x2": {"field": "high"}},
            },
            {"mark": {"type": "point", "filled": True}, "encoding": {"x": {"field": "mean", "type": "quantitative"}}},
        ],
    }


def forest(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Paired deltas (candidate - baseline) with CIs where estimated, one row per comparison, zero marked."""
    data = [{**r, "label": f"{r['candidate']} - {r['baseline']}"} for r in rows]
    return {
        "data": {"values": data},
        "width": 240,
        "height": {"step": 18},
        "facet": {"row": {"field": "metric", "type": "nominal", "title": None}},
        "resolve": {"scale": {"x": "independent"}},
        "spec": {
            "width": 240,
            "layer": [
                {
                    "transform": [{"filter": "isValid(datum.low) && isValid(datum.high)"}],
                    "mark": "rule",
                    "encoding": {
                        "y": {"field": "label", "type": "nominal", "title": None},
                        "x": {"field": "low", "type": "quantitative", "title": "delta"},
                        "x2": {"field": "high"},
                    },
                },
                {
                    "mark": {"type": "point", "filled": True},
                    "encoding": {"y": {"field": "label", "type": "nominal"}, "x": {"field": "delta", "type": "quantitative"}},
                },
                {"mark": {"type": "rule", "strokeDash": [3, 3], "color": "gray"}, "encoding": {"x": {"datum": 0}}},
            ],
        },
    }


def equivalence_bands(rows: list[dict[str, Any]], green_max_rel: float, yellow_max_rel: float) -> dict[str, Any]:
    """Each float stage's ``rel`` on a log axis against the GREEN and YELLOW bounds (a ``rel`` of
    exactly 0 is drawn at the axis floor, 1e-12, and labelled as such in the table)."""
    data = [{"stage": r["stage"], "rel": max(r["rel"], 1e-12), "band": r["band"]} for r in rows if r["rel"] is not None]
    bands = {"domain": ["GREEN", "YELLOW", "RED"], "range": ["#1a7f37", "#d4a000", "#c62828"]}
    x = {"field": "rel", "type": "quantitative", "scale": {"type": "log"}, "title": "rel = max|ref - cand| / max|ref| (log)"}
    return {
        "width": 360,
        "height": {"step": 22},
        "layer": [
            {
                "data": {"values": data},
                "mark": {"type": "point", "filled": True, "size": 80},
                "encoding": {
                    "y": {"field": "stage", "type": "nominal", "title": None},
                    "x": x,
                    "color": {"field": "band", "type": "nominal", "scale": bands},
                },
            },
            {
                "data": {"values": [{"bound": green_max_rel, "name": "green max"}, {"bound": yellow_max_rel, "name": "yellow max"}]},
                "mark": {"type": "rule", "strokeDash": [4, 3], "color": "#888"},
                "encoding": {"x": {"field": "bound", "type": "quantitative"}},
            },
        ],
    }


def listening(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Listening-test means with rater-clustered CIs per criterion and candidate."""
    return {
        "data": {"values": rows},
        "width": 220,
        "height": 100,
        "facet": {"column": {"field": "criterion", "type": "nominal"}},
        "resolve": {"scale": {"x": "independent"}},
        "spec": {
            "layer": [
                {
                    "mark": "rule",
                    "encoding": {
                        "y": {"field": "candidate", "type": "nominal"},
                        "x": {"field": "ci_low", "type": "quantitative", "title": "score"},
                        "x2": {"field": "ci_high"},
                    },
                },
                {
                    "mark": {"type": "point", "filled": True},
                    "encoding": {"y": {"field": "candidate", "type": "nominal"}, "x": {"field": "mean", "type": "quantitative"}},
                },
            ]
        },
    }


def sweep_curves(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """CV loss per epoch of every member of one sweep, overlaid on one pair of axes (one line per
    member, labelled by its values); the winning member's line is drawn thicker."""
    x = {"field": "epoch", "type": "quantitative", "axis": {"tickMinStep": 1, "format": "d"}, "scale": {"nice": False}}
    y = {"field": "cv_loss", "type": "quantitative", "title": "CV loss", "scale": {"zero": False}}
    return {
        "data": {"values": rows},
        "width": 480,
        "height": 220,
        "mark": {"type": "line", "point": True},
        "encoding": {
            "x": x,
            "y": y,
            "color": {"field": "member", "type": "nominal", "sort": None},
            "strokeWidth": {"field": "won", "type": "nominal", "scale": {"domain": [False, True], "range": [1.5, 4]}, "legend": None},
        },
    }
