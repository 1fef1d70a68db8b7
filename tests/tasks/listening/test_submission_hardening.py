"""Submissions that cannot lose a rater's work and cannot be gamed cheaply (issue 19, items 1-4, 7).

Each test reproduces a failure of the landed code: a crash that half-wrote the catalog and
locked the rater out, one bad number stopping every file, a hand-written log with 1 ms plays, and
screening evaded by leaving the screening rows out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.tasks.listening.conftest import Exported
from tests.tasks.listening.factory import oracle_scorer, simulate_submission, write_json
from voxledger.schemas.errors import PacketError
from voxledger.schemas.listening import KeyEntry, PacketTrial, SubmissionChecks
from voxledger.tasks.listening.keys import home_secret, submission_mac
from voxledger.tasks.listening.verify import check_submission, load_packets
from voxledger.tasks.stages import ratings as agg
from voxledger.tasks.stages.ratings import aggregate_ratings


def doc_for(ex: Exported, rater: str, session: str = "c" * 32, **kw: Any) -> dict[str, Any]:
    return simulate_submission(ex.packets / rater, ex.key, kw.pop("scorer", oracle_scorer()), session=session, **kw)


def resealed(doc: dict[str, Any]) -> dict[str, Any]:
    """What a rater who read the token out of index.html can do: edit, then recompute the MAC."""
    doc["mac"] = submission_mac(doc, doc["token"])
    return doc


def receipt_count(ex: Exported) -> int:
    with ex.home.catalog.connect(read_only=True) as con:
        return int(con.execute("SELECT count(*) FROM receipts").fetchone()[0])  # type: ignore[index]


def gold_blind(e: KeyEntry, crit: str, trial: PacketTrial, versus: KeyEntry | None) -> int:
    """Fails the gold items, rates everything else carefully."""
    return 3 if e.role == "gold" else oracle_scorer()(e, crit, trial, versus)


# --- 1. a rater's genuine work can never be locked out ------------------------------------------


def test_only_file_failing_screening_is_recorded_not_crashed(exported: Exported, tmp_path: Path) -> None:
    # landed code: bradley_terry([]) raised "zero-size array" after the submission receipt was written
    f = write_json(tmp_path / "r01.json", doc_for(exported, "r01", scorer=gold_blind))
    res = aggregate_ratings(exported.home, exported.receipt_id, [f]).receipt.result
    assert res.submissions_accepted == 1 and not res.screening[0].included
    assert res.bradley_terry == () and res.scores == ()  # nothing kept: no statistic pretends otherwise


def test_crash_before_commit_leaves_home_unchanged_and_rater_free(
    exported: Exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    genuine = write_json(tmp_path / "r01.json", doc_for(exported, "r01"))
    before = receipt_count(exported)

    def boom(*_: object, **__: object) -> None:
        raise RuntimeError("statistics failed")

    monkeypatch.setattr(agg.stats, "bradley_terry", boom)
    with pytest.raises(RuntimeError, match="statistics failed"):
        aggregate_ratings(exported.home, exported.receipt_id, [genuine])
    assert receipt_count(exported) == before  # no submission receipt without its aggregate
    monkeypatch.undo()
    res = aggregate_ratings(exported.home, exported.receipt_id, [genuine]).receipt.result
    assert res.submissions_accepted == 1 and not res.rejections  # not refused as a "replay"
    assert receipt_count(exported) == before + 2  # the submission and the aggregate, together


def test_files_without_valid_rows_do_not_take_the_raters_slot(exported: Exported, tmp_path: Path) -> None:
    empty = resealed(doc_for(exported, "r01", session="1" * 32) | {"ratings": []})
    foreign_rows = resealed(doc_for(exported, "r02", session="2" * 32) | {"ratings": doc_for(exported, "r03")["ratings"]})
    genuine = doc_for(exported, "r01", session="3" * 32)
    files = [
        write_json(tmp_path / n, d) for n, d in (("empty.json", empty), ("foreign-rows.json", foreign_rows), ("genuine.json", genuine))
    ]
    res = aggregate_ratings(exported.home, exported.receipt_id, files).receipt.result
    why = {r.file: r.reason for r in res.rejections}
    assert why["empty.json"] == "no valid rating rows: 0 row(s) refused; nothing of this file can be used"
    assert why["foreign-rows.json"].startswith("no valid rating rows: ") and "is not rated in trial" in why["foreign-rows.json"]
    assert res.submissions_accepted == 1 and "genuine.json" not in why
    # r02's genuine file is still welcome in a later run: the refused file took nothing
    later = aggregate_ratings(
        exported.home, exported.receipt_id, [write_json(tmp_path / "r02.json", doc_for(exported, "r02", session="4" * 32))]
    )
    assert later.receipt.result.submissions_accepted == 1


# --- 2. one bad value refuses one file, with a message ------------------------------------------


def test_non_finite_and_huge_numbers_are_refused_per_file(exported: Exported, tmp_path: Path) -> None:
    def text_with(doc: dict[str, Any], old: str, new: str) -> bytes:
        raw = json.dumps(doc, indent=1)
        assert old in raw
        return raw.replace(old, new, 1).encode()

    nan = doc_for(exported, "r01", session="1" * 32)
    first = nan["ratings"][0]
    nan_text = text_with(nan, f'"score": {first["score"]}', '"score": NaN')
    inf_text = text_with(doc_for(exported, "r02", session="2" * 32), '"t_ms": 800', '"t_ms": 1e999')
    huge = doc_for(exported, "r03", session="3" * 32)
    huge["log"][-1]["t_ms"] = 2**60
    bom = b"\xef\xbb\xbf" + json.dumps(doc_for(exported, "r04", session="4" * 32), indent=1).encode()  # Windows editors add one
    paths = []
    for name, data in (("nan.json", nan_text), ("inf.json", inf_text), ("huge.json", json.dumps(huge).encode()), ("bom.json", bom)):
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    res = aggregate_ratings(exported.home, exported.receipt_id, paths).receipt.result
    why = {r.file: r.reason for r in res.rejections}
    assert why["nan.json"] == "not UTF-8 JSON (NaN is not a JSON number a submission can hold)"
    assert why["inf.json"].startswith("number out of range at $.log[0].t_ms (inf)")
    assert why["huge.json"].startswith(f"number out of range at $.log[{len(huge['log']) - 1}].t_ms ({2**60})")
    assert res.submissions_accepted == 1 and "bom.json" not in why  # the valid file of the run still counts


# --- 3. a hand-written log with 1 ms plays is not listening -------------------------------------


def test_fabricated_log_is_refused(exported: Exported, tmp_path: Path) -> None:
    fake = write_json(tmp_path / "fake.json", doc_for(exported, "r01", play_ms=1))
    with pytest.raises(
        PacketError,
        match=r"fake.json: implausible listening log: play_time: (\d+) of \1 plays ended sooner than the audio lasts \(shortest: 0.001 s",
    ):
        aggregate_ratings(exported.home, exported.receipt_id, [fake])


def test_log_check_is_recorded_and_can_flag_instead(exported: Exported, tmp_path: Path) -> None:
    packets = load_packets(exported.home.blobs, exported.receipt)
    data = json.dumps(doc_for(exported, "r01", play_ms=1)).encode()
    flagged = check_submission("fake.json", data, packets, home_secret(exported.home), SubmissionChecks(on_implausible="flag"))
    lc = flagged.log_check
    assert lc is not None and not lc.plausible and lc.plays_too_short == lc.plays_finished == lc.plays > 0
    assert lc.shortest_play_fraction is not None and lc.shortest_play_fraction < 0.001
    assert any(f.startswith("total_listening: ") for f in lc.flags)
    out = aggregate_ratings(exported.home, exported.receipt_id, [write_json(tmp_path / "ok.json", doc_for(exported, "r02"))])
    honest = exported.home.receipts.read(out.submission_receipts[0]).parameters.log_check  # type: ignore[attr-defined]
    assert honest.plausible and honest.flags == () and honest.plays_too_short == 0 and honest.shortest_play_fraction >= 1.0
    assert honest.listening_s >= honest.required_listening_s > 10


# --- 4. leaving the screening rows out is not a way around screening ----------------------------


def test_omitting_screening_rows_is_refused(exported: Exported, tmp_path: Path) -> None:
    doc = doc_for(exported, "r01")
    roles = {"gold", "attention", "hidden_reference"}
    doc["ratings"] = [r for r in doc["ratings"] if exported.key[r["stimulus"]].role not in roles]
    evasive = write_json(tmp_path / "evasive.json", resealed(doc))
    with pytest.raises(
        PacketError, match=r"evasive.json: missing screening items: \d+ absent or refused \((attention|gold|hidden_reference) t"
    ):
        aggregate_ratings(exported.home, exported.receipt_id, [evasive])


def test_mushra_rating_needs_the_reference_played(exported: Exported) -> None:
    doc = doc_for(exported, "r01")
    packets = load_packets(exported.home.blobs, exported.receipt)
    manifest = packets[doc["packet_sha256"]].manifest
    refs = {t.reference for t in manifest.trials if t.task == "mushra" and t.reference}
    assert refs
    doc["log"] = [e for e in doc["log"] if e["stimulus"] not in refs]  # every sample played, never the reference
    checked = check_submission("noref.json", json.dumps(resealed(doc)).encode(), packets, home_secret(exported.home))
    mushra = {t.id for t in manifest.trials if t.task == "mushra"}
    refused = [r for r in checked.rejected if r.trial in mushra]
    n_rows = sum(len(t.stimuli) for t in manifest.trials if t.task == "mushra")
    assert len(refused) == n_rows and all(
        r.reason.startswith("sample ") and r.reason.endswith("was not played to the end before the rating") for r in refused
    )
    assert {r.reason.split()[1] for r in refused} == refs  # the reference is the sample named
    assert not [r for r in checked.rejected if r.trial not in mushra]
