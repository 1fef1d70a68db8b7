"""Aggregation of page-faithful submissions: statistics, screening, attrition, catalog, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.tasks.listening.conftest import Exported
from tests.tasks.listening.factory import QUALITY, oracle_scorer, simulate_submission, write_json
from voxledger.cli import main
from voxledger.schemas.listening import KeyEntry, PacketManifest, PacketTrial
from voxledger.tasks.stages.ratings import aggregate_ratings

BIASES = {"r01": -0.4, "r02": 0.0, "r03": 0.4, "r04": -0.4, "r05": 0.0, "r06": 0.4}


def trials(ex: Exported, rater: str, task: str | None = None, role: str | None = None) -> list[PacketTrial]:
    """The rater's trials as exported, of ``task`` and holding a stimulus of ``role`` when given."""
    manifest = PacketManifest.model_validate_json((ex.packets / rater / "packet.json").read_bytes())
    return [t for t in manifest.trials if task in (None, t.task) and (role is None or any(ex.key[s].role == role for s in t.stimuli))]


def ab_pairs(ex: Exported, raters: tuple[str, ...] | dict[str, float]) -> int:
    """Candidate A/B pairs the raters' packets hold: every prompt a rater hears in A/B (design.split) gives one
    sys_a-sys_b pair (the demo plan leaves the reference out of A/B); the comparison gold trials hold no stimulus."""
    return sum(len(trials(ex, r, "ab", "stimulus")) for r in raters)


def submit(ex: Exported, tmp: Path, rater: str, scorer=None, **kw) -> Path:  # type: ignore[no-untyped-def]
    doc = simulate_submission(ex.packets / rater, ex.key, scorer or oracle_scorer(BIASES[rater]), session=f"{int(rater[1:]):032x}", **kw)
    return write_json(tmp / f"{rater}.json", doc)


def test_six_careful_raters(exported: Exported, tmp_path: Path) -> None:
    files = [submit(exported, tmp_path, r) for r in BIASES]
    out = aggregate_ratings(exported.home, exported.receipt_id, files)
    res = out.receipt.result
    assert res.submissions_accepted == 6 and not res.rejections and res.rejected_rows == 0 and res.attrition.missing_cells == 0
    assert all(s.included for s in res.screening)
    nat = {s.candidate: s for s in res.scores if s.criterion == "naturalness"}
    assert nat["recordings"].mean > nat["sys_a"].mean > nat["sys_b"].mean
    assert all(s.ci_low is not None and s.ci_low <= s.mean <= s.ci_high and s.raters == 6 for s in nat.values())  # type: ignore[operator]
    mushra = {s.candidate: s.mean for s in res.scores if s.criterion == "quality"}
    screens = {s.candidate: s.mean for s in res.screening_scores if s.criterion == "quality"}
    assert set(mushra) == {"sys_a", "sys_b"} and mushra["sys_b"] < mushra["sys_a"]  # the hidden reference and anchor are no candidates
    assert screens["hidden_reference"] == 100 and screens["low_anchor"] < mushra["sys_b"]
    delta = next(d for d in res.deltas if (d.criterion, d.a, d.b) == ("naturalness", "sys_a", "sys_b"))
    assert delta.better == "sys_a" and delta.mean_delta < 0 and delta.p_value is not None and delta.p_value < 0.01
    ab = next(d for d in res.deltas if d.criterion == "preference")
    pairs = ab_pairs(exported, BIASES)  # 6 prompts x 3 raters, each rater hearing a prompt in A/B or in ACR/MUSHRA
    assert 6 <= pairs < 18  # every prompt in A/B for at least one of its raters, none for all three
    assert (ab.a, ab.b, ab.better) == ("sys_a", "sys_b", "sys_a") and ab.pairs == pairs
    bt = res.bradley_terry[0]
    # sys_a wins every comparison: separable data, the maximum-likelihood strengths do not exist
    assert not bt.identifiable and not bt.converged and bt.strengths is None and "separable" in (bt.note or "") and bt.comparisons == pairs
    alpha = {a.criterion: a for a in res.agreement}
    assert alpha["naturalness"].alpha is not None and alpha["naturalness"].alpha > 0.5
    assert alpha["quality"].level == "interval" and alpha["quality"].alpha is not None and alpha["quality"].alpha > 0.8
    bias = {b.rater_id: b.bias for b in res.bias if b.criterion == "naturalness"}
    assert bias["r03"] > bias["r02"] > bias["r01"]  # the injected +-0.4 offsets come back in order
    # the revealed key is in the store under the commitment and is an input of the aggregate
    commitment = exported.receipt.parameters.key_commitment_sha256
    assert exported.home.blobs.has(commitment) and out.receipt.input("blinding_key").sha256 == commitment
    assert len(out.submission_receipts) == 6
    again = aggregate_ratings(exported.home, exported.receipt_id, files)
    assert again.cached and again.receipt_id == out.receipt_id


