"""Equivalence wired to the store: receipts, catalog rows, CLI exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from voxledger.cli import main

pytestmark = pytest.mark.prefect


def _dumps(root: Path, pcm: np.ndarray, mel: np.ndarray, tokens: np.ndarray) -> Path:
    root.mkdir(parents=True)
    pcm.astype("<f4").tofile(root / "pcm.f32")
    mel.astype("<f4").tofile(root / "mel.f32")
    tokens.astype("<i4").tofile(root / "tokens.i32")
    return root


def test_green_and_red_runs_are_recorded(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pcm, mel, tok = rng.standard_normal(16000), rng.standard_normal((50, 80)), rng.integers(0, 6561, 40)
    ref = _dumps(tmp_path / "ref", pcm, mel, tok)
    same = _dumps(tmp_path / "same", pcm + 1e-6, mel, tok)
    bad_mel = mel.copy()
    bad_mel[17, 3] += 50.0
    red = _dumps(tmp_path / "red", pcm, bad_mel, tok)
    home = tmp_path / "home"
    runner = CliRunner()
    ok = runner.invoke(main, ["--home", str(home), "equivalence", "compare", str(ref), str(same), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["report"]["band"] == "GREEN"
    bad = runner.invoke(main, ["--home", str(home), "equivalence", "compare", str(ref), str(red), "--cand-runtime", "ggml,dtype=f16"])
    assert bad.exit_code != 0
    assert "RED" in bad.output and "mel=RED" in bad.output
    q = runner.invoke(
        main, ["--home", str(home), "query", "SELECT stage, band, candidate_runtime FROM equivalence_stages WHERE band = 'RED'", "--json"]
    )
    assert json.loads(q.output) == [{"stage": "mel", "band": "RED", "candidate_runtime": "ggml"}]
    q = runner.invoke(
        main, ["--home", str(home), "query", "SELECT status FROM receipts WHERE kind = 'equivalence' ORDER BY finished_at", "--json"]
    )
    assert [r["status"] for r in json.loads(q.output)] == ["succeeded", "failed"]


def test_truncated_dump_is_a_clear_error(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    ref = _dumps(tmp_path / "ref", rng.standard_normal(100), rng.standard_normal((5, 80)), np.arange(10))
    cand = _dumps(tmp_path / "cand", rng.standard_normal(100), rng.standard_normal((5, 80)), np.arange(10))
    (cand / "mel.f32").write_bytes((cand / "mel.f32").read_bytes()[:-3])
    out = CliRunner().invoke(main, ["--home", str(tmp_path / "h"), "equivalence", "compare", str(ref), str(cand)])
    assert out.exit_code != 0
    assert "mel" in out.output and "mel.f32" in out.output and "Traceback" not in out.output
