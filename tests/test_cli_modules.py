"""The CLI is a package without cycles: every command module imports first, alone, in a fresh
interpreter, and the package attaches every module's commands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[1] / "voxledger" / "cli"
MODULES = sorted(p.stem for p in CLI.glob("*.py") if p.stem not in ("__init__", "__main__"))


def test_module_list_is_complete() -> None:
    assert len(MODULES) == 17 and "common" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_each_cli_module_imports_first(module: str) -> None:
    code = f"import voxledger.cli.{module} as m; print(len(getattr(m, 'COMMANDS', ())))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_every_module_command_is_attached() -> None:
    import importlib

    from voxledger.cli import main

    attached = set(main.commands.values())
    for module in MODULES:
        for command in getattr(importlib.import_module(f"voxledger.cli.{module}"), "COMMANDS", ()):
            assert command in attached, f"{module}.{command.name} is not attached to voxledger"