def test_ratings_table_walks_back_to_the_audio(exported: Exported, tmp_path: Path) -> None:
    out = aggregate_ratings(exported.home, exported.receipt_id, [submit(exported, tmp_path, r) for r in ("r01", "r02")])
    with exported.home.catalog.connect(read_only=True) as con:
        n = con.execute("SELECT count(*) FROM ratings WHERE receipt_sha256 = ?", [out.receipt_id]).fetchone()[0]  # type: ignore[index]
        # rating -> audio digest -> the packet_set receipt that read it as a stimulus
        rows = con.execute(
            "SELECT DISTINCT r.candidate, r.prompt_id, e.dst FROM ratings r JOIN edges e ON e.src = r.audio_sha256"
            " WHERE r.role = 'stimulus' AND e.role = 'stimulus_audio' AND r.criterion = 'naturalness'").fetchall()  # fmt: skip
        scores = con.execute("SELECT candidate, mean FROM listening_scores WHERE criterion = 'naturalness' ORDER BY mean DESC").fetchall()
    assert n == out.receipt.result.rating_rows > 0
    assert rows and {r[2] for r in rows} == {exported.receipt_id}
    assert [c for c, _ in scores] == ["recordings", "sys_a", "sys_b"]
    exported.home.rebuild_catalog()  # the rows are a pure function of the stored receipt and its ratings blob
    with exported.home.catalog.connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM ratings").fetchone()[0] == n  # type: ignore[index]


def test_screening_excludes_careless_raters(exported: Exported, tmp_path: Path) -> None:
    careful = oracle_scorer()

    def low_reference(e: KeyEntry, crit: str, trial: PacketTrial, versus: KeyEntry | None) -> int:
        return 60 if e.role == "hidden_reference" else careful(e, crit, trial, versus)

    def flat(e: KeyEntry, crit: str, trial: PacketTrial, versus: KeyEntry | None) -> int:
        return e.expected if e.role == "attention" else 3 if trial.task == "acr" else careful(e, crit, trial, versus)  # type: ignore[return-value]

    def gold_blind(e: KeyEntry, crit: str, trial: PacketTrial, versus: KeyEntry | None) -> int:
        return 3 if e.role == "gold" and e.expected == 5 else careful(e, crit, trial, versus)

    files = [submit(exported, tmp_path, "r01", low_reference), submit(exported, tmp_path, "r02", flat),
             submit(exported, tmp_path, "r03", gold_blind), submit(exported, tmp_path, "r04"), submit(exported, tmp_path, "r05")]  # fmt: skip
    res = aggregate_ratings(exported.home, exported.receipt_id, files).receipt.result
    why = {s.rater_id: s.reasons for s in res.screening}
    assert why["r01"][0].startswith("mushra_reference: hidden reference below 90 on 100% of screens")
    assert any(r.startswith("variance: ACR rating variance 0.000 below 0.1") for r in why["r02"])
    assert why["r03"] == ("gold: 1 of 3 gold answers outside +-1 (allowed 0)",)  # two ACR gold items, one A/B
    assert why["r04"] == why["r05"] == ()

    # statistics use the included raters only: a score counts those of r04 and r05 whose packet rates the candidate
    # under the criterion (design.split: a rater may hear no prompt in MUSHRA, or none in A/B)
    def rates(rater: str, criterion: str, candidate: str) -> bool:
        return any(criterion in t.criteria and candidate in {exported.key[s].candidate for s in t.stimuli if exported.key[s].role == "stimulus"}
                   for t in trials(exported, rater))  # fmt: skip

    assert res.scores and all(s.raters == sum(rates(r, s.criterion, s.candidate) for r in ("r04", "r05")) for s in res.scores)
    assert {s.raters for s in res.scores if s.criterion == "naturalness"} == {2}  # both rate in ACR; r01-r03 do as well
    assert res.attrition.missing_raters == ("r06",) and res.attrition.missing_cells > 0


