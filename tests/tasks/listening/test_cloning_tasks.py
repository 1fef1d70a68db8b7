"""What voice-cloning listening tests add (issue 61): BS.1534-3's mid anchor, SMOS, familiarisation, completion, headphones."""

from __future__ import annotations

import shutil
import wave
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.tasks.listening.conftest import Exported
from tests.tasks.listening.factory import make_stimuli, oracle_scorer, simulate_submission, write_json
from tests.tasks.listening.test_stats import row
from voxledger.schemas.errors import RequestRefusedError
from voxledger.schemas.listening import (
    AcrCriterion,
    Completion,
    Design,
    HeadphoneCheck,
    ListeningProtocol,
    PacketManifest,
    ScreeningRules,
    SmosCriterion,
)
from voxledger.stores.home import Home
from voxledger.stores.listening_sessions import EventRow
from voxledger.tasks.listening.headphones import huggins_trial
from voxledger.tasks.listening.keys import open_sealed_key, submission_mac
from voxledger.tasks.listening.screening import screen_rater
from voxledger.tasks.listening.served import EventIn, RaterState, check_event
from voxledger.tasks.listening.verify import load_packets
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
    design=Design(raters=6, raters_per_prompt=3, gold_items=1, attention_checks=0, seed=5, familiarisation_trials=3),
    headphone_check=HeadphoneCheck(method="huggins_pitch", trials=4, pass_min=3),
    completion=Completion(code="per_rater", redirect_url="https://app.prolific.com/submissions/complete?cc={code}"),
)


