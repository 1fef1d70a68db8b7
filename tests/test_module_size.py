"""No module grows past 500 lines without saying why in its docstring (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "voxledger"
LIMIT = 500
REASON = "Longer than 500 lines on purpose:"


def test_every_long_module_gives_its_reason() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) >= 150
    long = {p.relative_to(PACKAGE).as_posix(): p for p in files if len(p.read_text().splitlines()) > LIMIT}
    unexplained = [name for name, p in long.items() if REASON not in " ".join((ast.get_docstring(ast.parse(p.read_text())) or "").split())]
    assert not unexplained, f"modules over {LIMIT} lines with no '{REASON} ...' paragraph in their docstring: {unexplained}"
