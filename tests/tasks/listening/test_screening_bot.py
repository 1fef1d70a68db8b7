"""Screening against scripts: a rater that answers from the signal only is excluded, honest raters are kept.

The bot (``bot.py``) knows our code but not the key: it matches every ACR clip against espeak
renders of every instruction the generator can say and rates the rest by a spectral quality
proxy. The export here uses a fixed home secret and packet-set id, so the instructions, and the
bot's answers, are the same in every run.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from tests.tasks.listening.bot import SignalBot, match_instruction
from tests.tasks.listening.conftest import DEMO_PLAN
from tests.tasks.listening.factory import make_stimuli, oracle_scorer, simulate_submission, write_json
from voxledger.schemas.listening import ACR_SCALE, KeyEntry, ListeningProtocol, PacketManifest
from voxledger.stores.home import Home
from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize
from voxledger.tasks.listening.instructions import draw_instruction, keyed_rng, scramble
from voxledger.tasks.listening.keys import SECRET_NAME, open_sealed_key, sealed_dir
from voxledger.tasks.listening.leakcheck import max_correlation
from voxledger.tasks.plans import load_plan
from voxledger.tasks.stages import packets
from voxledger.tasks.stages.ratings import aggregate_ratings

BOTS, HONEST = ("r01", "r02", "r03"), ("r04", "r05", "r06")


@pytest.fixture(scope="module")
def bot_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, str, dict[str, Path], dict[str, KeyEntry]]:
    """The demo protocol with three attention checks per rater, exported with a fixed secret and set id."""
    demo = load_plan(DEMO_PLAN, ListeningProtocol)
    protocol = demo.model_copy(update={"design": demo.design.model_copy(update={"attention_checks": 3})})
    root = tmp_path_factory.mktemp("bot")
    home = Home(root / "home")
    (sealed_dir(home) / SECRET_NAME).write_bytes(bytes(range(32)))
    with pytest.MonkeyPatch.context() as mp:
        calls = itertools.count(1)  # the set id (and temp names, nonce) from a counter: the same in every run
        mp.setattr(packets.secrets, "token_hex", lambda n: f"{next(calls):0{2 * n}x}")
        out = packets.export_packets(home, protocol, make_stimuli(home), root / "packets", protocol_name="listening-bot.yaml")
    key, _ = open_sealed_key(home, out.receipt.parameters.key_commitment_sha256)
    return home, out.receipt_id, out.packet_dirs, {e.pseudonym: e for e in key.entries}


def test_signal_only_bot_is_excluded_and_honest_raters_are_kept(bot_export, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    home, rid, dirs, key = bot_export
    files, right, asked, scrambled_low, compared_right = [], 0, 0, 0, 0
    for rater in BOTS:
        bot = SignalBot(dirs[rater])
        trials = PacketManifest.model_validate_json((dirs[rater] / "packet.json").read_bytes()).trials
        for t in (t for t in trials if t.task == "ab" and key[t.stimuli[1]].role == "gold"):  # the comparison gold item
            b = key[t.stimuli[1]]
            compared_right += abs(bot.score(b, t.criteria[0], t, key[t.stimuli[0]]) - (b.expected or 0)) <= 1
        mine = [e for e in key.values() if e.rater_id == rater]
        right += sum(bot.answers[(e.pseudonym, "acr")] == e.expected for e in mine if e.role == "attention")
        asked += sum(e.role == "attention" for e in mine)
        scrambled_low += sum(
            bot.answers[(e.pseudonym, "acr")] <= 2 for e in mine if e.candidate == "gold_degraded" and (e.pseudonym, "acr") in bot.answers
        )
        files.append(write_json(tmp_path / f"{rater}.json", simulate_submission(dirs[rater], key, bot.score, session=f"{rater[1:]:0>32}")))
    for i, rater in enumerate(HONEST):
        doc = simulate_submission(dirs[rater], key, oracle_scorer(0.4 * (i - 1)), session=f"{rater[1:]:0>32}")
        files.append(write_json(tmp_path / f"{rater}.json", doc))
    screening = {s.rater_id: s for s in aggregate_ratings(home, rid, files).receipt.result.screening}
    assert [screening[r].included for r in (*BOTS, *HONEST)] == [False, False, False, True, True, True], screening
    # every bot fails attention checks (on the old fixed sentence the same bot answered every one) and the
    # scrambled gold item: it sounds like nonsense but measures like a clean recording, so no bot rates it <= 2
    assert all(screening[r].attention_failures >= 1 and screening[r].gold_failures >= 1 for r in BOTS), {
        r: screening[r].reasons for r in BOTS
    }
    # measured with this fixed secret: 1 of 9 attention checks right (chance: 1 in 5)
    assert asked == 9 and right <= 2 and scrambled_low == 0, (right, scrambled_low)
    # the reference against its scrambled copy: the proxy cannot order them (0 of 30 right over five random sets)
    assert compared_right == 0, compared_right


def test_bot_answers_the_old_fixed_sentence() -> None:
    """The bot is no straw man: it reads the old attention sentence (one text, one voice) every time."""
    for v in (1, 3, 5):
        audio = resample_synthesis(synthesize(f"Attention check: select {v}."), 16000).audio
        noisy = audio + np.random.default_rng(v).normal(0, 10 ** (-66 / 20), audio.size)
        ratio, answer = match_instruction(noisy, ACR_SCALE)
        assert answer == v and ratio < 0.2, (v, answer, ratio)


WORDS = {"Bad": 1, "Poor": 2, "Fair": 3, "Good": 4, "Excellent": 5}


def _meaning(text: str) -> int:
    """What a listener who understood the sentence answers (the generator's forms, read literally)."""
    core = re.search(r"For this item, (.*?)\.", text).group(1)  # type: ignore[union-attr]
    nums = [int(n) for n in re.findall(r"-?\d+", core)]
    if m := re.fullmatch(r"not \d+, but (\d+), is the answer", core):
        return int(m.group(1))
    if core.startswith("choose the option labelled"):
        return WORDS[core.split()[-1]]
    if "one more than" in core:
        return nums[0] + 1
    if "one less than" in core:
        return nums[0] - 1
    if " plus " in core:
        return nums[0] + nums[1]
    if "between" in core:
        return (nums[0] + nums[1]) // 2
    return nums[0]  # "select v", "choose v, not d"


def test_instructions_say_their_answer_and_differ_per_item() -> None:
    secret = bytes(32)
    items = [draw_instruction(keyed_rng(secret, "set", f"r{r:02d}", str(n)), ACR_SCALE) for r in range(1, 41) for n in (1, 2, 3)]
    assert all(_meaning(i.text) == i.answer for i in items), [(i.text, i.answer) for i in items if _meaning(i.text) != i.answer][:3]
    assert len({i.text for i in items}) >= 90 and len({p[1] for i in items for p in i.pieces}) == 6  # 120 items: wordings and voices vary
    counts = np.bincount([i.answer for i in items], minlength=6)[1:]
    assert counts.min() >= 12, counts  # every answer on the scale is asked for (120 draws, 24 expected each)
    assert draw_instruction(keyed_rng(secret, "set", "r01", "1"), ACR_SCALE) == items[0]
    assert draw_instruction(keyed_rng(bytes([1]) * 32, "set", "r01", "1"), ACR_SCALE) != items[0]  # another home's secret


def test_scrambled_gold_keeps_the_recordings_spectrum_not_its_words() -> None:
    rate = 16000
    audio = resample_synthesis(synthesize("The birch canoe slid on the smooth planks."), rate).audio.astype(np.float64)
    bad = scramble(audio, rate, 7)

    def spectrum(x: np.ndarray) -> np.ndarray:
        return np.log(np.abs(np.fft.rfft(x, 1 << 16)[:-1]) ** 2 + 1e-9).reshape(-1, 256).mean(axis=1)  # 128 bands

    assert abs(bad.size - audio.size) / audio.size < 0.1
    assert abs(np.std(bad) - np.std(audio)) / np.std(audio) < 0.05
    assert np.corrcoef(spectrum(bad), spectrum(audio))[0, 1] > 0.99  # the same long-term spectrum
    assert max_correlation(bad, audio) < 0.5  # but not the same waveform: the words are gone
