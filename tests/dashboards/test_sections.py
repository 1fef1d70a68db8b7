"""Dashboard pieces on hand-made catalog rows: fast, no pipeline run."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.factories import hexd
from voxledger.dashboards.html import interval
from voxledger.dashboards.lineage_svg import Node, collapse_checkpoints, draw
from voxledger.dashboards.runs import audit
from voxledger.stores.catalog import Catalog


def test_missing_interval_reads_no_ci_with_its_note_never_zero_width() -> None:
    cell = interval(0.25, None, None, "2 prompt(s); cluster_t needs at least 5 (add prompts to the plan)")
    assert "no CI" in cell and "needs at least 5" in cell
    assert "[" not in cell  # no interval drawn, not even [0.25, 0.25]
    notes: list[str] = []
    assert "no CI<sup>1</sup>" in interval(0.5, None, None, "few prompts", notes)
    assert "no CI<sup>1</sup>" in interval(0.6, None, None, "few prompts", notes)  # one footnote per distinct note
    assert notes == ["few prompts"]
    assert "[0.1, 0.3]" in interval(0.2, 0.1, 0.3, None)


def test_checkpoint_series_collapse_into_one_box_per_run() -> None:
    run = hexd(900)
    ckpts = {hexd(i): (run, i) for i in range(9)}
    nodes = {rid: Node(kind="checkpoint", name="", title=rid) for rid in ckpts}
    nodes |= {
        hexd(100): Node(kind="audit", name="corpus demo", title=hexd(100)),
        hexd(101): Node(kind="training_run", name="tiny-base", title=hexd(101)),
    }
    edges = {(hexd(100), rid) for rid in ckpts} | {(rid, hexd(101)) for rid in ckpts}
    out, merged = collapse_checkpoints(nodes, edges, ckpts, {run: 6})
    assert len(out) == 3
    box = out[f"checkpoints:{run}"]
    assert (box["kind"], box["name"]) == ("checkpoints x9", "epochs 0-8, best = epoch 6")
    assert merged == {(hexd(100), f"checkpoints:{run}"), (f"checkpoints:{run}", hexd(101))}
    svg = draw(out, merged)
    assert svg.count("<rect") == 3 and "corpus demo" in svg and "tiny-base" in svg
    assert hexd(3) in svg  # every collapsed digest stays reachable in the box's tooltip


def test_audit_section_counts_findings_by_code_and_severity(tmp_path: Path) -> None:
    catalog, rid = Catalog(tmp_path / "catalog.duckdb"), hexd(1)
    findings = [("split_leakage", "error", ["u1", "u2"], "speaker s1 in train and test"), ("clipping", "warning", ["u3"], "u3 clips"),
                ("clipping", "warning", ["u4", "u5", "u6", "u7", "u8"], "5 files clip")]  # fmt: skip
    with catalog.connect() as con:
        con.execute("INSERT INTO receipts VALUES (?, 'audit', 1, 'f', 't', 'failed', now(), now(), NULL, ?)",
                    [rid, json.dumps({"result": {"n_utterances": 40}})])  # fmt: skip
        con.execute("INSERT INTO audits VALUES (?, 'demo', 'fail', ?)", [rid, hexd(2)])
        for seq, (code, sev, ids, msg) in enumerate(findings):
            con.execute("INSERT INTO audit_findings VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL)", [rid, seq, code, sev, ids, msg])
    with catalog.connect(read_only=True) as con:
        html = audit(con)
    assert "corpus <b>demo</b>: 40 utterances" in html and "3 findings" in html
    assert '<td>clipping</td><td><span class="warn">warning</span></td><td>2</td><td>6</td>' in html  # 2 findings naming 6 utterances
    assert html.index("split_leakage") < html.index("clipping")  # errors first
    assert "u4, u5, u6, u7 (+1)" in html
    assert "Every corpus" not in html  # one corpus: its audit is the section


def test_audit_section_lists_every_corpus_newest_audit_each(tmp_path: Path) -> None:
    """Two voices in one home: the older corpus's failed audit stays on the dashboard beside the newer one."""
    catalog = Catalog(tmp_path / "catalog.duckdb")
    audits = [(hexd(1), "joe", "fail", "2026-01-01 10:00:00"), (hexd(2), "joe", "pass", "2026-01-02 10:00:00"),
              (hexd(3), "ann", "fail", "2026-01-01 12:00:00")]  # fmt: skip
    with catalog.connect() as con:
        for rid, corpus, verdict, at in audits:
            status = "succeeded" if verdict == "pass" else "failed"
            con.execute("INSERT INTO receipts VALUES (?, 'audit', 1, 'f', 't', ?, ?, ?, NULL, ?)",
                        [rid, status, at, at, json.dumps({"result": {"n_utterances": 40}})])  # fmt: skip
            con.execute("INSERT INTO audits VALUES (?, ?, ?, ?)", [rid, corpus, verdict, hexd(9)])
        con.execute("INSERT INTO audit_findings VALUES (?, 0, 'split_leakage', 'error', ['u1'], 'leak', NULL, NULL, NULL, NULL)", [hexd(3)])
    with catalog.connect(read_only=True) as con:
        html = audit(con)
    every = html[html.index("Every corpus in this home (2)") : html.index("</table>")]
    assert every.index(">joe<") < every.index(">ann<")  # newest first; joe's older failed audit replaced by its newer pass
    assert f"title='{hexd(2)}'" in every and f"title='{hexd(3)}'" in every and f"title='{hexd(1)}'" not in every
    assert '<span class="bad">fail</span>' in every and '<span class="ok">pass</span>' in every


