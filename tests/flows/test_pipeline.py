"""The orchestrated pipeline on real Prefect: stages chain, the second run is served from cache
with identical lineage, a changed plan reruns only downstream stages, a failing audit stops it."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml

from tests.flows.conftest import run, write_plans
from voxledger.schemas.errors import AuditFailedError
from voxledger.stores.home import Home

pytestmark = pytest.mark.prefect


def test_pipeline_runs_then_is_served_from_cache(first_run, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    home_dir, plans, first, t_first = first_run
    assert [s["stage"] for s in first["stages"]] == [
        "audit",
        "train_base",
        "train_adapter",
        "promote",
        "evaluate",
        "package",
        "export_packets",
    ]
    assert not any(s["cached"] for s in first["stages"])
    t0 = time.perf_counter()
    second = run(home_dir, corpus, plans)
    t_second = time.perf_counter() - t0
    assert all(s["cached"] for s in second["stages"])
    # every hit says how many stored objects it checked before it was served (receipt, outputs, inputs)
    assert all(s.get("verified_objects", 0) >= 3 for s in second["stages"]), [
        (s["stage"], s.get("verified_objects")) for s in second["stages"]
    ]
    assert [s["receipt_id"] for s in second["stages"]] == [s["receipt_id"] for s in first["stages"]]  # identical lineage
    print(f"pipeline first {t_first:.1f} s, cached {t_second:.1f} s, ratio {t_second / t_first:.3f}")
    # change only the adapter plan: audit and base training stay cached, everything downstream reruns
    lora = yaml.safe_load((plans / "lora.yaml").read_text())
    lora["lora"]["r"] = 4
    (plans / "lora-r4.yaml").write_text(yaml.safe_dump(lora))
    pipe = yaml.safe_load((plans / "pipeline.yaml").read_text()) | {"adapter_training": "lora-r4.yaml"}
    (plans / "pipeline-r4.yaml").write_text(yaml.safe_dump(pipe))
    third = run(home_dir, corpus, plans, "pipeline-r4.yaml")
    assert [s["cached"] for s in third["stages"]] == [True, True, False, False, False, False, False]
    with Home(home_dir).catalog.connect(read_only=True) as con:
        runs = con.execute("SELECT count(DISTINCT receipt_sha256) FROM pipeline_stages WHERE run_status = 'succeeded'").fetchone()
    assert runs == (3,)


def cli(home: Path, *args: str) -> object:
    from click.testing import CliRunner

    from voxledger.cli import main

    result = CliRunner().invoke(main, ["--home", str(home), *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_provenance_recipes(first_run) -> None:  # type: ignore[no-untyped-def]
    home_dir, _, summary, _ = first_run
    audit = summary["audit"]["receipt_id"]
    kinds = {r["kind"] for r in cli(home_dir, "provenance", "downstream", audit)}  # type: ignore[union-attr]
    assert {"training_run", "promotion", "evaluation", "package", "packet_set"} <= kinds
    # base voices are in the base model's data, so the adapter package was trained on them too
    with_a = cli(home_dir, "provenance", "speaker", "spk_a")
    packaged = cli(home_dir, "query", "SELECT package_sha256 FROM packages")
    assert {p["package_sha256"] for p in with_a} == {p["package_sha256"] for p in packaged}  # type: ignore[union-attr,index]
    assert cli(home_dir, "provenance", "speaker", "nobody") == []
    # the target voice: its train split taught the adapter, its dev split chose the checkpoint and its
    # test clips were never trained on, so they are counted apart
    per_split = {
        r["split"]: r["utterances"]
        for r in cli(home_dir, "query", "SELECT split, utterances FROM audit_speaker_splits WHERE speaker = 'spk_t'")
    }  # type: ignore[union-attr,index]
    rows = cli(home_dir, "provenance", "speaker", "spk_t")  # every package of this home comes from the same corpus and plans
    assert rows and all(
        (r["trained_utterances"], r["cv_utterances"], r["held_out_utterances"])
        == (per_split["target_train"], per_split["target_dev"], per_split["test"])
        for r in rows  # type: ignore[union-attr]
    ), rows
    champ = cli(home_dir, "provenance", "champion-at", "2100-01-01T00:00:00Z")
    history = cli(home_dir, "alias", "history", "champion")
    assert champ[0]["receipt"] == history[-1]["receipt"]  # type: ignore[index]
    assert summary["promote"]["receipt_id"] in {h["receipt"] for h in history}  # type: ignore[union-attr,index]
    assert cli(home_dir, "provenance", "champion-at", "2000-01-01T00:00:00Z") == []
    used = cli(home_dir, "provenance", "normaliser", "voxledger-basic:1")
    assert {r["evaluation"] for r in used} >= {summary["evaluate"]["receipt_id"]}  # type: ignore[union-attr]
    assert cli(home_dir, "provenance", "normaliser", "no-such-normaliser:9") == []
    runs = [
        r["receipt_sha256"]
        for r in cli(home_dir, "query", "SELECT receipt_sha256 FROM receipts WHERE kind = 'training_run' ORDER BY finished_at")
    ]  # type: ignore[union-attr]
    diff = cli(home_dir, "provenance", "diff", runs[0], runs[1])
    assert any(d["path"].startswith("parameters.mode") for d in diff)  # type: ignore[union-attr]
    assert not any(d["volatile"] for d in diff)  # type: ignore[union-attr]


def test_catalog_rebuild_reproduces_every_table(first_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A rebuild (every receipt in one batch) gives the rows the pipeline's own writes gave, and
    both give the rows of one ``INSERT`` per row (DuckDB's own cast of each bound value), the
    reference for the catalog's one-statement column inserts."""
    from voxledger.stores.catalog import Catalog, _rows_for

    home = Home(first_run[0])
    with home.catalog.connect(read_only=True) as con:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' AND table_name <> 'schema_migrations'"
            ).fetchall()
        ]
        before = {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in tables}
    assert len(tables) >= 20
    home.rebuild_catalog()
    with home.catalog.connect(read_only=True) as con:
        after = {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in tables}
    assert after == before
    reference = Catalog(tmp_path / "by-row.duckdb")
    rows = _rows_for([(rid, home.receipts.read_document(rid)) for rid in home.receipts.ids()], home.blobs.get_bytes)
    with reference.connect() as con:
        con.execute("BEGIN")
        for table, table_rows in rows.items():
            for row in table_rows:
                con.execute(f"INSERT OR IGNORE INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
        con.execute("COMMIT")
        by_row = {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in tables if t != "catalog_sums"}
    assert sum(map(len, by_row.values())) > 300
    assert by_row == {t: v for t, v in after.items() if t != "catalog_sums"}


def test_failing_audit_stops_the_pipeline_with_a_receipt(tmp_path: Path, corpus: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(corpus, bad)
    rows = [json.loads(x) for x in (bad / "manifest.jsonl").read_text().splitlines()]
    rows[0]["split"] = "test"
    (bad / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plans = write_plans(tmp_path / "plans")
    with pytest.raises(AuditFailedError, match="pipeline stopped at audit"):
        run(tmp_path / "h", bad, plans)
    home = Home(tmp_path / "h")
    with home.catalog.connect(read_only=True) as con:
        rows = con.execute("SELECT stage, status, detail FROM pipeline_stages WHERE run_status = 'failed'").fetchall()
    assert rows[0][0] == "audit" and rows[0][1] == "failed" and "split_leakage" in rows[0][2]


def test_plan_power_takes_its_pilot_from_a_model_never_from_the_recordings(first_run) -> None:  # type: ignore[no-untyped-def]
    import yaml

    home_dir, plans, summary, _ = first_run
    policy = yaml.safe_load((plans / "promo.yaml").read_text())
    policy["rules"].append({"metric": "cer:basic", "statistic": "delta_high", "op": "<=", "threshold": 0.5})
    first = policy["gate_plan"]["prompts"][0]  # a paired rule needs a gate of 5 prompts: the power is computed for it
    policy["gate_plan"]["prompts"] += [first | {"id": f"extra{i}"} for i in range(3)]
    paired = plans.parent / "promo-paired.yaml"
    paired.write_text(yaml.safe_dump(policy))
    doc = cli(home_dir, "plan", "power", str(paired), "--pilot", summary["evaluate"]["receipt_id"])
    assessed = [r for r in doc["rules"] if r["candidate"] is not None]  # type: ignore[index]
    assert assessed, doc
    # the recordings would give the most power (the real voice beats every model): an optimism no gate earns
    assert {r["candidate"] for r in assessed} <= {"adapter", "merged"}, assessed
    from voxledger.stores.home import Home
    from voxledger.tasks.power import pilot_deltas

    considered = {p.candidate for p in pilot_deltas(Home(home_dir), summary["evaluate"]["receipt_id"], "cer:basic", False, 1.0)}
    assert considered == {"adapter"}, considered  # not the baseline, not the recordings
