"""The stage table (``voxledger/schemas/stages.py``) is pure data, every row of it holds, and nothing
outside a short allow-list spells a stage name."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from pathlib import Path

import click
import pytest
from pydantic import BaseModel

from voxledger.schemas.pipeline import PipelinePlan
from voxledger.schemas.registry import RECEIPT_TYPES
from voxledger.schemas.stages import STAGE_ROWS, StageRow, pipeline_rows, resolve, rows_writing
from voxledger.tasks.stages.contract import CONTRACT

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "voxledger"
TABLE = PACKAGE / "schemas" / "stages.py"

NOT_REPRODUCED = {"export_packets", "sweep"}
"""Stages ``voxledger reproduce`` does not re-run: packet sets (blinded with a fresh secret by design;
the row says so) and sweeps (each member is re-run on its own training receipt)."""

ALLOWED: dict[str, str] = {
    "schemas/stages.py": "the table itself",
    "tasks/stages/": "the stage modules: each stage's own contract (train.py tells its two stages apart)",
    "flows/": "the flows: each stage's flow is named by its stage, and train.py picks its task by the plan",
    "cli/__init__.py": "COMMAND_MODULES lists the commands, the table's CLI nouns among them",
    "cli/promote.py": "defines the `promote` command, the CLI noun the table names",
    "stores/capabilities.py": "the capability matrix labels its rows as `voxledger capabilities` prints them "
    "(training split into train_full and train_lora, listening); they are not the table's stages",
    "tasks/packaging/assemble.py": "'promote' and 'evaluate' as verbs in an error message, not stage names",
}
"""Where a stage name may be spelled as a string literal, and why (paths under voxledger/)."""


def _rows() -> list[StageRow]:
    assert len(STAGE_ROWS) == 10, [r.name for r in STAGE_ROWS]  # 8 pipeline stages, equivalence and sweep
    return list(STAGE_ROWS)


def test_names_are_unique_and_the_pipeline_is_the_rows_with_inputs() -> None:
    from voxledger.flows import stages

    names = [r.name for r in _rows()]
    assert len(set(names)) == len(names)
    assert [s.name for s in stages.STAGES] == [r.name for r in pipeline_rows()] == list(stages.stage_names())
    assert len(stages.STAGES) == 8


@pytest.mark.parametrize("row", STAGE_ROWS, ids=lambda r: r.name)
def test_every_row_resolves(row: StageRow) -> None:
    kinds = {t.model_fields["kind"].default for t in RECEIPT_TYPES}
    assert row.receipt in kinds
    flow, task = resolve(row.flow), resolve(row.task)
    assert callable(flow.fn) and flow.name and callable(task)  # a Prefect flow; a task, or the function calling its tasks
    assert row.module.startswith("voxledger.tasks.stages.")
    module = resolve(f"{row.module}:__name__")
    assert module == row.module
    if len(rows_writing(row.receipt)) > 1:  # stages sharing a receipt kind share a module that tells them apart
        assert {r.module for r in rows_writing(row.receipt)} == {row.module}
        assert callable(resolve(f"{row.module}:stage_of"))
    if row.plan_model is not None:
        assert issubclass(resolve(row.plan_model), BaseModel)
    for plan_field in (row.plan_field, row.switch):
        assert plan_field is None or plan_field in PipelinePlan.model_fields
    assert row.plan_field is None or row.plan_model is not None


@pytest.mark.parametrize("row", STAGE_ROWS, ids=lambda r: r.name)
def test_every_stage_module_holds_the_whole_contract(row: StageRow) -> None:
    """run, inputs (the row's), verdict, rerun_arguments, compare, summary: each a documented function."""
    module = importlib.import_module(row.module)
    assert len(CONTRACT) == 6
    for name in CONTRACT:
        found = getattr(module, row.inputs if name == "inputs" else name, None)
        assert callable(found), f"{row.module} lacks {name}"
        assert (found.__doc__ or "").strip(), f"{row.module}.{name} has no docstring"
    if row.pipeline:
        assert row.inputs != "inputs" or module.inputs.__name__ != "not_in_pipeline", row.name


@pytest.mark.parametrize("row", STAGE_ROWS, ids=lambda r: r.name)
def test_every_cli_noun_exists_and_runs_the_rows_flow(row: StageRow) -> None:
    from voxledger.cli import main

    command: click.Command | None = main
    for word in row.cli.split():
        assert isinstance(command, click.Group), f"{row.name}: `voxledger {row.cli}`: {word!r} under a command that is not a group"
        command = command.get_command(click.Context(command), word)
        assert command is not None, f"{row.name}: `voxledger {row.cli}` has no {word!r}"
    assert command.callback is not None
    assert f'"{row.flow}"' in inspect.getsource(command.callback), f"`voxledger {row.cli}` does not run {row.flow}"


def test_every_row_is_reproduced_or_says_why_not() -> None:
    from voxledger.schemas.reproduction import REPRODUCIBLE_KINDS

    assert {r.name for r in _rows() if r.not_rerun is not None} == NOT_REPRODUCED
    for r in _rows():
        assert (r.not_rerun is None) == (r.receipt in REPRODUCIBLE_KINDS), r.name
        assert r.not_rerun is None or len(r.not_rerun) > 40, f"{r.name}: say why its receipts are not re-run"


def test_every_row_is_in_the_docs() -> None:
    text = (ROOT / "docs" / "pipeline-stages.md").read_text()
    missing = [r.name for r in _rows() if f"| `{r.name}`" not in text]
    assert not missing


def test_the_table_imports_nothing_outside_schemas() -> None:
    tree = ast.parse(TABLE.read_text())
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append(node.module or "")
    assert len(names) >= 4, names
    outside = [
        n
        for n in names
        if n.split(".")[0] not in sys.stdlib_module_names
        and n != "__future__"
        and n != "pydantic"
        and not n.startswith("voxledger.schemas.")
    ]
    assert not outside, f"voxledger/schemas/stages.py imports {outside}"


def _allowed(rel: str) -> bool:
    return any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in ALLOWED)


def test_no_module_outside_the_allow_list_spells_a_stage_name() -> None:
    """A stage name that is also a receipt kind (audit, package, equivalence: one name by design) may
    be spelled where receipts are dispatched on their kind, so only the other names are looked for."""
    kinds = {r.receipt for r in STAGE_ROWS}
    names = {r.name for r in STAGE_ROWS} - kinds
    assert len(names) == 6, names
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 150
    problems = []
    for path in files:
        rel = path.relative_to(PACKAGE).as_posix()
        if _allowed(rel):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and node.value in names:
                problems.append(f"voxledger/{rel}:{node.lineno} spells stage {node.value!r}")
    assert not problems, "\n".join(problems)
    unused = [a for a in ALLOWED if not (PACKAGE / a).exists()]
    assert not unused, f"allow-list entries naming nothing: {unused}"