def test_dashboards_read_the_catalog_only_through_query_functions() -> None:
    files = sorted((Path(__file__).resolve().parents[2] / "dashboards").glob("*.py"))
    assert len(files) == 8  # __init__, audio, charts, decisions, html, lineage_svg, report, runs
    with_sql = [f.name for f in files if ".execute(" in f.read_text() or re.search(r"\bSELECT\b|\bFROM \w+ WHERE\b", f.read_text())]
    assert not with_sql, f"SQL belongs in stores/dashboard_queries.py, found in {with_sql}"


def test_dashboard_shows_what_exists_not_what_was_planned(tmp_path: Path) -> None:
    from voxledger.dashboards.report import _listening, _packages
    from voxledger.stores import dashboard_queries as q

    catalog = Catalog(tmp_path / "catalog.duckdb")
    pkg_rid, promo_rid, unpromoted_rid = hexd(10), hexd(11), hexd(12)
    with catalog.connect() as con:
        for rid, pkg in ((pkg_rid, hexd(20)), (unpromoted_rid, hexd(21))):
            con.execute(
                "INSERT INTO packages VALUES (?, 'succeeded', ?, 10, 'tiny', ?, ?, NULL, NULL, true, 0.0, NULL, NULL, NULL, now())",
                [rid, pkg, hexd(30), hexd(31)],
            )
        con.execute("INSERT INTO edges VALUES (?, ?, 'promotion', 'input', 'receipt')", [promo_rid, pkg_rid])
    with catalog.connect(read_only=True) as con:
        assert q.packet_sets(con) == 0
        listening = _listening(q.listening_scores(con), q.packet_sets(con))
        html = _packages(q.packages(con), q.model_lines(con), [])
    assert "no packets exported yet" in listening and "are exported" not in listening
    assert html.count("unpromoted: passed no gate") == 1  # only the package built without a promotion
    assert promo_rid[:12] in html
    with catalog.connect() as con:
        con.execute("INSERT INTO receipts VALUES (?, 'packet_set', 1, 'f', 't', 'succeeded', now(), now(), NULL, '{}')", [hexd(13)])
    with catalog.connect(read_only=True) as con:
        assert "1 packet set(s) exported" in _listening(q.listening_scores(con), q.packet_sets(con))


def test_provenance_speaker_never_counts_held_out_clips_as_trained_on(tmp_path: Path) -> None:
    from voxledger.stores.provenance import packages_with_speaker

    catalog = Catalog(tmp_path / "catalog.duckdb")
    audit_rid, run_rid, pkg_rid = hexd(1), hexd(2), hexd(3)
    plan = {"parameters": {"effective_config": {"plan": {"train_splits": ["train"], "cv_splits": ["dev"]}}}}
    with catalog.connect() as con:
        con.execute(
            "INSERT INTO receipts VALUES (?, 'training_run', 1, 'f', 't', 'succeeded', now(), now(), NULL, ?)", [run_rid, json.dumps(plan)]
        )
        con.execute("INSERT INTO edges VALUES (?, ?, 'audit', 'input', 'receipt')", [audit_rid, run_rid])
        con.execute("INSERT INTO edges VALUES (?, ?, 'training_run', 'input', 'receipt')", [run_rid, pkg_rid])
        con.execute(
            "INSERT INTO packages VALUES (?, 'succeeded', ?, 10, 'tiny', ?, ?, NULL, NULL, true, 0.0, NULL, NULL, NULL, now())",
            [pkg_rid, hexd(4), run_rid, hexd(5)],
        )
        rows = [("trained", "train", 5), ("trained", "dev", 2), ("trained", "test", 1), ("tested", "test", 3), ("tuned", "dev", 2)]
        for spk, split, n in rows:
            con.execute("INSERT INTO audit_speaker_splits VALUES (?, ?, ?, ?)", [audit_rid, spk, split, n])
        for spk, n in (("trained", 8), ("tested", 3), ("tuned", 2)):
            con.execute("INSERT INTO audit_speakers VALUES (?, ?, ?, 0.1)", [audit_rid, spk, n])
    with catalog.connect(read_only=True) as con:
        (row,) = packages_with_speaker(con, "trained")
        assert (row["trained_utterances"], row["cv_utterances"], row["held_out_utterances"]) == (5, 2, 1)
        assert packages_with_speaker(con, "tested") == []  # test clips only: never trained on
        (tuned,) = packages_with_speaker(con, "tuned")  # CV only: no gradient, but it chose the checkpoint
        assert (tuned["trained_utterances"], tuned["cv_utterances"]) == (0, 2)
        assert packages_with_speaker(con, "nobody") == []