def test_comparison_gold_needs_both_sides_heard_and_is_never_a_candidate(exported: Exported, tmp_path: Path) -> None:
    """One A/B gold trial per packet: the reference against its scrambled copy, equal in length, sides alternating
    across raters, the known answer on B. A rater who cannot tell them apart (0, "no difference") is excluded; the
    item reaches neither the candidate scores nor the A/B statistics."""
    from voxledger.schemas.listening import PacketManifest

    sides = []
    for rater in BIASES:
        manifest = PacketManifest.model_validate_json((exported.packets / rater / "packet.json").read_bytes())
        gold = [t for t in manifest.trials if t.task == "ab" and all(exported.key[s].role == "gold" for s in t.stimuli)]
        assert len(gold) == 1 and gold[0].criteria == ("preference",), rater
        a, b = (exported.key[s] for s in gold[0].stimuli)
        assert {a.candidate, b.candidate} == {"recordings", "gold_degraded"} and a.prompt_id == b.prompt_id and a.expected is None
        assert b.expected == (-3 if b.candidate == "gold_degraded" else 3)
        sizes = {(exported.packets / rater / "audio" / f"{s}.wav").stat().st_size for s in gold[0].stimuli}
        assert len(sizes) == 1  # padded to the same length: the file size says nothing
        sides.append(b.candidate)
    assert set(sides) == {"recordings", "gold_degraded"}

    careful = oracle_scorer()

    def no_difference(e: KeyEntry, crit: str, trial: PacketTrial, versus: KeyEntry | None) -> int:
        return 0 if trial.task == "ab" and e.role == "gold" else careful(e, crit, trial, versus)

    files = [
        submit(exported, tmp_path, "r01", no_difference),
        *(submit(exported, tmp_path, r) for r in ("r02", "r03", "r04", "r05", "r06")),
    ]
    res = aggregate_ratings(exported.home, exported.receipt_id, files).receipt.result
    why = {s.rater_id: s.reasons for s in res.screening}
    assert why["r01"] == ("gold: 1 of 3 gold answers outside +-1 (allowed 0)",) and all(
        why[r] == () for r in ("r02", "r03", "r04", "r05", "r06")
    )
    assert "gold_degraded" not in {s.candidate for s in res.scores} and all("gold_degraded" not in (d.a, d.b) for d in res.deltas)
    # every candidate A/B pair but r01's (excluded); the gold pairs never count
    pairs = ab_pairs(exported, ("r02", "r03", "r04", "r05", "r06"))
    assert 0 < pairs < ab_pairs(exported, BIASES)
    assert {d.pairs for d in res.deltas if d.criterion == "preference"} == {pairs}
    assert res.bradley_terry[0].comparisons == pairs


def test_incomplete_submission_is_attrition(exported: Exported, tmp_path: Path) -> None:
    """Two unrated candidate trials are missing cells; a missing gold, attention or hidden-reference item would refuse the
    file instead (test_submission_hardening), so the two are the last trials holding candidate stimuli only."""
    plain = [t.id for t in trials(exported, "r01") if all(exported.key[s].role == "stimulus" for s in t.stimuli)][-2:]
    assert len(plain) == 2
    res = aggregate_ratings(exported.home, exported.receipt_id, [submit(exported, tmp_path, "r01", skip=plain)]).receipt.result
    assert res.submissions_accepted == 1
    assert {c.reason for c in res.attrition.cells} == {"not rated"} and {c.rater_id for c in res.attrition.cells} == {"r01"}
    assert sorted({c.trial for c in res.attrition.cells}) == sorted(plain) and len(res.attrition.missing_raters) == 5


@pytest.mark.prefect
def test_cli_aggregate(exported: Exported, tmp_path: Path) -> None:
    files = [str(submit(exported, tmp_path, r)) for r in ("r01", "r02", "r03")]
    runner = CliRunner()
    base = ["--home", str(exported.home.root), "ratings", "aggregate", exported.receipt_id[:12]]
    res = runner.invoke(main, [*base, *files, "--csv", str(tmp_path / "ratings.csv")])
    assert res.exit_code == 0, res.output
    assert "naturalness" in res.output and "missing raters ['r04', 'r05', 'r06']" in res.output
    header = (tmp_path / "ratings.csv").read_text().splitlines()[0]
    assert header.startswith("rater_id,stimulus,trial,role,task,criterion,candidate,prompt_id")
    res = runner.invoke(main, [*base, *files, "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["cached"] is True
    assert max(QUALITY.values()) < 5  # the scorer's truth stays on the scale


def test_hidden_reference_and_anchor_are_reported_as_screening_not_candidates(exported: Exported, tmp_path: Path) -> None:
    from voxledger.tasks.listening.report import summary_lines

    res = aggregate_ratings(exported.home, exported.receipt_id, [submit(exported, tmp_path, r) for r in BIASES]).receipt.result
    quality = [d for d in res.deltas if d.criterion == "quality"]
    assert [(d.a, d.b) for d in quality] == [("sys_a", "sys_b")]  # before: recordings - sys_a, low_anchor - sys_b, ...
    assert not [d for d in res.deltas if {d.a, d.b} & {"low_anchor"}]
    assert {s.candidate for s in res.scores if s.task == "mushra"} == {"sys_a", "sys_b"}
    lines = summary_lines(res)
    assert not [line for line in lines if "low_anchor" in line or ("quality:" in line and "recordings" in line)]
    # one hidden reference per MUSHRA screen: 3 news prompts x 3 raters, each rater hearing a prompt in MUSHRA or in A/B
    screens = sum(len(trials(exported, r, "mushra", "hidden_reference")) for r in BIASES)
    assert 3 <= screens < 9
    assert f"quality: hidden reference (screening: raters are told to score it 100) mean 100.0 over {screens} ratings" in lines
    assert any(line.startswith("quality: low anchor (screening") for line in lines)
    # recordings stays a candidate where it is rated as one (ACR), compared like any other
    assert any((d.criterion, d.a) == ("naturalness", "recordings") for d in res.deltas)
