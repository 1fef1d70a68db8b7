"""Model lines: two voices in one home, each gated against its own base and then its own champion,
each with its own alias history; a cross-line promotion refused; a home written before lines opens
with its history attributed to its lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from tests.corpus_factory import build_small_corpus
from tests.tasks.test_promotion import PASSING, policy
from tests.tasks.test_training import audited, base_plan, lora_plan
from voxledger.cli import main
from voxledger.schemas.errors import GateFailedError
from voxledger.schemas.promotion import PromotionPolicy, PromotionReceipt
from voxledger.stores import catalog as catalog_module
from voxledger.stores.catalog import Catalog
from voxledger.stores.consistency import promotion_line
from voxledger.stores.home import Home
from voxledger.stores.migrations import MIGRATIONS
from voxledger.stores.projections import PROJECTORS
from voxledger.stores.queries import alias_moves
from voxledger.tasks.stages.promote import alias_state, promote_adapter_fn
from voxledger.tasks.stages.train import run_training

VOICES = {"spk_t/tiny": ("spk_t", ("en+f3", 75)), "spk_u/tiny": ("spk_u", ("en+m4", 60))}


def line_policy(line: str, name: str) -> PromotionPolicy:
    """test_promotion's passing policy, for one line: its references are that voice's recordings."""
    doc: dict[str, Any] = policy(PASSING, name=name).model_dump(mode="json")
    speaker = VOICES[line][0]
    doc["line"] = line
    doc["gate_plan"]["speaker_references"] = {k: f"wavs/{speaker}_4.wav" for k in doc["gate_plan"]["speaker_references"]}
    return PromotionPolicy.model_validate(doc)


@pytest.fixture(scope="module")
def two_voices(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, dict[str, tuple[Path, str]], str]:
    """One home, two corpora (one target voice each), one shared base, one adapter run per voice."""
    root = tmp_path_factory.mktemp("lines")
    home = Home(root / "h")
    runs: dict[str, tuple[Path, str]] = {}
    base_sha = ""
    for line, (speaker, voice) in VOICES.items():
        corpus = build_small_corpus(root / speaker, target=(speaker, voice))
        audit = audited(home, corpus)
        if not base_sha:
            base = run_training(home, corpus, audit, base_plan(max_epochs=1), plan_name="t-base.yaml")
            base_sha = base.receipt.subject("best").sha256
        plan = lora_plan().model_copy(update={"new_speaker": speaker, "name": f"t-lora-{speaker}"})
        run = run_training(home, corpus, audit, plan, plan_name=f"t-lora-{speaker}.yaml", base_sha=base_sha)
        runs[line] = (corpus, run.receipt_id)
    return home, runs, base_sha


def test_each_voice_is_gated_against_its_own_base_then_its_own_champion(two_voices: tuple[Home, dict[str, tuple[Path, str]], str]) -> None:
    home, runs, base_sha = two_voices
    firsts: dict[str, PromotionReceipt] = {}
    for line, (corpus, run) in runs.items():  # the second voice comes after the first has a champion
        out = promote_adapter_fn(home, run, line_policy(line, f"first-{line[:5]}"), policy_name=f"first-{line[:5]}.yaml", corpus=corpus)
        r = out.receipt
        assert r.status == "succeeded", r.error
        assert (r.parameters.line, r.parameters.incumbent, r.parameters.incumbent_sha256) == (line, "base", base_sha)
        firsts[line] = r
    for line, (corpus, run) in runs.items():
        champion = alias_state(home, line, "champion")
        assert champion is not None and champion.target_sha256 == next(
            c.tree_sha256 for c in firsts[line].result.challengers if c.name == firsts[line].result.promoted
        )
        again = promote_adapter_fn(home, run, line_policy(line, f"again-{line[:5]}"), policy_name=f"again-{line[:5]}.yaml", corpus=corpus)
        p = again.receipt.parameters
        assert (p.line, p.incumbent, p.incumbent_sha256) == (line, "adapter", champion.target_sha256), again.receipt.error


def test_each_line_keeps_its_own_alias_history(two_voices: tuple[Home, dict[str, tuple[Path, str]], str]) -> None:
    home, runs, _ = two_voices
    for line, (corpus, run) in runs.items():
        promote_adapter_fn(home, run, line_policy(line, f"first-{line[:5]}"), policy_name=f"first-{line[:5]}.yaml", corpus=corpus)
    rows, known = alias_moves(home.catalog, None, None)
    assert known == ["spk_t/tiny:candidate", "spk_t/tiny:champion", "spk_u/tiny:candidate", "spk_u/tiny:champion"]
    for line, (_, run) in runs.items():
        own, _ = alias_moves(home.catalog, None, None, line=line)
        assert own and all(r[0] == line for r in own)
        for *_, receipt in own:  # every move of a line was made by a promotion of that line's own run
            assert home.receipts.read(receipt, PromotionReceipt).parameters.training_run == run
    assert len(rows) == sum(len(alias_moves(home.catalog, None, None, line=line)[0]) for line in runs)


def test_a_cross_line_promotion_is_refused_in_one_line(two_voices: tuple[Home, dict[str, tuple[Path, str]], str]) -> None:
    home, runs, _ = two_voices
    corpus, run_t = runs["spk_t/tiny"]
    before = alias_moves(home.catalog, None, None)
    with pytest.raises(GateFailedError) as err:
        promote_adapter_fn(home, run_t, line_policy("spk_u/tiny", "cross"), policy_name="cross.yaml", corpus=corpus)
    message = str(err.value)
    assert "\n" not in message
    assert "promotes into line spk_u/tiny" in message and "(line spk_t/tiny)" in message and "policy" in message
    assert alias_moves(home.catalog, None, None) == before  # nothing moved


def _old_catalog(home: Home, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalog the code before model lines wrote for this store: migrations up to
    0014_catalog_sums, every receipt indexed, alias moves without a line."""
    level = [name for name, _ in MIGRATIONS].index("0015_model_lines")
    new_promotion = PROJECTORS["promotion"]

    def promotion_before_lines(rid: str, doc: dict[str, Any], load: Any) -> dict[str, list[dict[str, Any]]]:
        rows = new_promotion(rid, doc, load)
        return {**rows, "alias_history": [{k: v for k, v in r.items() if k != "line"} for r in rows["alias_history"]]}

    promotion_before_lines.needs_blobs = True  # type: ignore[attr-defined]
    with monkeypatch.context() as m:
        m.setattr(catalog_module, "MIGRATIONS", MIGRATIONS[:level])
        m.setitem(PROJECTORS, "promotion", promotion_before_lines)
        docs = [(rid, home.receipts.read_document(rid)) for rid in home.receipts.ids()]
        Catalog(path).ingest(docs, home.blobs.get_bytes)


