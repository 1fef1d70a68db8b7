"""Conclusions that survive a scripted rater: bot scores, the robust aggregate, per-rater influence and flags.

The simulated packet set (``robust_sim.wide_export``): the demo protocol, eight raters each hearing
all ten test sentences. Honest raters are noisy listeners (``honest.noisy_scorer``); the scripted
rater is ``bot.py``'s signal-only bot on every candidate item, with the screening items answered
right (``honest.screened_bot``): the worst case, a script that passed screening.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import mstats

from tests.tasks.listening.bot import SignalBot
from tests.tasks.listening.honest import CandidateBot
from tests.tasks.listening.robust_sim import Wide, aggregate, wide_export, without
from voxledger.schemas.listening_robustness import RaterBotScore
from voxledger.tasks.listening import predictors, robustness
from voxledger.tasks.listening.report import summary_lines


def test_yuen_is_wilcox_trimci() -> None:
    """The robust delta's interval is the 20% trimmed mean's (scipy's trimmed_mean_ci gives the same numbers)."""
    x = [0.5, 1.2, 0.9, 1.4, 3.0, -2.0, 1.1, 0.8, 0.2, 1.9]
    est, low, high, p, g = robustness.yuen(x, 0.95)
    assert g == 2 and est == pytest.approx(np.mean(sorted(x)[2:-2]))
    assert (low, high) == pytest.approx(tuple(mstats.trimmed_mean_ci(np.array(x), limits=(0.2, 0.2), alpha=0.05)))
    assert p is not None and 0 < p < 0.05
    assert robustness.yuen([1.0] * 6, 0.95)[1:4] == (None, None, None)  # no spread: nothing to test
    # one wild rater among six moves the trimmed mean far less than the mean
    honest = [1.0, 1.2, 0.8, 1.1, 0.9]
    assert abs(robustness.yuen([*honest, -9.0], 0.95)[0] - 1.0) < 0.2 < abs(np.mean([*honest, -9.0]) - 1.0)


def _synthetic(rng: np.random.Generator, follows_signal: bool) -> list[robustness.Contrast]:
    """30 ratings of one criterion over 3 candidates x 10 prompts: quality plus noise, or a signal statistic."""
    out = []
    for i in range(30):
        cand, prompt = f"c{i % 3}", f"p{i // 3}"
        signal = {"flatness": float(rng.normal()), "level": float(rng.normal())}
        y = (i % 3) * 0.2 + (0.15 * signal["flatness"] if follows_signal else float(rng.normal(0, 0.15)))
        out.append((("naturalness", "acr", cand, prompt), y, signal))
    return out


def test_bot_score_flags_answers_that_follow_a_signal_beyond_the_other_raters() -> None:
    rng = np.random.default_rng(3)
    signal = {f"s{i}": {"flatness": float(rng.normal()), "level": float(rng.normal())} for i in range(30)}
    raters = {}
    for name, scripted in (("bot", True), *((f"h{i}", False) for i in range(5))):
        items = _synthetic(rng, scripted)
        raters[name] = [(unit, y, signal[f"s{i}"]) for i, (unit, y, _) in enumerate(items)]  # every rater hears the same files
        if scripted:  # the script's answers follow the files' flatness
            raters[name] = [(unit, (i % 3) * 0.2 + 0.15 * signal[f"s{i}"]["flatness"], x) for i, (unit, _, x) in enumerate(raters[name])]
    agreed = robustness.consensus(raters, set(raters))
    raw = [robustness.bot_score(r, items, agreed[r], included=True, permutations=999) for r, items in raters.items()]
    scores = {s.rater_id: s for s in robustness.flag(raw)}
    assert scores["bot"].flagged and scores["bot"].best_predictor == "flatness" and scores["bot"].p_value == pytest.approx(1 / 1000)
    assert scores["bot"].p_adjusted == pytest.approx(6 / 1000)  # Holm over the six raters: the smallest p times 6
    assert not any(scores[f"h{i}"].flagged for i in range(5)), scores
    again = robustness.bot_score("bot", raters["bot"], agreed["bot"], included=True, permutations=999)
    assert again == raw[0]  # its own seeded generator: the same answer every time
    assert robustness.suspects(list(scores.values()))[0] == "bot"


def test_flags_hold_the_family_wise_level_over_the_raters_of_a_set() -> None:
    """Holm over every scored rater: a p that would pass alone does not pass among many raters."""

    def score(rater: str, p: float | None, r: float = 0.8) -> RaterBotScore:
        return RaterBotScore(rater_id=rater, included=True, ratings=24, best_predictor="x", max_abs_r=r, p_value=p, flagged=False)

    eight = robustness.flag([score(f"r{i}", 0.002) for i in range(8)])  # each alone would pass 0.01; 8 x 0.002 does not
    assert [s.p_adjusted for s in eight] == [0.016] * 8 and not any(s.flagged for s in eight)
    mixed = robustness.flag([score("a", 0.0005), score("b", 0.0005, r=0.5), score("c", 0.3), score("d", None)])
    assert [(s.p_adjusted, s.flagged) for s in mixed] == [(0.0015, True), (0.0015, False), (0.3, False), (None, False)]
    assert robustness.suspects(mixed) == ("a", "b", "c")  # lowest p first, then highest |r|; unscored raters are not ranked


def test_evaluation_metrics_join_the_predictors_only_where_every_file_has_them() -> None:
    features = {"x1": {"rms_dbfs": -26.0}, "x2": {"rms_dbfs": -27.0}}
    sources = {"x1": ("adapter", "p01"), "x2": ("base", "p01")}
    observed = {("adapter", "p01"): {"wer": 0.1, "dnsmos_ovrl": 3.1}, ("base", "p01"): {"wer": 0.4}}
    predictors.add_evaluation(features, sources, observed)
    assert features == {"x1": {"rms_dbfs": -26.0, "evaluation_wer": 0.1}, "x2": {"rms_dbfs": -27.0, "evaluation_wer": 0.4}}
    alone = {"x1": {"rms_dbfs": -26.0}, "x3": {"rms_dbfs": -20.0}}  # x3's clip has no evaluation: no metric is added
    predictors.add_evaluation(alone, {"x1": ("adapter", "p01"), "x3": ("gold_degraded", "p09")}, observed)
    assert alone == {"x1": {"rms_dbfs": -26.0}, "x3": {"rms_dbfs": -20.0}}


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Wide:
    return wide_export(tmp_path_factory.mktemp("wide"))


HONEST_SEEDS = 3  # python -m tests.tasks.listening.robust_sim 40 runs forty (docs/listening.md)


def test_honest_raters_are_never_flagged(wide: Wide, tmp_path: Path) -> None:
    for seed in range(HONEST_SEEDS):
        receipt, _, _ = aggregate(wide, tmp_path / f"s{seed}", seed, {})
        rb = receipt.result.robustness
        assert rb is not None and all(s.p_value is not None for s in rb.bot_scores), rb  # every rater was scored
        assert rb.flagged_raters == () and rb.flagged_verdicts == 0, (seed, rb.flagged_raters, [v for v in rb.verdicts if v.flagged])
        assert not [line for line in summary_lines(receipt.result) if "FLAGGED" in line]


@pytest.mark.prefect
def test_scripted_raters_are_excluded_or_the_verdicts_they_change_are_flagged(wide: Wide, tmp_path: Path) -> None:
    """Two scripts among eight raters (seed 0): every verdict that removing them changes is flagged, in the receipt, the
    CLI and the dashboard; no honest rater is flagged, and the scripts are among the suspects."""
    from click.testing import CliRunner

    from voxledger.cli import main
    from voxledger.dashboards.report import build_dashboard
    from voxledger.stores.home import Home

    bots = {r: CandidateBot(wide.packets[r]) for r in ("r01", "r02")}
    receipt, rows, home = aggregate(wide, tmp_path, 0, bots)
    res, rb = receipt.result, receipt.result.robustness
    assert rb is not None
    included = {s.rater_id for s in res.screening if s.included}
    clean = without(rows, set(bots), wide.protocol)
    changed = [v for v in rb.verdicts if clean.get((v.criterion, v.task, v.a, v.b)) != v.better]
    assert set(bots) <= included and len(changed) == 5, changed  # the scripts passed screening and changed every verdict
    assert all(v.flagged and v.reasons for v in changed), [v for v in changed if not v.flagged]
    assert set(rb.flagged_raters) <= set(bots) and set(bots) <= set(rb.suspects), (rb.suspects, rb.bot_scores)  # no honest rater
    assert rb.bot_adjustment == "holm" and rb.bot_p_max == robustness.BOT_ALPHA
    lines = summary_lines(res)
    flagged_lines = [line for line in lines if " FLAGGED: " in line]
    assert len(flagged_lines) == rb.flagged_verdicts == len(res.deltas) - sum(not v.flagged for v in rb.verdicts)
    out = CliRunner().invoke(main, ["--home", home, "ratings", "aggregate", receipt.parameters.packet_set_receipt_sha256[:12],
                                    *(str(tmp_path / f"{r}.json") for r in sorted(wide.packets))])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert (
        all(line in out.output for line in flagged_lines)
        and f"verdicts flagged as resting on suspicious raters: {rb.flagged_verdicts}" in out.output
    )
    page = build_dashboard(Home(Path(home)).catalog, tmp_path / "dash.html").read_text()
    assert "Verdicts of the newest aggregate" in page and page.count('<span class="bad">FLAGGED: ') == rb.flagged_verdicts


def test_a_script_reading_the_checks_is_excluded_or_every_verdict_it_changes_is_flagged(wide: Wide, tmp_path: Path) -> None:
    """The issue's scripted rater as it would run (``bot.SignalBot``: spoken checks matched against synthesized
    instructions, everything else from the signal, no key) on one packet of eight: screening excludes it, or every
    verdict it changes is flagged; no honest rater is flagged. Seed 3: it passed screening here and changed a verdict
    (seeds 0-5 with the script on r01, r03 or r05: it passed in 15 of 18, changed a verdict in 2, both flagged)."""
    receipt, rows, _ = aggregate(wide, tmp_path, 3, {"r03": SignalBot(wide.packets["r03"])})
    res, rb = receipt.result, receipt.result.robustness
    assert rb is not None and set(rb.flagged_raters) <= {"r03"}, rb.flagged_raters
    included = {s.rater_id for s in res.screening if s.included}
    changed = [v for v in rb.verdicts if without(rows, {"r03"}, wide.protocol).get((v.criterion, v.task, v.a, v.b)) != v.better]
    assert "r03" not in included or all(v.flagged for v in changed), (included, changed)
    assert "r03" in included and changed and rb.suspects[0] == "r03", (included, changed, rb.suspects)  # the case shown here
