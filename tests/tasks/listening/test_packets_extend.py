"""``voxledger packets export`` then ``packets extend`` through the CLI (Prefect flows) on the pipeline's listening plan (SMOS included)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.tasks.listening.factory import PROMPTS, make_stimuli, oracle_scorer, simulate_submission, write_json
from voxledger.cli import main
from voxledger.schemas.listening import PacketManifest
from voxledger.stores.home import Home
from voxledger.stores.trees import build_manifest
from voxledger.tasks.listening.keys import open_sealed_key
from voxledger.tasks.stages.ratings import aggregate_ratings, load_packet_set

PLAN = Path(__file__).resolve().parents[3] / "plans" / "listening-pipeline.yaml"


@pytest.mark.prefect
def test_extend_adds_balanced_raters_and_leaves_every_packet_byte_alone(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    prompts = {pid: ("short" if i % 2 else "long", text) for i, (pid, (_, text)) in enumerate(PROMPTS.items())}
    stimuli = tmp_path / "stimuli.json"
    stimuli.write_text(make_stimuli(home, prompts=prompts).model_dump_json())
    runner, base = CliRunner(), ["--home", str(home.root)]
    res = runner.invoke(
        main, [*base, "packets", "export", "--plan", str(PLAN), "--stimuli", str(stimuli), str(tmp_path / "packets"), "--json"]
    )
    assert res.exit_code == 0, res.output
    exported = json.loads(res.output)
    parent = exported["receipt"]
    assert (exported["familiarisation_trials"], exported["headphone_check"], exported["completion_codes"]) == (0, "none", None)
    before = {d.name: build_manifest(d).model_dump() for d in sorted((tmp_path / "packets").iterdir()) if d.is_dir()}

    cmd = [*base, "packets", "extend", parent[:12], "--raters", "2", "--out", str(tmp_path / "more"), "--json"]
    res = runner.invoke(main, cmd)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert sorted(out["added"]) == ["r07", "r08"] and out["raters_per_prompt_added"] == 1 and out["leak_check"]["passed"]
    after = {d.name: build_manifest(d).model_dump() for d in sorted((tmp_path / "packets").iterdir()) if d.is_dir()}
    assert after == before  # the exported folders are untouched
    old, new = load_packet_set(home, parent), load_packet_set(home, out["receipt"])
    assert new.parameters.packets[:6] == old.parameters.packets  # the same packet and tree digests: the same bytes
    assert new.parameters.packet_set_id == old.parameters.packet_set_id and new.parameters.extension is not None
    assert (new.parameters.balance.raters_per_prompt_min, new.parameters.balance.raters_per_prompt_max) == (4, 4)
    # the new raters' rotations go on from the parent's: positions stay within one over old and new (restarted: 2 here)
    assert old.parameters.balance.position_spread_max <= 1 and new.parameters.balance.position_spread_max <= 1

    key = {e.pseudonym: e for e in open_sealed_key(home, new.parameters.key_commitment_sha256)[0].entries}
    added = Counter()
    for rater in ("r07", "r08"):
        manifest = PacketManifest.model_validate_json((tmp_path / "more" / rater / "packet.json").read_bytes())
        rated = {key[s].prompt_id: t.task for t in manifest.trials for s in t.stimuli if key[s].role == "stimulus"}
        added.update(rated.keys())
        by_candidate = Counter(key[t.stimuli[0]].candidate for t in manifest.trials if t.task == "smos")
        assert len(set(by_candidate.values())) <= 1  # every candidate of a SMOS prompt, as often
    assert added == Counter(dict.fromkeys(PROMPTS, 1))  # every prompt heard by exactly one added rater
    assert any(t.task == "smos" for r in ("r01", "r07", "r08") for t in _trials(tmp_path, r))

    files = []
    for i, p in enumerate(new.parameters.packets):
        folder = (tmp_path / "packets" if i < 6 else tmp_path / "more") / p.rater_id
        files.append(
            write_json(tmp_path / f"{p.rater_id}.json", simulate_submission(folder, key, oracle_scorer(), session=f"{i + 1:032x}"))
        )
    result = aggregate_ratings(home, out["receipt"], files).receipt.result
    assert result.submissions_accepted == 8 and result.rejected_rows == 0 and not result.attrition.missing_raters
    assert {s.candidate for s in result.scores if s.task == "smos"} == {"recordings", "sys_a", "sys_b"}

    again = runner.invoke(main, [*cmd[:-3], "--out", str(tmp_path / "more-again"), "--json"])
    assert again.exit_code == 0 and json.loads(again.output)["cached"] is True, again.output
    assert build_manifest(tmp_path / "more-again" / "r07") == build_manifest(tmp_path / "more" / "r07")
    bad = runner.invoke(main, [*base, "packets", "extend", parent[:12], "--raters", "2", "--out", str(tmp_path / "more")])
    assert bad.exit_code != 0 and "is not empty" in bad.output and "Traceback" not in bad.output


def _trials(tmp_path: Path, rater: str) -> tuple:  # type: ignore[type-arg]
    folder = tmp_path / ("more" if rater in ("r07", "r08") else "packets") / rater
    return PacketManifest.model_validate_json((folder / "packet.json").read_bytes()).trials
