"""Backends are a closed protocol: only ``voxledger/tasks/backends/<name>/`` knows a backend by name.

Every other module reaches a backend through the registry (`get_backend(plan.backend)`,
``COMMAND_GROUPS``). The scan parses each module with ``ast`` and flags imports of a backend
package, dotted-path strings into one, and a registered name used *as a backend*: under a
``backend`` key, as a ``backend=`` keyword or default, compared with ``.backend``, as a subscript
key, as the keys of a per-backend table, or as a ``Literal`` of backend names. Other uses of the
same word are not backend uses: the demo corpus size ``"tiny"`` (``CorpusSize``, ``--size``) is a
value among other sizes, so it is not flagged.
"""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

from voxledger.schemas.training import BackendName
from voxledger.tasks.backends.base import BACKENDS, Backend, backend_location

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "voxledger"
NAMES = frozenset(BACKENDS)
# Modules that must name backends, and why; each entry must still be needed (checked below).
ALLOWED = {
    "voxledger/schemas/training.py": "BackendName and DEFAULT_BACKEND: the closed registry as the plan schema sees it",
    "voxledger/tasks/backends/base.py": "BACKENDS and COMMAND_GROUPS: the registry itself",
}
MIN_SCANNED = 180  # 186 modules outside the backend packages when this test was written


def _is_name(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value in NAMES


def _mentions_backend(node: ast.AST) -> bool:
    """A name or attribute spelled with 'backend' (``backend``, ``plan.backend``, ``backend_name``)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "backend" in name.lower()


def _backend_module(module: str) -> bool:
    return any(module == f"voxledger.tasks.backends.{n}" or module.startswith(f"voxledger.tasks.backends.{n}.") for n in NAMES)


def _elements(node: ast.AST) -> list[ast.AST]:
    return list(node.elts) if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]


def findings(source: str, package: str = "") -> list[tuple[int, str]]:
    """(line, what) for every place ``source`` (a module of ``package``) names a backend outside the registry."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            out += [(line, f"imports {a.name}") for a in node.names if _backend_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            hit = next((t for t in (base, *(f"{base}.{a.name}" for a in node.names)) if _backend_module(t)), None)
            out += [(line, f"imports {hit}")] if hit else []
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _backend_module(node.value.partition(":")[0]):
            out.append((line, f"dotted path {node.value!r}"))
        elif isinstance(node, ast.Dict):
            pairs = list(zip(node.keys, node.values, strict=True))
            out += [(line, "'backend' key") for k, v in pairs if isinstance(k, ast.Constant) and k.value == "backend" and _is_name(v)]
            if pairs and all(_is_name(k) for k, _ in pairs):
                out.append((line, "table keyed by backend names"))
        elif isinstance(node, ast.keyword) and node.arg and "backend" in node.arg.lower() and _is_name(node.value):
            out.append((line, f"keyword {node.arg}="))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_mentions_backend(s) for s in sides) and any(_is_name(e) for s in sides for e in _elements(s)):
                out.append((line, "comparison with a backend"))
        elif isinstance(node, ast.Subscript):
            if _is_name(node.slice):
                out.append((line, "subscript key"))
            elif isinstance(node.value, ast.Name) and node.value.id == "Literal" and all(_is_name(e) for e in _elements(node.slice)):
                out.append((line, "Literal of backend names"))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _is_name(node.value) and any(_mentions_backend(t) for t in targets):
                out.append((line, "assignment to a backend"))
        elif isinstance(node, ast.arguments):
            args = [*node.posonlyargs, *node.args, *node.kwonlyargs]
            defaults = [None] * (len(node.posonlyargs) + len(node.args) - len(node.defaults)) + [*node.defaults, *node.kw_defaults]
            out += [
                (line, f"default of {a.arg}") for a, d in zip(args, defaults, strict=True) if "backend" in a.arg.lower() and _is_name(d)
            ]
        elif isinstance(node, ast.Call) and _mentions_backend(node.func) and any(_is_name(a) for a in node.args):
            out.append((line, "backend name passed to a backend function"))
    return out


