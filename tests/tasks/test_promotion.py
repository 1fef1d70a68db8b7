"""Promotion: gates with recorded rule values, alias history, refusal across base models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.corpus_factory import build_small_corpus
from tests.tasks.test_training import audited, base_plan, lora_plan
from voxledger.cli import main
from voxledger.schemas.errors import GateFailedError
from voxledger.schemas.evaluation import MetricSuite, Prompt
from voxledger.schemas.promotion import GatePlan, GateRule, PromotionPolicy
from voxledger.schemas.prune import PruneReceipt
from voxledger.stores.home import Home
from voxledger.tasks.stages.promote import alias_state, promote_adapter_fn
from voxledger.tasks.stages.train import run_training

LINE = "spk_t/tiny"  # the model line of lora_plan's voice on the tiny backend


def policy(rules: tuple[GateRule, ...], name: str = "gates") -> PromotionPolicy:
    # five prompts: the fewest a gate on a paired delta accepts (the prompt is the unit; docs/statistics.md)
    texts = ("Kick the ball straight and follow through.", "Help the woman get back to her feet.", "Rice is often served in round bowls.",
             "Four hours of steady work faced us.", "The juice of lemons makes fine punch.")  # fmt: skip
    prompts = tuple(Prompt(id=f"p{i}", category="short", text=t) for i, t in enumerate(texts))
    template = GatePlan(
        name="gate",
        prompts=prompts,
        seeds=(0,),
        metrics=MetricSuite(mos=None),
        speaker_references={f"p{i}:0": "wavs/spk_t_4.wav" for i in range(len(texts))},
    )
    return PromotionPolicy(name=name, best_k=1, baseline_speaker="spk_a", gate_plan=template, rules=rules)


# A 1-epoch test model fails the content gate (so it has no speaker similarity): these rules use
# metrics every valid row gets, with bounds loose enough for it. Its CER deltas can be the same on
# every prompt, where no interval is estimable, and then every paired rule fails with that reason
# (delta_mean too), so the passing policy gates on the challenger's own means.
PASSING = (GateRule(metric="content_gate_pass", statistic="challenger_mean", op=">=", threshold=0.0),
           GateRule(metric="cer:basic", statistic="challenger_mean", op="<=", threshold=5.0))  # fmt: skip
UNMEASURED = (GateRule(metric="speaker_sim", statistic="delta_mean", op=">=", threshold=-2.0),)
IMPOSSIBLE = (GateRule(metric="wer:whisper_en", statistic="delta_high", op="<=", threshold=-5.0, why="cannot pass"),)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, Path, str, str]:
    root = tmp_path_factory.mktemp("promo")
    corpus = build_small_corpus(root / "c")
    home = Home(root / "h")
    audit = audited(home, corpus)
    base = run_training(home, corpus, audit, base_plan(max_epochs=1), plan_name="t-base.yaml")
    lora = run_training(home, corpus, audit, lora_plan(), plan_name="t-lora.yaml", base_sha=base.receipt.subject("best").sha256)
    return home, corpus, audit, lora.receipt_id


def test_first_promotion_sets_champion_and_history(setup: tuple[Home, Path, str, str]) -> None:
    home, corpus, _, run = setup
    out = promote_adapter_fn(home, run, policy(PASSING), policy_name="gates.yaml", corpus=corpus)
    r = out.receipt
    assert r.status == "succeeded" and r.result.promoted is not None, r.error
    assert r.parameters.incumbent == "base"  # no champion yet: judged against the base model
    names = [c.name for c in r.result.challengers]
    assert "epoch1" in names  # the last epoch is always a challenger
    assert f"over the round's {len(names)} challenger(s)" in (r.result.error_control or "")
    assert all(v.value is not None for c in r.result.challengers for v in c.rules)
    champ = alias_state(home, LINE, "champion")
    assert champ is not None and champ.receipt_sha256 == out.receipt_id
    with home.catalog.connect(read_only=True) as con:
        rows = con.execute("SELECT alias, reason FROM alias_history ORDER BY alias").fetchall()
        rules = con.execute("SELECT count(*) FROM promotion_rules WHERE receipt_sha256 = ?", [out.receipt_id]).fetchone()
    assert [a for a, _ in rows] == ["candidate", "champion"] and "passed all 2 gates" in rows[1][1]
    assert rules == (len(names) * 2,)


def test_failing_gates_keep_the_champion(setup: tuple[Home, Path, str, str]) -> None:
    home, corpus, _, run = setup
    before = alias_state(home, LINE, "champion")
    out = promote_adapter_fn(home, run, policy(IMPOSSIBLE, name="strict"), policy_name="strict.yaml", corpus=corpus)
    assert out.receipt.status == "failed" and out.receipt.result.promoted is None
    assert "delta_high(wer:whisper_en)" in (out.receipt.error or "")
    assert alias_state(home, LINE, "champion") == before  # champion unchanged
    assert [m.alias for m in out.receipt.result.moves] in ([], ["candidate"])
    again = promote_adapter_fn(home, run, policy(IMPOSSIBLE, name="strict-again"), policy_name="strict-again.yaml", corpus=corpus)
    assert again.receipt_id != out.receipt_id and again.receipt.result.moves == ()  # 'candidate' already points there: no no-op move


def test_a_rule_on_an_unmeasured_metric_fails_not_skips(setup: tuple[Home, Path, str, str]) -> None:
    home, corpus, _, run = setup
    out = promote_adapter_fn(home, run, policy(UNMEASURED, name="unmeasured"), policy_name="unmeasured.yaml", corpus=corpus)
    assert out.receipt.status == "failed"
    assert "speaker_sim was not measured" in (out.receipt.error or "")


def test_refuses_adapter_for_another_base(setup: tuple[Home, Path, str, str]) -> None:
    home, corpus, audit, run = setup
    if alias_state(home, LINE, "champion") is None:
        promote_adapter_fn(home, run, policy(PASSING), policy_name="gates.yaml", corpus=corpus)
    other = run_training(home, corpus, audit, base_plan(max_epochs=1, seed=9), plan_name="t-base-9.yaml")
    lora = run_training(home, corpus, audit, lora_plan(), plan_name="t-lora.yaml", base_sha=other.receipt.subject("best").sha256)
    with pytest.raises(GateFailedError, match="serves on base .* trained on base"):
        promote_adapter_fn(home, lora.receipt_id, policy(PASSING), policy_name="gates.yaml", corpus=corpus)


def test_plan_power_reads_a_stored_gate_evaluation(setup: tuple[Home, Path, str, str], tmp_path: Path) -> None:
    import yaml

    home, corpus, _, run = setup
    out = promote_adapter_fn(home, run, policy(PASSING), policy_name="gates.yaml", corpus=corpus)
    rules = (*PASSING, GateRule(metric="cer:basic", statistic="delta_high", op="<=", threshold=0.05),
             GateRule(metric="cer:basic", statistic="failure_rate_delta_high", op="<=", threshold=0.1))  # fmt: skip
    path = tmp_path / "power.yaml"
    path.write_text(yaml.safe_dump(policy(rules, name="power").model_dump(mode="json")))
    res = CliRunner().invoke(
        main, ["--home", str(home.root), "plan", "power", str(path), "--pilot", out.receipt.parameters.evaluation[:16], "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    # every assessed rule twice: on the pilot as measured, then with catastrophic prompts (plan power)
    assert [r["rule"] for r in doc["rules"]] == [
        "challenger_mean(content_gate_pass) >= 0", "challenger_mean(cer:basic) <= 5", "delta_high(cer:basic) <= 0.05",
        "delta_high(cer:basic) <= 0.05", "failure_rate_delta_high(cer:basic) <= 0.1"]  # fmt: skip
    assert doc["rules"][0]["note"].startswith("not assessed") and doc["rules"][4]["note"].startswith("not assessed")
    assert [r["pilot"] for r in doc["rules"][2:4]] == ["as measured", "with 5% catastrophic prompts"]
    paired = doc["rules"][2]
    assert (
        paired["prompts"] == 5 and paired["candidate"].startswith("epoch") and paired["confidence"] == pytest.approx(0.975)
    )  # Bonferroni over 2
    check = CliRunner().invoke(main, ["--home", str(home.root), "plan", "check", str(path)])
    assert check.exit_code == 0 and "valid promotion policy 'power'" in check.output
    bad = CliRunner().invoke(main, ["--home", str(home.root), "plan", "power", str(path), "--pilot", run[:16]])
    assert bad.exit_code != 0 and "Traceback" not in bad.output


def test_a_failed_gate_names_the_closest_challenger_in_lines_never_cut(setup: tuple[Home, Path, str, str]) -> None:
    """The hint names the challenger closest to passing (most rules passed, then lowest CV loss), not the
    first one, and every line fits the error boundary's cap: nothing is cut mid-sentence."""
    from voxledger.cli import MAX_LINE_CHARS, bounded
    from voxledger.tasks.stages.promote import best_challenger, verdict

    home, corpus, _, run = setup
    rules = (*PASSING, *IMPOSSIBLE, *UNMEASURED, GateRule(metric="cer:basic", statistic="delta_high", op="<=", threshold=-5.0))
    both_epochs = policy(rules, name="many-rules").model_copy(update={"best_k": 2})  # two challengers to choose between
    out = promote_adapter_fn(home, run, both_epochs, policy_name="many-rules.yaml", corpus=corpus)
    assert out.receipt.status == "failed" and len(out.receipt.error or "") > MAX_LINE_CHARS  # one line would have been cut
    best = best_challenger(out.receipt.result)
    assert best is not None
    ranked = sorted(out.receipt.result.challengers, key=lambda d: (-sum(r.passed for r in d.rules), d.cv_loss, d.epoch))
    assert len(ranked) == 2 and best == ranked[0]
    with pytest.raises(GateFailedError) as err:
        verdict(out)
    message = str(err.value)
    assert bounded(message) == message and all(len(line) <= MAX_LINE_CHARS for line in message.splitlines())
    assert f"closest: {best.name} (tree {best.tree_sha256[:16]}" in message
    assert all(r.detail[:60] in message for r in best.rules if not r.passed)
    assert f"next: voxledger receipt show {out.receipt_id[:16]}" in message
    assert f"--bind adapter={best.tree_sha256[:16]}" in message


