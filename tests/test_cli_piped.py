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
