"""Layers point one way: schemas <- settings <- stores <- tasks <- flows <- hosting <- cli;
schemas/stores never import prefect; nothing below the CLI imports it.

``hosting/`` runs flows in processes (the home's Prefect server, its resident flow runner, the
Prefect session of an entry point); it names flows by dotted path and never the other way round.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "voxledger"
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
    "flows": ("voxledger.hosting", "voxledger.cli", "voxledger.bench", "voxledger.bench_sections"),
    "hosting": ("voxledger.cli", "voxledger.bench", "voxledger.bench_sections", "voxledger.dashboards"),
    "bench_sections": ("voxledger.cli",),
    "bench": ("voxledger.cli",),
}

DIRECTION = (
    "schemas",
    "postinstall",
    "settings",
    "stores",
    "dashboards",
    "tasks",
    "flows",
    "hosting",
    "bench_sections",
    "bench",
    "cli",
    "docgen",
)
"""Every top-level package and module of ``voxledger``, lowest first: each imports only entries
before it (the CLI sits above everything it drives; ``docgen`` writes docs/cli.md from the CLI)."""


def _imports(path: Path) -> list[str]:
    """Every module an import statement in ``path`` names, module-level or inside a function;
    ``from a import b`` counts as ``a`` and ``a.b`` (``b`` may be a module), relative imports
    resolved against the file's package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = path.resolve().relative_to(ROOT).with_suffix("").parts[:-1]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            names.append(base)
            names += [f"{base}.{a.name}" for a in node.names if a.name != "*"]
    return names


def _files(layer: str) -> list[Path]:
    """The source files of a top-level package (``flows``) or module (``bench``) of voxledger."""
    module = PACKAGE / f"{layer}.py"
    return [module] if module.is_file() else sorted((PACKAGE / layer).rglob("*.py"))


def test_imports_point_one_way() -> None:
    checked = 0
    problems = []
    for layer, banned in FORBIDDEN.items():
        for path in _files(layer):
            checked += 1
            hits = {n for n in _imports(path) if any(n == b or n.startswith(b + ".") for b in banned)}
            problems += [f"{path.relative_to(ROOT)} imports {n}" for n in sorted(hits) if n.rpartition(".")[0] not in hits]
    assert checked >= 100, f"only {checked} files checked: is the layout broken?"
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
    """Tasks, flows, hosting, the CLI and dashboards ask the catalog through functions in ``stores/``, the
    user's own SQL of ``voxledger query`` included (``stores/sandbox.py``)."""
    import re

    pattern = re.compile(r"\.execute\(")
    allowed: dict[str, int] = {}
    found: dict[str, int] = {}
    for layer in ("tasks", "flows", "hosting", "cli", "dashboards"):
        for path in sorted((ROOT / "voxledger" / layer).rglob("*.py")):
            n = len(pattern.findall(path.read_text()))
            if n:
                found[path.relative_to(ROOT).as_posix()] = n
    assert found == allowed, f"SQL outside stores/: {found}"


@cache
def _package_graph() -> dict[str, set[str]]:
    """Which top-level entries of ``voxledger`` (``DIRECTION``'s names) each one imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        top = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if top == "__init__":
            continue
        targets = graph.setdefault(top, set())
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "voxledger" and len(parts) > 1 and parts[1] != top and parts[1] in DIRECTION:
                targets.add(parts[1])
    return graph


def test_every_top_level_entry_has_a_place() -> None:
    """A new top-level package or module gets its place in ``DIRECTION`` (plans/ is data, no code)."""
    found = set(_package_graph())
    assert found == set(DIRECTION), f"not in DIRECTION: {sorted(found - set(DIRECTION))}; gone: {sorted(set(DIRECTION) - found)}"


def test_packages_import_in_one_direction() -> None:
    """Each top-level entry imports only entries below it in ``DIRECTION``."""
    graph = _package_graph()
    assert sum(map(len, graph.values())) >= 20, graph
    rank = {name: i for i, name in enumerate(DIRECTION)}
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if rank[b] > rank[a])
    assert not upward, "imports against DIRECTION:\n" + "\n".join(upward)


def test_package_import_graph_has_no_cycle() -> None:
    """No two top-level entries import each other, directly or through others."""
    graph = _package_graph()
    cycles: list[str] = []
    done: set[str] = set()

    def visit(node: str, trail: list[str]) -> None:
        if node in trail:
            cycles.append(" -> ".join([*trail[trail.index(node) :], node]))
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*trail, node])
        done.add(node)

    for start in sorted(graph):
        visit(start, [])
    assert not cycles, "import cycles between packages:\n" + "\n".join(sorted(set(cycles)))
