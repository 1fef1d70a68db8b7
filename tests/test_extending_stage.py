"""docs/extending.md adds a new stage (its own plan field, receipt kind and command) in three files.

The page's three snippets are written into a copy of the package; the test checks that exactly
three files differ from the checkout, regenerates what is generated, and then runs the stage as a
user would, in fresh processes importing the copy: ``pipeline stages`` lists it, ``pipeline run``
dispatches it after the audit (its plan field read, its verdict stopping the run with its receipt
recorded), ``voxledger balance`` runs it on its own, ``reproduce`` re-runs its receipt and
``deploy`` registers its flow, loaded from its entrypoint the way a worker loads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.test_extending_snippets import snippets

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.prefect

NEW_FILES = {"voxledger/schemas/balance.py": "stage_schemas", "voxledger/tasks/stages/balance.py": "stage_module"}
TABLE = "voxledger/schemas/stages.py"


def _digests(src: Path) -> dict[str, str]:
    return {p.relative_to(src).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(src.rglob("*")) if p.is_file()}


def _add_the_stage(src: Path) -> None:
    """What the page says to do: two new files and one row after the audit's."""
    code = snippets()
    for path, name in NEW_FILES.items():
        (src / path).write_text(code[name])
    table = (src / TABLE).read_text()
    row = "".join(f"    {line}\n" if line else "\n" for line in code["stage_row"].rstrip().splitlines()[1:]).rstrip("\n") + ",\n"
    audit = table.index('        name="audit",')
    end = table.index("\n    ),\n", audit) + len("\n    ),\n")
    (src / TABLE).write_text(table[:end] + row + table[end:])


def _copy_with_the_stage(tmp: Path) -> Path:
    src = tmp / "src"
    shutil.copytree(ROOT / "voxledger", src / "voxledger", ignore=shutil.ignore_patterns("__pycache__"))
    (src / "docs").mkdir()
    before = _digests(src)
    _add_the_stage(src)
    after = _digests(src)
    touched = sorted(p for p in {*before, *after} if before.get(p) != after.get(p))
    assert touched == sorted([*NEW_FILES, TABLE]), touched  # three files, nothing else
    return src


def test_a_new_stage_runs_everywhere_the_table_reaches(tmp_path: Path, corpus: Path, prefect_api: str) -> None:
    from tests.flows.conftest import write_plans

    src = _copy_with_the_stage(tmp_path)
    home = tmp_path / "home"
    env = {**os.environ, "PYTHONPATH": str(src), "VOXLEDGER_HOME": str(home)}

    def vox(*args: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "voxledger.cli", *args], cwd=src, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == rc, (args, proc.stdout[-3000:], proc.stderr[-3000:])
        return proc

    # what is generated from the code
    vox("receipt", "schemas", "--write")
    assert json.loads((src / "voxledger/schemas/json/balance.v1.schema.json").read_text())["properties"]["kind"]["const"] == "balance"
    subprocess.run([sys.executable, "-m", "voxledger.docgen", "--write"], cwd=src, env=env, check=True, timeout=300)
    assert "| `balance` | `balance` (`voxledger/flows/made.py:balance`)" in (src / "docs/pipeline-stages.md").read_text()

    plans = write_plans(tmp_path / "plans")
    pipe = yaml.safe_load((plans / "pipeline.yaml").read_text())
    (plans / "pipeline.yaml").write_text(yaml.safe_dump({**pipe, "balance_policy": "balance.yaml"}))
    (plans / "balance.yaml").write_text("kind: balance_policy\nmin_clips: 1000\n")  # more clips than the corpus has
    (plans / "balance-ok.yaml").write_text("kind: balance_policy\nmin_clips: 1\n")

    # `pipeline stages`: right after the audit, its plan field named by the plan
    rows = json.loads(vox("pipeline", "stages", str(plans / "pipeline.yaml"), "--json").stdout)
    assert [r["stage"] for r in rows][:2] == ["audit", "balance"]
    balance = rows[1]
    assert balance["entrypoint"] == "voxledger/flows/made.py:balance" and balance["receipt"] == "balance"
    assert (balance["plan_field"], balance["plan_file"], balance["enabled"]) == ("balance_policy", "balance.yaml", True)

    # `pipeline run`: the stage runs after the audit and its verdict stops the pipeline, its receipt recorded
    failed = vox("pipeline", "run", str(plans / "pipeline.yaml"), "--corpus", str(corpus), rc=1)
    assert "AuditFailedError: pipeline stopped at balance: too few clips: train/spk_a" in " ".join(failed.stderr.split()), failed.stderr[
        -2000:
    ]
    pipeline_rid = re.findall(r"pipeline receipt ([0-9a-f]{64})", failed.stderr)[-1]
    record = json.loads(vox("receipt", "show", pipeline_rid).stdout)
    stages = {s["stage"]: s for s in record["stages"]}
    assert list(stages) == ["audit", "balance"] and stages["balance"]["status"] == "failed"
    shown = json.loads(vox("receipt", "show", stages["balance"]["receipt_id"]).stdout)
    assert shown["kind"] == "balance" and shown["result"]["short"]

    # `voxledger balance`: the command the row names, made from the module's `run`
    ran = json.loads(vox("balance", str(plans / "balance-ok.yaml"), "--audit-rid", stages["audit"]["receipt_id"], "--json").stdout)
    assert ran["stage"] == "balance" and not ran["cached"] and ran["summary"].endswith("short: none")

    # `reproduce`: re-run in a scratch home and compared by the module's `compare`
    reproduced = json.loads(vox("reproduce", ran["receipt"], "--json").stdout)
    assert reproduced["result"]["verdict"] == "exact", reproduced

    # `deploy`: its flow registered from its entrypoint, the way a worker loads it
    deployed = {d["name"]: d for d in json.loads(vox("deploy", str(plans / "pipeline.yaml"), "--corpus", str(corpus), "--json").stdout)}
    assert deployed["p-balance"]["entrypoint"] == "voxledger/flows/made.py:balance" and deployed["p-balance"]["id"]