def test_a_home_written_before_lines_opens_and_keeps_its_history(
    two_voices: tuple[Home, dict[str, tuple[Path, str]], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, runs, _ = two_voices
    for line, (corpus, run) in runs.items():
        promote_adapter_fn(home, run, line_policy(line, f"first-{line[:5]}"), policy_name=f"first-{line[:5]}.yaml", corpus=corpus)
    rows, _ = alias_moves(home.catalog, None, None)
    old = tmp_path / "old"
    shutil.copytree(home.root, old, ignore=shutil.ignore_patterns("catalog.duckdb*"))
    _old_catalog(home, old / "catalog.duckdb", monkeypatch)
    with duckdb.connect(str(old / "catalog.duckdb"), read_only=True) as con:
        columns = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'alias_history'").fetchall()}
    assert "line" not in columns  # written as the previous code did
    reopened = Home(old)
    assert reopened.catalog.migrations()[-1] == "0015_model_lines"
    assert alias_moves(reopened.catalog, None, None)[0] == rows  # every move kept, each on its run's line
    for line in runs:
        assert alias_state(reopened, line, "champion") == alias_state(home, line, "champion")
    reopened.rebuild_catalog()  # a rebuild from the store agrees with the migration
    assert alias_moves(reopened.catalog, None, None)[0] == rows


def test_a_promotion_receipt_written_before_lines_joins_its_runs_line(two_voices: tuple[Home, dict[str, tuple[Path, str]], str]) -> None:
    home, runs, _ = two_voices
    corpus, run = runs["spk_u/tiny"]
    out = promote_adapter_fn(home, run, line_policy("spk_u/tiny", "first-spk_u"), policy_name="first-spk_u.yaml", corpus=corpus)
    old = out.receipt.model_copy(update={"parameters": out.receipt.parameters.model_copy(update={"line": None})})
    assert "line" not in old.parameters.model_dump(mode="json")  # an older receipt's digest is unchanged
    assert promotion_line(old, home.blobs.get_bytes) == "spk_u/tiny"


def test_alias_history_champion_at_and_the_dashboard_name_the_line(
    two_voices: tuple[Home, dict[str, tuple[Path, str]], str], tmp_path: Path
) -> None:
    from voxledger.dashboards.report import build_dashboard

    home, runs, _ = two_voices
    for line, (corpus, run) in runs.items():
        promote_adapter_fn(home, run, line_policy(line, f"first-{line[:5]}"), policy_name=f"first-{line[:5]}.yaml", corpus=corpus)

    def cli(*args: str) -> Any:
        res = CliRunner().invoke(main, ["--home", str(home.root), *args])
        return res.exit_code, json.loads(res.output) if res.exit_code == 0 else res.output

    code, rows = cli("alias", "history", "spk_u/tiny:champion", "--json")
    assert code == 0 and rows and {(r["line"], r["alias"]) for r in rows} == {("spk_u/tiny", "champion")}
    assert cli("alias", "history", "--line", "spk_t/tiny", "--json")[1] == [
        r for r in cli("alias", "history", "--json")[1] if r["line"] == "spk_t/tiny"
    ]
    code, text = cli("alias", "history", "champion", "--line", "nobody/tiny")
    assert code == 1 and "no alias 'champion' in line nobody/tiny" in text and "spk_t/tiny:champion" in text
    code, champs = cli("provenance", "champion-at", "2100-01-01T00:00:00Z", "--json")
    assert code == 0 and [c["line"] for c in champs] == ["spk_t/tiny", "spk_u/tiny"]
    assert {c["target_sha256"] for c in champs} == {alias_state(home, line, "champion").target_sha256 for line in runs}  # type: ignore[union-attr]
    assert [c["line"] for c in cli("provenance", "champion-at", "2100-01-01T00:00:00Z", "--line", "spk_u/tiny", "--json")[1]] == [
        "spk_u/tiny"
    ]
    page = build_dashboard(home.catalog, tmp_path / "dash.html").read_text()
    lines_section = page.split("<h3>Model lines", 1)[1].split("<h3>Alias history", 1)[0]
    assert "spk_t/tiny" in lines_section and "spk_u/tiny" in lines_section
    # every line with its own newest training run, gate and evaluation, never another voice's
    from voxledger.stores.dashboard_queries import line_overview

    with home.catalog.connect(read_only=True) as con:
        overview = {r["line"]: r for r in line_overview(con)}
        gates = dict(
            con.execute(
                "SELECT doc->>'$.parameters.line', arg_max(receipt_sha256, finished_at) FROM receipts WHERE kind = 'promotion' GROUP BY 1"
            ).fetchall()
        )
    assert sorted(overview) == ["base/tiny", "spk_t/tiny", "spk_u/tiny"]
    for line, (_, run) in runs.items():
        row = overview[line]
        gate = home.receipts.read(row["gate"], PromotionReceipt)
        assert (row["training_run"], row["gate"], gate.parameters.line) == (run, gates[line], line)
        assert row["evaluation"] == gate.parameters.evaluation  # the gate's own evaluation measured this line's checkpoints
        assert row["champion"] == alias_state(home, line, "champion").target_sha256  # type: ignore[union-attr]
        assert row["training_run"][:12] in page and row["gate"][:12] in page
    assert overview["base/tiny"]["gate"] is None and overview["base/tiny"]["training_run"] is not None


def test_train_offers_the_policy_of_its_own_line(tmp_path: Path) -> None:
    """`train`'s next hint names --policy: the policy beside the training plan for the run's line."""
    import yaml

    from voxledger.tasks.stages.promote import policies_beside

    for line in VOICES:
        speaker = VOICES[line][0]
        (tmp_path / f"promote-{speaker}.yaml").write_text(yaml.safe_dump(line_policy(line, f"p-{speaker}").model_dump(mode="json")))
    (tmp_path / "train-adapter.yaml").write_text(yaml.safe_dump(lora_plan().model_dump(mode="json")))
    assert policies_beside(tmp_path / "train-adapter.yaml", "spk_u/tiny") == [tmp_path / "promote-spk_u.yaml"]
    assert policies_beside(tmp_path / "train-adapter.yaml", "nobody/tiny") == []
