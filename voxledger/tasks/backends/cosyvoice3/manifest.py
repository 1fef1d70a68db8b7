"""What upstream CosyVoice is, as data: `upstream_manifest.json` and a source-level check against it.

The manifest records facts read from FunAudioLLM/CosyVoice at one commit (module paths, class
and function signatures, model-folder files and yaml keys, token ids, dtypes of the released
weights, the third-party imports, and each known incompatibility with newer torch /
transformers / torchaudio and its fix). Three things are checked against it:

- a user's checkout (`check_sources`, used by ``voxledger cosyvoice3 preflight``);
- the fake tree in ``tests/fixtures/fake_cosyvoice`` (a contract test), so the fake stays an
  imitation of upstream rather than a rewrite;
- this backend, whose constants are read from here.

`check_sources` parses the files with ``ast`` (nothing is imported or executed) and compares
parameter names in order; methods are looked up through base classes defined in the same file.
"""

from __future__ import annotations

import ast
import json
from functools import cache
from pathlib import Path

from pydantic import Field

from voxledger.schemas.base import Frozen

MANIFEST_PATH = Path(__file__).with_name("upstream_manifest.json")


class ModuleFacts(Frozen):
    """Classes (method -> parameter names) and functions (-> parameter names) of one upstream file."""

    classes: dict[str, dict[str, tuple[str, ...]]]
    functions: dict[str, tuple[str, ...]]
    imports_by_name: dict[str, str] = Field(default_factory=dict)


class Incompatibility(Frozen):
    """One way upstream breaks on versions newer than its pins, and the fix."""

    id: str
    package: str | None
    from_version: str | None
    unless_installed: str | None = None
    where: str
    symptom: str
    fix: str


class UpstreamManifest(Frozen):
    """The parsed ``upstream_manifest.json``."""

    format: str
    upstream: dict[str, str]
    upstream_pins: dict[str, str]
    tested_pins: dict[str, str]
    modules: dict[str, ModuleFacts]
    tokens: dict[str, int | list[int]]
    behaviour: dict[str, object]
    model_folder: dict[str, object]
    imports: dict[str, object]
    incompatibilities: tuple[Incompatibility, ...]

    def token(self, name: str) -> int:
        value = self.tokens[name]
        if not isinstance(value, int):
            raise TypeError(f"manifest token {name!r} is a list, not an id")
        return value

    @property
    def stop_token_ids(self) -> range:
        return range(self.token("stop_ids_from"), self.token("stop_ids_to_exclusive"))

    def folder_list(self, key: str) -> tuple[str, ...]:
        value = self.model_folder[key]
        return tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)


@cache
def load_manifest() -> UpstreamManifest:
    """The manifest shipped with the backend (parsed once per process)."""
    return UpstreamManifest(**json.loads(MANIFEST_PATH.read_text(encoding="utf-8")))


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    a = fn.args
    return tuple(p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs))


def _class_methods(tree: ast.Module) -> dict[str, dict[str, tuple[str, ...]]]:
    """Methods of every class in the file, inherited ones (from classes of the same file) included."""
    defs = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    resolved: dict[str, dict[str, tuple[str, ...]]] = {}

    def methods(name: str, seen: frozenset[str] = frozenset()) -> dict[str, tuple[str, ...]]:
        if name in resolved:
            return resolved[name]
        node = defs[name]
        merged: dict[str, tuple[str, ...]] = {}
        for base in reversed(node.bases):  # the first base wins, as in the MRO of single-file chains
            if isinstance(base, ast.Name) and base.id in defs and base.id not in seen:
                merged.update(methods(base.id, seen | {name}))
        merged.update({f.name: _params(f) for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)})
        resolved[name] = merged
        return merged

    return {name: methods(name) for name in defs}


def _imported_names(tree: ast.Module) -> dict[str, str]:
    return {alias.asname or alias.name: node.module or "" for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names}


def check_module(path: Path, facts: ModuleFacts) -> list[str]:
    """Every difference between one source file and its manifest entry (empty when it fits)."""
    if not path.is_file():
        return [f"{path} is missing"]
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError) as exc:
        return [f"{path} does not parse: {exc}"]
    problems: list[str] = []
    classes = _class_methods(tree)
    for cls, wanted in facts.classes.items():
        if cls not in classes:
            problems.append(f"{path}: class {cls} is missing")
            continue
        for method, params in wanted.items():
            found = classes[cls].get(method)
            if found != params:
                problems.append(
                    f"{path}: {cls}.{method}{'(' + ', '.join(found) + ')' if found else ' is missing'}; manifest: ({', '.join(params)})"
                )
    functions = {n.name: _params(n) for n in tree.body if isinstance(n, ast.FunctionDef)}
    for fn, params in facts.functions.items():
        if functions.get(fn) != params:
            got = f"({', '.join(functions[fn])})" if fn in functions else " is missing"
            problems.append(f"{path}: {fn}{got}; manifest: ({', '.join(params)})")
    names = _imported_names(tree)
    for name, module in facts.imports_by_name.items():
        if names.get(name) != module:
            problems.append(f"{path}: {name} is not imported from {module}")
    return problems


def check_sources(checkout: Path, manifest: UpstreamManifest | None = None) -> list[str]:
    """Differences between a checkout's sources and the manifest, over every recorded file."""
    m = manifest or load_manifest()
    return [p for rel, facts in sorted(m.modules.items()) for p in check_module(checkout / rel, facts)]