@pytest.fixture(scope="module")
def smos_export(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """One export of the SMOS protocol (ACR + SMOS, 6 raters, k = 3) over the factory's six prompts."""
    root = tmp_path_factory.mktemp("smos")
    home = Home(root / "home")
    out = export_packets(home, PROTOCOL, make_stimuli(home), root / "packets", protocol_name="cloning-test")
    key, _ = open_sealed_key(home, out.receipt.parameters.key_commitment_sha256)
    return Exported(home, out.receipt_id, out.receipt, root / "packets", {e.pseudonym: e for e in key.entries})


def fresh_home(ex: Exported, tmp_path: Path) -> Home:
    """A private copy of the module's home (an aggregation accepts each packet once)."""
    shutil.copytree(ex.packets.parent / "home", tmp_path / "home")
    return Home(tmp_path / "home")


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
    res = aggregate_ratings(fresh_home(smos_export, tmp_path), smos_export.receipt_id, files).receipt.result
    assert res.submissions_accepted == 6 and res.rejected_rows == 0 and all(s.included for s in res.screening)
    smos = {s.candidate: s for s in res.scores if s.task == "smos"}
    assert smos["recordings"].mean > smos["sys_b"].mean > smos["sys_a"].mean and all(s.raters == 6 for s in smos.values())
    gap = next(d for d in res.deltas if (d.criterion, d.a, d.b) == ("similarity", "sys_a", "sys_b"))
    assert gap.mean_delta > 0 and gap.raters == 6 and gap.prompts == 6  # paired within rater and prompt, as MOS deltas are


def test_familiarisation_is_marked_unscored_and_never_aggregated(smos_export: Exported, tmp_path: Path) -> None:
    ex = smos_export
    assert ex.receipt.parameters.familiarisation_trials == 3
    for p in ex.receipt.parameters.packets:
        m = _manifest(ex, p.rater_id)
        assert [t.id for t in m.familiarisation] == ["f01", "f02", "f03"] and p.trials == len(m.trials)
        assert [t.task for t in m.familiarisation] == ["acr", "smos", "acr"]  # task types take turns
        rated = {ex.key[s].prompt_id for t in m.trials for s in t.stimuli if ex.key[s].role == "stimulus"}
        practice = {ex.key[s].prompt_id for t in m.familiarisation for s in t.stimuli}
        assert practice and not practice & rated, f"{p.rater_id}: a practice clip's prompt is rated again among the scored trials"
    rows = [line.split(",") for line in (ex.packets / "trials.csv").read_text().splitlines()[1:]]
    assert rows and all(r[2].startswith("t") for r in rows)  # the trial column: scored trials only
    doc = simulate_submission(ex.packets / "r01", ex.key, oracle_scorer(), session="1" * 32)
    practice_trial = _manifest(ex, "r01").familiarisation[0]
    doc["ratings"].append({"trial": "f01", "stimulus": practice_trial.stimuli[0], "criterion": "naturalness", "score": 3, "t_ms": 1})
    res = aggregate_ratings(fresh_home(ex, tmp_path), ex.receipt_id, [write_json(tmp_path / "r01.json", resign(doc))]).receipt.result
    assert res.rejected_rows == 1 and res.attrition.missing_raters == ("r02", "r03", "r04", "r05", "r06")
    assert not [c for c in res.attrition.cells if c.trial.startswith("f")]  # practice is never due


def resign(doc: dict) -> dict:  # type: ignore[type-arg]
    """The document re-sealed as the page would seal it (a rater's own edit, not a forgery)."""
    doc.pop("mac", None)
    return {**doc, "mac": submission_mac(doc, doc["token"])}


def test_huggins_pitch_differs_only_in_interaural_phase() -> None:
    check = HeadphoneCheck(method="huggins_pitch")
    audio = huggins_trial(check, 16000, seed=3, answer=2)
    burst, gap = 16000, 8000
    spans = [audio[i * (burst + gap) : i * (burst + gap) + burst] for i in range(3)]
    assert audio.shape == (3 * burst + 2 * gap, 2)
    for i, x in enumerate(spans, 1):
        left, right = (np.abs(np.fft.rfft(x[:, c])).reshape(-1)[:8000].reshape(40, 200) ** 2 for c in (0, 1))
        np.testing.assert_allclose(left.sum(axis=1), right.sum(axis=1), rtol=0.02)  # each ear the same spectrum (200 Hz bands)
        diff = np.fft.rfft(x[:, 0] - x[:, 1])
        freqs = np.fft.rfftfreq(burst, 1 / 16000)
        in_band = np.abs(freqs - 600) <= 36
        if i == 2:  # the target: the ears differ only inside 600 Hz +- 6%
            assert np.sum(np.abs(diff[in_band]) ** 2) > 0.99 * np.sum(np.abs(diff) ** 2) > 0
        else:
            assert np.max(np.abs(x[:, 0] - x[:, 1])) < 1e-12  # diotic: no tone anywhere


def test_headphone_trials_and_completion_codes_are_per_rater(smos_export: Exported) -> None:
    ex = smos_export
    codes = dict(line.split(",") for line in (ex.packets / "completion-codes.csv").read_text().splitlines()[1:])
    assert ex.receipt.subject("completion_codes") is not None and ex.receipt.parameters.completion_code == "per_rater"
    answers = []
    for p in ex.receipt.parameters.packets:
        m = _manifest(ex, p.rater_id)
        assert m.completion is not None and m.completion.code == codes[p.rater_id]
        assert m.completion.redirect_url == f"https://app.prolific.com/submissions/complete?cc={codes[p.rater_id]}"
        assert m.headphone_check is not None and len(m.headphone_check.trials) == 4
        files = {a.id: a.file for a in m.audio}
        with wave.open(str(ex.packets / p.rater_id / files[m.headphone_check.trials[0].audio])) as w:
            assert (w.getnchannels(), w.getframerate()) == (2, 16000)
        answers += [t.answer for t in m.headphone_check.trials]
    assert len(set(codes.values())) == 6 and set(answers) == {1, 2, 3}
    with pytest.raises(ValueError, match="fixed_code exactly when code is 'fixed'"):
        Completion(code="fixed")
    with pytest.raises(ValueError, match="redirect_url"):
        Completion(redirect_url="javascript:alert(1)")


def test_the_docs_protocol_with_every_addition_validates() -> None:
    text = (Path(__file__).resolve().parents[3] / "docs" / "listening.md").read_text()
    block = text.split("## What voice-cloning tests add")[1].split("```yaml\n")[1].split("```")[0]
    protocol = ListeningProtocol.model_validate(yaml.safe_load(block))
    assert [c.task for c in protocol.criteria] == ["acr", "mushra", "smos"] and protocol.design.familiarisation_trials == 3
    assert protocol.headphone_check.method == "huggins_pitch" and protocol.completion.code == "per_rater"


def test_the_server_records_what_the_page_sends_about_headphones_and_practice(smos_export: Exported) -> None:
    packet = next(iter(load_packets(smos_export.home.blobs, smos_export.receipt).values()))
    state = RaterState(packet, [t.id for t in packet.manifest.trials])
    details = [None, "headphones huggins_pitch try 1: 4/4 passed", "familiarisation: 3 practice items done"]
    for seq, detail in enumerate(details):
        ev = EventIn(page="0" * 32, seq=seq, event="start", detail=detail)
        assert check_event(state, ev) is None
        state.apply(EventRow(seq, 100 * seq, "start", None, None, detail))
    with pytest.raises(RequestRefusedError, match="unknown trial 'f01'"):  # the page never posts a practice item
        check_event(state, EventIn(page="0" * 32, seq=3, event="present", trial="f01"))
    first = packet.manifest.trials[0].id
    assert check_event(state, EventIn(page="0" * 32, seq=3, event="present", trial=first)) is None  # item 1 follows
