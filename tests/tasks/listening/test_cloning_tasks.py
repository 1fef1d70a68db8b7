"""What voice-cloning listening tests add (issue 61): BS.1534-3's mid anchor, SMOS, familiarisation, completion, headphones."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.tasks.listening.conftest import Exported
from tests.tasks.listening.factory import make_stimuli, oracle_scorer, simulate_submission, write_json
from tests.tasks.listening.test_stats import row
from voxledger.schemas.listening import AcrCriterion, Design, ListeningProtocol, PacketManifest, ScreeningRules, SmosCriterion
from voxledger.stores.home import Home
from voxledger.tasks.listening.keys import open_sealed_key
from voxledger.tasks.listening.screening import screen_rater
from voxledger.tasks.stages.packets import export_packets
from voxledger.tasks.stages.ratings import aggregate_ratings


def test_mid_anchor_rule_is_bs1534s_and_stands_beside_the_low_anchor_rule() -> None:
    rows = [row("r1", f"p{i}", "mid", 95 if i < 2 else 60, task="mushra", role="mid_anchor") for i in range(6)]
    rows += [row("r1", f"p{i}", "low", 20, task="mushra", role="low_anchor") for i in range(6)]
    verdict = screen_rater("r1", rows, {}, ScreeningRules(), None)  # 2 of 6 screens = 33% above 90: more than 15%
    assert not verdict.included and verdict.reasons == ("mushra_mid_anchor: mid anchor above 90 on 33% of screens (allowed 15%)",)
    assert verdict.mushra_mid_anchor_high_fraction == round(2 / 6, 6) and verdict.mushra_anchor_high_fraction == 0.0
    assert screen_rater("r1", rows, {}, ScreeningRules(mushra_anchor_max_fraction=0.4), None).included


PROTOCOL = ListeningProtocol(
    name="cloning-test",
    criteria=(
        AcrCriterion(task="acr", name="naturalness", question="How natural does this voice sound?"),
        SmosCriterion(task="smos", name="similarity", question="How similar is this voice to the reference voice?"),
    ),
    design=Design(raters=6, raters_per_prompt=3, gold_items=1, attention_checks=0, seed=5),
)


@pytest.fixture(scope="module")
def smos_export(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """One export of the SMOS protocol (ACR + SMOS, 6 raters, k = 3) over the factory's six prompts."""
    root = tmp_path_factory.mktemp("smos")
    home = Home(root / "home")
    out = export_packets(home, PROTOCOL, make_stimuli(home), root / "packets", protocol_name="cloning-test")
    key, _ = open_sealed_key(home, out.receipt.parameters.key_commitment_sha256)
    return Exported(home, out.receipt_id, out.receipt, root / "packets", {e.pseudonym: e for e in key.entries})


def _manifest(ex: Exported, rater: str) -> PacketManifest:
    return PacketManifest.model_validate_json((ex.packets / rater / "packet.json").read_bytes())


def test_smos_trials_are_balanced_and_hear_each_prompt_in_one_task(smos_export: Exported) -> None:
    ex, counts = smos_export, Counter[tuple[str, int]]()
    for rater in (p.rater_id for p in ex.receipt.parameters.packets):
        tasks_of_prompt: dict[str, set[str]] = {}
        for t in _manifest(ex, rater).trials:
            for s in t.stimuli:
                e = ex.key[s]
                if e.role == "stimulus":
                    tasks_of_prompt.setdefault(e.prompt_id, set()).add(t.task)
            if t.task == "smos":
                stim, ref = ex.key[t.stimuli[0]], ex.key[t.reference or ""]
                assert ref.role == "open_reference" and ref.candidate == "recordings" and ref.prompt_id != stim.prompt_id
                assert ref.prompt_id not in tasks_of_prompt or tasks_of_prompt[ref.prompt_id] == set()  # never a clip the rater rates
                counts[(stim.candidate, 0)] += 1
        assert all(len(tasks) == 1 for tasks in tasks_of_prompt.values()), tasks_of_prompt
        refs = {ex.key[t.reference or ""].prompt_id for t in _manifest(ex, rater).trials if t.task == "smos"}
        assert not refs & set(tasks_of_prompt), f"{rater}: a SMOS reference is also rated"
    assert len({n for (_, _), n in counts.items()}) == 1 and len(counts) == 3  # every candidate as often in SMOS
    smos_positions = [p for p in ex.receipt.parameters.balance.positions if p.task == "smos"]
    assert {p.candidate for p in smos_positions} == {"recordings", "sys_a", "sys_b"}
    assert max(max(p.counts) - min(p.counts) for p in smos_positions) <= 1
    assert ex.receipt.parameters.leak_check is not None and ex.receipt.parameters.leak_check.passed


def test_smos_aggregates_like_the_other_absolute_ratings(smos_export: Exported, tmp_path: Path) -> None:
    files = []
    for i, p in enumerate(smos_export.receipt.parameters.packets):
        doc = simulate_submission(
            smos_export.packets / p.rater_id, smos_export.key, oracle_scorer((i % 3 - 1) * 0.4), session=f"{i + 1:032x}"
        )
        files.append(write_json(tmp_path / f"{p.rater_id}.json", doc))
    res = aggregate_ratings(smos_export.home, smos_export.receipt_id, files).receipt.result
    assert res.submissions_accepted == 6 and res.rejected_rows == 0 and all(s.included for s in res.screening)
    smos = {s.candidate: s for s in res.scores if s.task == "smos"}
    assert smos["recordings"].mean > smos["sys_b"].mean > smos["sys_a"].mean and all(s.raters == 6 for s in smos.values())
    gap = next(d for d in res.deltas if (d.criterion, d.a, d.b) == ("similarity", "sys_a", "sys_b"))
    assert gap.mean_delta > 0 and gap.raters == 6 and gap.prompts == 6  # paired within rater and prompt, as MOS deltas are
