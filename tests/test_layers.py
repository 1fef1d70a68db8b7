"""Layers point one way: schemas <- settings <- stores <- tasks <- flows; schemas/stores never import prefect."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "schemas": (
        "voxledger.settings",
        "voxledger.stores",
        "voxledger.tasks",
        "voxledger.flows",
        "voxledger.dashboards",
        "prefect",
        "duckdb",
    ),
    "stores": ("voxledger.tasks", "voxledger.flows", "voxledger.dashboards", "prefect"),
    "tasks": ("voxledger.flows", "voxledger.dashboards"),
    "dashboards": ("voxledger.flows", "voxledger.tasks"),
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_imports_point_one_way() -> None:
    checked = 0
    problems = []
    for layer, banned in FORBIDDEN.items():
        for path in sorted((ROOT / layer).rglob("*.py")):
            checked += 1
            for name in _imports(path):
                if any(name == b or name.startswith(b + ".") for b in banned):
                    problems.append(f"{path.relative_to(ROOT)} imports {name}")
    assert checked >= 10, f"only {checked} files checked: is the layout broken?"
    assert not problems, "\n".join(problems)


def test_components_never_import_a_stage() -> None:
    """``tasks/stages/`` holds the receipt-writing stages (one module per CLI noun); everything else
    under ``tasks/`` is a component they use, as torchtune keeps recipes apart from its library."""
    stages = sorted((ROOT / "tasks" / "stages").glob("*.py"))
    assert len(stages) >= 12, [p.name for p in stages]
    problems = []
    for path in sorted((ROOT / "tasks").rglob("*.py")):
        if "stages" in path.relative_to(ROOT / "tasks").parts:
            continue
        problems += [f"{path.relative_to(ROOT)} imports {n}" for n in _imports(path) if n.startswith("voxledger.tasks.stages")]
    assert not problems, "\n".join(problems)


def test_settings_import_only_schemas() -> None:
    """``voxledger.settings`` (every VOXLEDGER_* variable) sits just above ``schemas``: ``stores``
    and everything higher may read settings, so settings import nothing of voxledger but schemas."""
    names = _imports(ROOT / "voxledger" / "settings.py")
    voxledger = [n for n in names if n == "voxledger" or n.startswith("voxledger.")]
    assert voxledger, "settings.py imports nothing from voxledger: is the layout broken?"
    problems = [n for n in names if (n in voxledger and not n.startswith("voxledger.schemas")) or n.split(".")[0] in ("prefect", "duckdb")]
    assert not problems, f"voxledger/settings.py imports {problems}"


def test_catalog_sql_lives_in_stores() -> None:
    """Tasks, flows, the CLI and dashboards ask the catalog through functions in ``stores/``, the
    user's own SQL of ``voxledger query`` included (``stores/sandbox.py``)."""
    import re

    pattern = re.compile(r"\.execute\(")
    allowed: dict[str, int] = {}
    found: dict[str, int] = {}
    for layer in ("tasks", "flows", "cli", "dashboards"):
        for path in sorted((ROOT / "voxledger" / layer).rglob("*.py")):
            n = len(pattern.findall(path.read_text()))
            if n:
                found[path.relative_to(ROOT).as_posix()] = n
    assert found == allowed, f"SQL outside stores/: {found}"
