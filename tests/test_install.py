"""voxledger installs as a package: a built wheel, installed non-editable into a fresh venv (its
dependencies reused from this one), runs the demo corpus, an audit and a receipt check from
another directory, with its plans found as package data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd[:4])} ... exited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.prefect  # its audit is a Prefect flow, run by the installed CLI against the session's server
def test_wheel_installs_and_runs_from_another_directory(tmp_path: Path) -> None:
    dist, venv, work = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    work.mkdir()
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(ROOT)], tmp_path)
    wheel = next(dist.glob("voxledger-*.whl"))
    _run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)  # type: ignore[attr-defined]
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # reuse the installed dependencies
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps", str(wheel)], tmp_path)
    env = {**os.environ, "VOXLEDGER_HOME": str(work / "home"), "PYTHONNOUSERSITE": "1"}
    where = _run([str(venv / "bin" / "python"), "-c", "import voxledger, voxledger.schemas; print(voxledger.__file__)"], work, env)
    assert where.startswith(str(site)), f"voxledger imported from {where}, not from the installed wheel"
    cli = str(venv / "bin" / "voxledger")
    _run([cli, "demo", "corpus", str(work / "corpus"), "--size", "tiny"], work, env)
    audit = json.loads(_run([cli, "audit", str(work / "corpus"), "--json"], work, env))  # default policy: package data
    assert audit["verdict"] == "pass"
    (work / "receipt.json").write_text(_run([cli, "receipt", "show", audit["receipt"]], work, env))
    _run([cli, "receipt", "validate", str(work / "receipt.json")], work, env)
