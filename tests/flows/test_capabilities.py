"""The capability matrix on a real pipeline run: expected states, evidence links, a RED comparison
turning its cell to failed, unplaceable receipts reported, and the CLI's JSON and HTML output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from voxledger.cli import main
from voxledger.schemas.base import InputRef
from voxledger.schemas.equivalence import EquivalencePlan, RuntimeDescriptor, StageSpec
from voxledger.stores import capabilities as caps
from voxledger.stores.capabilities import ANY, capability_matrix, grid
from voxledger.stores.home import Home
from voxledger.tasks.stages.equivalence import record_equivalence

# 2 backend-independent rows + per backend: 2 training, promote, 4 evaluate, package, 4 equivalence, listening
N_ROWS = 2 + 2 * 13


def _matrix(home: Home) -> caps.CapabilityMatrix:
    with home.catalog.connect(read_only=True) as con:
        return capability_matrix(con)


def _states(m: caps.CapabilityMatrix) -> dict[tuple[str, str, str], str]:
    return {(c.backend, c.stage, c.runtime): c.state for c in m.cells}


def test_empty_catalog_is_all_never_run(tmp_path: Path) -> None:
    m = _matrix(Home(tmp_path / "h"))
    assert len(grid()) == len(m.cells) == N_ROWS
    assert {c.state for c in m.cells} == {"never_run"} and m.unattributed == ()
    with pytest.raises(KeyError, match="not a row"):
        m.cell("tiny", "audit")


def _red_comparison(home: Home, tmp: Path, runtime: str, parents: tuple[InputRef, ...]) -> str:
    ref = np.sin(np.linspace(0, 20, 4000)).astype(np.float32)
    for name, pcm in (("ref", ref), ("cand", ref + 0.5)):  # rel = 0.5 / max|ref| ~ 0.5 > 0.1: RED
        (tmp / name).mkdir(parents=True, exist_ok=True)
        np.save(tmp / name / "pcm.npy", pcm)
    out = record_equivalence(home, str(tmp / "ref"), str(tmp / "cand"), EquivalencePlan(stages=(StageSpec(name="pcm", kind="pcm"),)),
                             plan_name="red-probe", ref_runtime=RuntimeDescriptor(name="adapter"),
                             cand_runtime=RuntimeDescriptor(name=runtime), parents=parents)  # fmt: skip
    assert out.receipt.status == "failed" and out.receipt.report.band == "RED"
    return out.receipt_id


@pytest.mark.prefect
@pytest.mark.slow
def test_matrix_of_a_real_pipeline_run(first_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    home_dir, _, summary, _ = first_run
    home = Home(home_dir)
    ids = {s["stage"]: s["receipt_id"] for s in summary["stages"]}
    m = _matrix(home)
    states = _states(m)
    smoke = [(ANY, "audit", ANY), (ANY, "evaluate", "recordings"), ("tiny", "train_full", ANY), ("tiny", "train_lora", ANY),
             ("tiny", "promote", ANY), ("tiny", "evaluate", "base"), ("tiny", "evaluate", "adapter"), ("tiny", "listening", ANY)]  # fmt: skip
    validated = [("tiny", "package", ANY), ("tiny", "equivalence", "merged_export")]
    assert {k: states[k] for k in smoke} == dict.fromkeys(smoke, "smoke_tested")
    assert {k: states[k] for k in validated} == dict.fromkeys(validated, "validated")
    assert {k: v for k, v in states.items() if k not in smoke + validated} == {k: "never_run" for k in states if k not in smoke + validated}
    assert all(states[k] == "never_run" for k in states if k[0] == "cosyvoice3")
    assert m.unattributed == ()
    # evidence links point at the receipts the pipeline reported
    assert m.cell(ANY, "audit").receipt_sha256 == ids["audit"]
    assert m.cell("tiny", "evaluate", "adapter").receipt_sha256 == ids["evaluate"]
    assert m.cell("tiny", "package").receipt_sha256 == ids["package"]
    assert m.cell("tiny", "evaluate", "adapter").counts == {"validated": 0, "smoke_tested": 2, "failed": 0}  # gate + plan evaluation
    assert "2 valid rows < 50" in m.cell("tiny", "evaluate", "adapter").why
    # the bars bite: lowered to this run's size, training and the recordings row become validated;
    # the untrained adapter still misses the content gate (pass rate 0.00)
    monkeypatch.setattr(caps, "MIN_TRAIN_STEPS", 2)
    monkeypatch.setattr(caps, "MIN_VALID_ROWS", 2)
    low = _states(_matrix(home))
    assert [low[(b, s, r)] for b, s, r in smoke[1:4]] == ["validated"] * 3
    assert low[("tiny", "evaluate", "adapter")] == "smoke_tested"
    monkeypatch.undo()
    # a RED comparison of the LoRA run's merged runtime: a never-run cell becomes failed
    parent = (InputRef(role="training_run", sha256=ids["train_adapter"], ref="receipt"),)
    red = _red_comparison(home, tmp_path / "a", "merged", parent)
    after = _matrix(home)
    cell = after.cell("tiny", "equivalence", "merged")
    assert (cell.state, cell.receipt_sha256, cell.counts["failed"]) == ("failed", red, 1)
    assert "RED" in cell.why
    # a RED on a validated cell keeps the earlier success but counts the failure
    _red_comparison(home, tmp_path / "b", "merged_export", parent)
    kept = _matrix(home).cell("tiny", "equivalence", "merged_export")
    assert (kept.state, kept.counts["validated"], kept.counts["failed"]) == ("validated", 1, 1)
    # a comparison that traces to no backend is reported, not dropped
    orphan = _red_comparison(home, tmp_path / "c", "ggml", ())
    assert [u["receipt_sha256"] for u in _matrix(home).unattributed] == [orphan]
    _check_cli(home_dir, tmp_path / "cap.html", red)


def _check_cli(home_dir: Path, page: Path, red: str) -> None:
    result = CliRunner().invoke(main, ["--home", str(home_dir), "capabilities", "--json", "--html", str(page)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert len(doc["cells"]) == N_ROWS and len(doc["unattributed"]) == 1
    row = next(c for c in doc["cells"] if (c["backend"], c["stage"], c["runtime"]) == ("tiny", "equivalence", "merged"))
    assert (row["state"], row["receipt_sha256"]) == ("failed", red)
    text = page.read_text()
    assert text.count("<tr class=") == N_ROWS and red in text
    assert "http://" not in text and "https://" not in text and "<script" not in text
    table = CliRunner().invoke(main, ["--home", str(home_dir), "capabilities"])
    assert table.exit_code == 0 and "capabilities" in table.output, table.output