def _modules() -> list[Path]:
    inside = [PACKAGE / "tasks" / "backends" / n for n in NAMES]
    return [p for p in sorted(PACKAGE.rglob("*.py")) if not any(p.is_relative_to(d) for d in inside)]


def test_no_module_outside_a_backend_package_names_a_backend() -> None:
    modules = _modules()
    every = sorted(PACKAGE.rglob("*.py"))
    inside = [p for p in every if p not in modules]
    assert len(modules) >= MIN_SCANNED and len(modules) + len(inside) == len(every), (len(modules), len(inside))
    assert len(inside) >= 20, f"only {len(inside)} modules inside the backend packages: is the layout broken?"
    problems, needed = [], set()
    for path in modules:
        rel = path.relative_to(ROOT).as_posix()
        package = path.parent.relative_to(ROOT).as_posix().replace("/", ".")
        found = findings(path.read_text(encoding="utf-8"), package)
        if rel in ALLOWED:
            if found:
                needed.add(rel)
            continue
        problems += [f"{rel}:{line}: {what}" for line, what in found]
    assert not problems, "reach backends through the registry (get_backend, COMMAND_GROUPS):\n" + "\n".join(problems)
    assert needed == set(ALLOWED), f"allowlist entries no longer needed: {sorted(set(ALLOWED) - needed)}"


def test_the_scan_flags_every_kind_of_backend_use() -> None:
    offending = {
        "from voxledger.tasks.backends.tiny.audio import vocode": "imports",
        "import voxledger.tasks.backends.cosyvoice3.config": "imports",
        "from voxledger.tasks.backends import tiny": "imports",
        'HOOK = "voxledger.tasks.backends.tiny.backend:TinyBackend.synthesize"': "dotted path",
        'DELIVERABLES = {"tiny": {"adapter.safetensors": "adapter_weights"}}': "table keyed",
        'plan = {"name": "base", "backend": "tiny"}': "'backend' key",
        'Candidate(name="base", backend="cosyvoice3")': "keyword",
        'ok = run.backend == "tiny"': "comparison",
        'ok = backend_name in ("tiny", "other")': "comparison",
        'note = NOTES["tiny"]': "subscript",
        'Name = Literal["tiny", "cosyvoice3"]': "Literal",
        'backend: str = "tiny"': "assignment",
        'def f(x: int, backend: str = "tiny") -> None: ...': "default",
        'b = get_backend("cosyvoice3")': "backend function",
    }
    for snippet, what in offending.items():
        found = findings(snippet)
        assert len(found) == 1 and what in found[0][1], (snippet, found)
    relative = findings("from .tiny import backend", "voxledger.tasks.backends")
    assert relative and "imports voxledger.tasks.backends.tiny" in relative[0][1]


def test_the_scan_leaves_other_uses_of_the_word_alone() -> None:
    benign = """
CorpusSize = Literal["tiny", "small", "full"]
SIZES = {"tiny": {"train": 3}, "small": {"train": 40}, "full": {"train": 300}}
corpus = build_demo_corpus(out, size="tiny" if quick else "full")
audit = bench_cli_audit(work, "tiny")
label = "tiny backend synthesis (real-time factor)"
backend = get_backend(plan.backend)
"""
    assert findings(benign) == []


def test_every_registered_backend_implements_the_whole_protocol() -> None:
    members = {n for n, v in vars(Backend).items() if inspect.isfunction(v) and not n.startswith("_")}
    assert {"deliverables", "inference_settings", "component_note", "synthesis_stages", "stage_outputs", "plan_recipe"} <= members
    assert set(BACKENDS) == set(typing.get_args(BackendName))
    for name in sorted(BACKENDS):
        module, cls = backend_location(name)  # type: ignore[arg-type]
        backend_cls = getattr(__import__(module, fromlist=[cls]), cls)
        missing = sorted(m for m in members if not callable(getattr(backend_cls, m, None)))
        assert not missing, f"backend {name} lacks {missing}"
    assert len(BACKENDS) == 2
