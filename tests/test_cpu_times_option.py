"""``pytest --cpu-times FILE``: one JSON line per test and the totals at the end; an unusable path is
refused before any test runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["tests/test_settings.py::test_every_name_in_the_package_source_is_a_field",
         "tests/test_settings.py::test_every_problem_is_reported_at_once"]  # fmt: skip


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_each_test_gets_a_line_and_the_totals_are_printed(tmp_path: Path) -> None:
    out = tmp_path / "cpu.jsonl"
    proc = _pytest(*TESTS, "--cpu-times", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["test"] for r in rows] == TESTS
    assert all(r["wall_s"] > 0 and r["cpu_s"] >= 0 and r["children_cpu_s"] >= 0 for r in rows)
    assert f"cpu times ({out}, 2 tests)" in proc.stdout
    assert all(t in proc.stdout.split("cpu times", 1)[1] for t in TESTS)  # the costliest-tests list names them


def test_an_unwritable_path_is_refused_before_any_test(tmp_path: Path) -> None:
    bad = tmp_path / "no-such-folder" / "cpu.jsonl"
    proc = _pytest(TESTS[0], "--cpu-times", str(bad))
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error
    assert f"--cpu-times {bad}: cannot append to it" in proc.stderr and "writable folder" in proc.stderr
    assert "passed" not in proc.stdout
