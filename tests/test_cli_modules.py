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
    assert len(MODULES) == 33 and "common" in MODULES


def test_one_module_per_noun() -> None:
    """``voxledger <noun>`` lives in ``cli/<noun>.py``, alone; the only exception is the backend
    command groups, which ``cli/backends.py`` loads from each backend's ``COMMAND_GROUPS``."""
    from voxledger.cli import COMMAND_MODULES

    for module, names in COMMAND_MODULES.items():
        if module == "backends":
            continue
        assert names == (module,), f"cli/{module}.py holds {names}: one noun per module"
    assert len(COMMAND_MODULES) == 32


@pytest.mark.parametrize("module", MODULES)
def test_each_cli_module_imports_first(module: str) -> None:
    code = f"import voxledger.cli.{module} as m; print(len(getattr(m, 'COMMANDS', ())))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_every_module_command_is_attached() -> None:
    """The lazy map names exactly each module's commands, and ``main`` resolves every one of them."""
    import importlib

    import click

    from voxledger.cli import COMMAND_MODULES, main

    ctx = click.Context(main, info_name="voxledger")
    with_commands = {m for m in MODULES if getattr(importlib.import_module(f"voxledger.cli.{m}"), "COMMANDS", ())}
    assert set(COMMAND_MODULES) == with_commands
    for module in with_commands:
        commands = importlib.import_module(f"voxledger.cli.{module}").COMMANDS
        assert COMMAND_MODULES[module] == tuple(c.name for c in commands), f"COMMAND_MODULES[{module!r}] is stale"
        for command in commands:
            assert main.get_command(ctx, command.name) is command, f"{module}.{command.name} is not attached to voxledger"
    assert main.list_commands(ctx) == sorted(c for names in COMMAND_MODULES.values() for c in names)
