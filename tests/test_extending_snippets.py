"""docs/extending.md's code blocks marked ``# snippet: <name>`` run as written."""

from __future__ import annotations

import inspect
import re
import sys
import types
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def snippets() -> dict[str, str]:
    """Every ``python`` block of the page whose first line is ``# snippet: <name>``."""
    blocks = re.findall(r"```python\n(# snippet: (\w+)\n.*?)```", DOC.read_text(), flags=re.S)
    return {name: code for code, name in blocks}


def _module(name: str, code: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The snippet executed as an importable module (the registries import by module path)."""
    module = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, name, module)
    exec(compile(code, f"{DOC}:{name}", "exec"), module.__dict__)  # noqa: S102  (the page's own code)
    return module


def test_the_page_has_its_three_snippets() -> None:
    assert sorted(snippets()) == ["backend", "metric", "stage_module", "stage_row", "stage_schemas"]


def test_the_metric_snippet_registers_a_metric_gate_rules_can_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from voxledger.tasks.metrics import registry

    try:
        _module("snippet_metric", snippets()["metric"], monkeypatch)
        assert "peak" in registry.EXTRACTORS and "peak_abs" in registry.rule_metric_ids()
        assert registry.shown_metrics(["peak_abs", "duration_s"]) == ["peak_abs"]
    finally:
        registry.unregister("peak")
    assert "peak" not in registry.EXTRACTORS


def test_the_backend_skeleton_satisfies_the_protocol_and_says_what_it_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    from voxledger.schemas.errors import BackendCapabilityError
    from voxledger.tasks.backends import base

    _module("snippet_backend", snippets()["backend"], monkeypatch)
    monkeypatch.setitem(base.BACKENDS, "echo", "snippet_backend:EchoBackend")
    backend = base.get_backend("echo")  # type: ignore[arg-type]
    members = [n for n, v in vars(base.Backend).items() if inspect.isfunction(v) and not n.startswith("_")]
    assert len(members) >= 18 and all(callable(getattr(backend, m, None)) for m in members)
    assert backend.identity() == {"family": "echo", "version": "0"} and backend.inference_settings()[0] == 24000
    with pytest.raises(BackendCapabilityError, match="backend echo cannot be packaged yet"):
        backend.deliverables()


def test_the_stage_snippets_compile_and_the_row_validates() -> None:
    """The quick half; tests/test_extending_stage.py runs the stage in a copy of the package."""
    from voxledger.schemas.stages import StageRow

    for name in ("stage_schemas", "stage_module"):
        compile(snippets()[name], f"{DOC}:{name}", "exec")
    row = eval(snippets()["stage_row"].split("\n", 1)[1], {"StageRow": StageRow})  # noqa: S307  (the page's own code)
    assert (row.name, row.plan_field, row.cli, row.receipt) == ("balance", "balance_policy", "balance", "balance")
