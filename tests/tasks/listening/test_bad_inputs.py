"""Refusals, each with its reason: foreign, forged, edited, out of scale, unplayed, replayed, broken packets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.tasks.listening.conftest import Exported
from tests.tasks.listening.factory import oracle_scorer, simulate_submission, write_json
from voxledger.cli import main
from voxledger.schemas.errors import PacketError
from voxledger.schemas.listening import ListeningProtocol
from voxledger.tasks.listening.keys import keyed_hex, submission_mac
from voxledger.tasks.listening.verify import verify_packet_dir
from voxledger.tasks.stages.packets import export_packets
from voxledger.tasks.stages.ratings import aggregate_ratings


def doc_for(ex: Exported, rater: str, session: str = "c" * 32) -> dict[str, Any]:
    return simulate_submission(ex.packets / rater, ex.key, oracle_scorer(), session=session)


def resealed(doc: dict[str, Any]) -> dict[str, Any]:
    """A forger who read the token out of the page recomputes the MAC after editing."""
    doc["mac"] = submission_mac(doc, doc["token"])
    return doc


def refusals(ex: Exported, tmp: Path, docs: dict[str, dict[str, Any] | bytes]) -> dict[str, str]:
    paths = []
    for name, d in docs.items():
        p = tmp / name
        p.write_bytes(d) if isinstance(d, bytes) else write_json(p, d)
        paths.append(p)
    good = write_json(tmp / "good.json", doc_for(ex, "r06", session="f" * 32))
    res = aggregate_ratings(ex.home, ex.receipt_id, [good, *paths]).receipt.result
    return {r.file: r.reason for r in res.rejections}


def test_whole_submissions_refused_with_reasons(exported: Exported, protocol: ListeningProtocol, tmp_path: Path) -> None:
    other = export_packets(exported.home, protocol.model_copy(update={"design": protocol.design.model_copy(update={"seed": 99})}),
                           _stimuli(exported), tmp_path / "other", protocol_name="listening-demo-99.yaml")  # fmt: skip
    foreign = simulate_submission(other.packet_dirs["r01"], _key(exported, other.receipt.parameters.key_commitment_sha256), oracle_scorer())
    forged = doc_for(exported, "r01")
    forged["token"] = keyed_hex(b"not the home's secret", "rater-token", forged["packet_sha256"])
    edited = doc_for(exported, "r02", session="d" * 32)
    edited["ratings"][0]["score"] = 9
    wrong_rater = resealed(doc_for(exported, "r03", session="e" * 32) | {"rater_id": "r04"})
    why = refusals(exported, tmp_path, {"foreign.json": foreign, "forged.json": resealed(forged), "edited.json": edited,
                                        "wrong-rater.json": wrong_rater, "junk.json": b"\xff\xfe not json"})  # fmt: skip
    assert why["foreign.json"].startswith("foreign: packet ") and "not part of this packet set" in why["foreign.json"]
    assert why["forged.json"].startswith("forged: the token does not match packet")
    assert why["edited.json"] == "edited after export: the MAC over the submission does not match its content"
    assert why["wrong-rater.json"] == "rater_id 'r04' does not match the packet's rater 'r03'"
    assert why["junk.json"].startswith("not UTF-8 JSON")


def _stimuli(ex: Exported):  # type: ignore[no-untyped-def]
    from voxledger.schemas.listening import StimulusSet

    return StimulusSet.model_validate_json(ex.home.blobs.get_bytes(ex.receipt.parameters.stimuli_sha256))


def _key(ex: Exported, commitment: str):  # type: ignore[no-untyped-def]
    from voxledger.tasks.listening.keys import open_sealed_key

    return {e.pseudonym: e for e in open_sealed_key(ex.home, commitment)[0].entries}


def test_bad_rows_refused_one_by_one(exported: Exported, tmp_path: Path) -> None:
    doc = doc_for(exported, "r01")
    rows = [r for r in doc["ratings"] if exported.key[r["stimulus"]].role == "stimulus"]  # screening rows stay intact
    rows[0]["score"] = 7  # off the 1-5 scale
    rows[1]["score"] = 1 if rows[1]["score"] != 1 else 2  # on the scale but not what the log recorded
    doc["ratings"].append(dict(rows[2]))  # a duplicate
    doc["ratings"].append(rows[3] | {"stimulus": "s" + "0" * 16})  # not in this trial
    unplayed = rows[4]["stimulus"]
    doc["log"] = [e for e in doc["log"] if not (e["event"] == "ended" and e["stimulus"] == unplayed)]
    out = aggregate_ratings(exported.home, exported.receipt_id, [write_json(tmp_path / "s.json", resealed(doc))])
    res = out.receipt.result
    assert res.submissions_accepted == 1 and res.rejected_rows == 5
    sub = exported.home.receipts.read(out.submission_receipts[0])
    reasons = sorted((r.reason for r in sub.parameters.rejected_rows), key=lambda r: not r.startswith("score 7"))  # type: ignore[attr-defined]
    assert reasons[0] == "score 7 is outside the scale [1, 5] step 1"
    assert reasons[1].startswith("score ") and "differs from the last rating the log recorded" in reasons[1]
    assert f"sample {unplayed} was not played to the end before the rating" in reasons
    assert "duplicate rating of the same trial, stimulus and criterion" in reasons
    assert any(r.startswith("stimulus 's0000000000000000' is not rated in trial") for r in reasons)
    refused_cells = [c for c in res.attrition.cells if c.reason == "row refused"]
    assert len(refused_cells) == 3  # the duplicate and the foreign stimulus were extra rows, not due cells


def test_replays_and_duplicates(exported: Exported, tmp_path: Path) -> None:
    first = write_json(tmp_path / "first.json", doc_for(exported, "r01"))
    copy = tmp_path / "copy.json"
    copy.write_bytes(first.read_bytes())
    redo = write_json(tmp_path / "redo.json", doc_for(exported, "r01", session="b" * 32))
    reused_session = write_json(tmp_path / "reused.json", doc_for(exported, "r02"))  # same session id as first.json
    res = aggregate_ratings(exported.home, exported.receipt_id, [first, copy, redo, reused_session]).receipt.result
    why = {r.file: r.reason for r in res.rejections}
    assert res.submissions_accepted == 1
    assert why == {"copy.json": "duplicate: the same bytes as first.json",
                   "redo.json": "replay: packet of rater r01 already has an accepted submission (first.json)",
                   "reused.json": f"replay: session {'c' * 32} was already submitted for another packet (first.json, rater r01)"}  # fmt: skip
    # later, in another aggregation: the same file is fine (idempotent), a new one for that packet is a replay
    later = aggregate_ratings(exported.home, exported.receipt_id, [redo, first]).receipt.result
    assert later.submissions_accepted == 1 and later.rejections[0].reason.startswith(
        "replay: packet of rater r01 already has an accepted submission (an earlier aggregation"
    )


@pytest.mark.prefect
def test_nothing_accepted_is_an_error_naming_every_reason(exported: Exported, tmp_path: Path) -> None:
    edited = doc_for(exported, "r01")
    edited["ratings"][0]["score"] = 5 if edited["ratings"][0]["score"] != 5 else 4
    bad = write_json(tmp_path / "edited.json", edited)
    with pytest.raises(PacketError, match=r"no submission accepted \(1 refused\): edited.json: edited after export"):
        aggregate_ratings(exported.home, exported.receipt_id, [bad])
    res = CliRunner().invoke(main, ["--home", str(exported.home.root), "ratings", "aggregate", exported.receipt_id, str(bad)])
    assert res.exit_code != 0 and "PacketError: no submission accepted" in res.output
    plan_receipt = exported.receipt.input("protocol").sha256
    res = CliRunner().invoke(main, ["--home", str(exported.home.root), "ratings", "aggregate", plan_receipt, str(bad)])
    assert res.exit_code != 0 and "is a plan receipt, not packet_set" in res.output


def test_broken_packet_folder_is_refused(exported: Exported) -> None:
    folder = exported.packets / "r02"
    victim = min((folder / "audio").iterdir())
    victim.unlink()
    altered = min((folder / "audio").iterdir())
    altered.write_bytes(altered.read_bytes()[:-2] + b"\x00\x01")
    with pytest.raises(PacketError) as exc:
        verify_packet_dir(folder)
    assert f"missing audio/{victim.name}" in str(exc.value) and f"altered audio/{altered.name}" in str(exc.value)
    res = CliRunner().invoke(main, ["packets", "verify", str(folder)])
    assert res.exit_code != 0 and "is not intact" in res.output
    (folder / "index.html").unlink()
    with pytest.raises(PacketError, match="lacks index.html; export the packet again"):
        verify_packet_dir(folder)
    json.loads((folder / "packet.json").read_text())  # the manifest itself is untouched