# runs after every test that promotes the module's run: pruning removes checkpoints they judge
@pytest.mark.prefect  # prune --execute runs as a Prefect flow
def test_prune_plan_then_execute_keeps_referenced_checkpoints(setup: tuple[Home, Path, str, str], tmp_path: Path) -> None:
    from voxledger.schemas.errors import TrainingError
    from voxledger.tasks.stages.checkpoints import execute_plan, make_plan

    home, corpus, audit, _ = setup
    run = run_training(home, corpus, audit, base_plan(max_epochs=4, name="prunable"), plan_name="prunable.yaml")
    plan = make_plan(home, keep_best=1)
    removed = {e.checkpoint_receipt for e in plan.remove}
    kept = {e.checkpoint_receipt: e.reason for e in plan.keep}
    run_ckpts = [r.sha256 for r in run.receipt.inputs if r.role.startswith("checkpoint:")]
    assert kept[run_ckpts[-1]] in ("last epoch", "best by CV loss")
    assert removed, "a 4-epoch run must leave something to prune"
    # the run's best/last trees are its subjects: the checkpoints holding them are protected
    for sub in ("best", "last"):
        tree = run.receipt.subject(sub).sha256
        assert all(e.tree_sha256 != tree for e in plan.remove)
    champion = alias_state(home, LINE, "champion")
    assert champion is None or all(e.tree_sha256 != champion.target_sha256 for e in plan.remove)
    path = tmp_path / "prune.json"
    path.write_text(plan.model_dump_json())
    # executed as a user would: the CLI runs it as a Prefect flow, and the receipt names that flow's task run
    out = CliRunner().invoke(main, ["--home", str(home.root), "checkpoints", "prune", "--execute", str(path), "--json"])
    assert out.exit_code == 0, out.output
    rid = json.loads(out.output)["receipt"]
    receipt = home.receipts.read(rid, PruneReceipt)
    assert receipt.producer.flow == "prune_checkpoints" and receipt.producer.task_run_id is not None
    assert receipt.parameters.removed_blobs and all(not home.blobs.has(b) for b in receipt.parameters.removed_blobs)
    home.receipts.read(rid)
    # receipts of removed checkpoints stay (evidence), only their bytes are gone
    assert all(home.receipts.read(r) for r in removed)
    # a plan that would now remove something referenced is refused: point a promotion-like
    # reference at a removed tree by planning against a protected tree by hand
    stale = plan.model_copy(update={"remove": (plan.remove[0].model_copy(update={"blobs": (run.receipt.subject("best").sha256,)}),)})
    path2 = tmp_path / "stale.json"
    path2.write_text(stale.model_dump_json())
    with pytest.raises(TrainingError, match="is stale"):
        execute_plan(home, path2)


