"""Output piped or redirected, as in `voxledger ... | cat` or `> log`: full-width tables, plain progress lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _voxledger(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80"}  # what a narrow terminal would say: must not matter when piped
    cmd = [sys.executable, "-m", "voxledger.cli", "--home", str(home), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)


def test_a_piped_table_is_never_truncated(tmp_path: Path) -> None:
    out = _voxledger("pipeline", "stages", str(ROOT / "plans" / "pipeline-demo.yaml"), home=tmp_path / "h")
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout, out.stdout
    assert "listening_protocol" in out.stdout and "unless a challenger was promoted" in out.stdout and "export_packets" in out.stdout
    assert "\x1b[" not in out.stdout  # no colour codes in a file


@pytest.mark.prefect
def test_progress_is_plain_lines_on_a_redirected_stderr(tmp_path: Path) -> None:
    (tmp_path / "f.bin").write_bytes(b"voxledger")
    out = _voxledger("store", "put", str(tmp_path / "f.bin"), home=tmp_path / "h")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("[")]
    assert any("connecting to the Prefect server" in line for line in lines), out.stderr
    assert any(f"storing {tmp_path / 'f.bin'}" in line for line in lines), out.stderr
    assert "\r" not in out.stderr and "⠋" not in out.stderr  # no spinner frames in a log


def test_a_quiet_stretch_still_prints_a_line_every_period(capsys: pytest.CaptureFixture[str]) -> None:
    """A model loading or a long set-up says nothing for a while: the log still gets a line each period."""
    import time

    from voxledger.cli.common import ProgressLines

    with ProgressLines(enabled=True, every_s=0.2) as lines:
        lines.show("audit: loading the ASR model (tiny.en)")
        time.sleep(1.0)
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith("] audit: loading the ASR model (tiny.en)"), err
    still = [line for line in err if "still: audit: loading the ASR model (tiny.en)" in line]
    assert len(still) >= 2, err  # about four in the second; at least two even on a loaded machine
    stamps = [float(line[1:].split(" s]")[0]) for line in err]
    assert stamps == sorted(stamps) and stamps[-1] < 1.5, err
    with ProgressLines(enabled=False, every_s=0.2) as lines:  # on a terminal the live status line is enough
        lines.show("training: epoch 0 (1 of 2)")
        time.sleep(0.5)
    assert capsys.readouterr().err == ""


def test_a_piped_audit_finding_keeps_its_whole_message_and_every_id_count(capsys: pytest.CaptureFixture[str]) -> None:
    from voxledger.cli.audit import _print_findings

    message = "wavs/a.wav: ASR heard " + "'x y z' " * 40 + "(CER 0.52)"  # 350 characters
    ids = [f"u{i}" for i in range(7)]
    doc = {
        "parameters": {"corpus_name": "c"},
        "result": {
            "findings": [{"severity": "warning", "code": "asr_disagreement", "utterance_ids": ids, "message": message}],
            "stats": {"splits": []},
            "counts_by_code": {"asr_disagreement": 1},
            "verdict": "pass",
        },
    }
    _print_findings(doc, max_rows=5)
    out = capsys.readouterr().out
    assert message in out and "u0, u1, u2, u3 (+3 more)" in out, out