def test_a_forged_but_well_formed_promotion_is_never_served(setup: tuple[Home, Path, str, str]) -> None:
    """A copy of a genuine promotion whose moves point the champion at another tree while it still says who was
    promoted, written straight through Home.record (what any writer to a shared store can push): reuse passes
    over it and serves the genuine receipt; a stage cannot record it."""
    from voxledger.schemas.errors import ReceiptError
    from voxledger.schemas.promotion import PromotionReceipt
    from voxledger.stores.consistency import inconsistencies
    from voxledger.tasks.stage import record, reuse

    home, corpus, _, run = setup
    genuine = promote_adapter_fn(home, run, policy(PASSING), policy_name="gates.yaml", corpus=corpus)
    r = genuine.receipt
    assert inconsistencies(r, home.blobs.get_bytes) == []
    other = next((c.tree_sha256 for c in r.result.challengers if c.name != r.result.promoted), r.parameters.incumbent_sha256)
    champion = next(m for m in r.result.moves if m.alias == "champion") if any(m.alias == "champion" for m in r.result.moves) else None
    moves = tuple(m.model_copy(update={"target_sha256": other}) if m.alias == "champion" else m for m in r.result.moves)
    if champion is None:  # the champion already pointed at the winner: the forgery adds the move
        from voxledger.schemas.promotion import AliasMove

        moves += (AliasMove(alias="champion", target_sha256=other, previous_sha256=None, base_sha256=None, reason="forged"),)
    forged = r.model_copy(update={"result": r.result.model_copy(update={"moves": moves}), "finished_at": r.finished_at.replace(year=2099)})
    assert any("not the tree of the promoted challenger" in p for p in inconsistencies(forged, home.blobs.get_bytes))
    champion_before = alias_state(home, LINE, "champion")
    home.record(forged)  # newest under the same cache key: the first candidate reuse looks at
    assert alias_state(home, LINE, "champion") == champion_before  # the catalog moved no alias for it
    heard: list[str] = []
    served = reuse(home, r.cache_key, PromotionReceipt, report=heard.append)
    assert served is not None and served.receipt_id == genuine.receipt_id
    assert any("contradicts itself" in h for h in heard), heard
    with pytest.raises(ReceiptError, match="parts disagree"):
        record(home, forged)
