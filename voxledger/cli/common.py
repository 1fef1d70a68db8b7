"""What every command module shares: the home, JSON output, running a flow, resolving ids, plan paths.

Command modules import from here and from nothing else in ``voxledger.cli``; the package's
``__init__`` attaches their commands to ``main``. So any command module imports first, alone.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from importlib import resources
from pathlib import Path
from typing import Any

import click


def plans_dir() -> Path:
    """The bundled plans (package data ``voxledger/plans``), wherever the package is installed."""
    return Path(str(resources.files("voxledger") / "plans"))


def open_home(ctx: click.Context) -> Any:
    """The Home for this invocation (created on first use)."""
    from voxledger.stores.home import Home

    obj = ctx.find_root().obj
    if "home_obj" not in obj:
        obj["home_obj"] = Home(obj["home"], lock_timeout_s=obj["lock_timeout"])
    return obj["home_obj"]


def run_flow(ctx: click.Context, fn: Any, *args: Any, quiet: bool = False, **kwargs: Any) -> Any:
    """Run a Prefect flow for this home (see ``flows.runtime``) with a live progress line.

    Every command that does work goes through here, so all of it shows in Prefect's run history.
    """
    from rich.console import Console

    from voxledger.flows.progress import reporting
    from voxledger.flows.runtime import prefect_session

    home = open_home(ctx)
    console = Console(stderr=True)
    with console.status("starting", spinner="dots") if not quiet else nullcontext() as status:

        def show(message: str) -> None:
            if status is not None:
                status.update(message)

        show("connecting to the Prefect server")
        with prefect_session(home.root), reporting(show):
            return fn(*args, **kwargs)


def emit_json(value: Any) -> None:
    """Print JSON for scripts (stable key order)."""
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def resolve_receipt(ctx: click.Context, ref: str) -> str:
    """The full digest of a receipt or artifact named by a unique prefix (or whole)."""
    from voxledger.stores.lineage import resolve_node

    with open_home(ctx).catalog.connect(read_only=True) as con:
        return resolve_node(con, ref)


def interval_cell(iv: dict[str, Any] | None, signed: bool = False) -> str:
    """An interval cell: mean [low, high], or the mean and why there is no interval."""
    if iv is None:
        return "-"
    f = "{:+.3f}" if signed else "{:.3f}"
    if iv.get("low") is None or iv.get("high") is None:
        return f"{f.format(iv['mean'])} [no CI]"
    return f"{f.format(iv['mean'])} [{f.format(iv['low'])}, {f.format(iv['high'])}]"


def print_stages(stages: Any) -> None:
    """The stage table of a pipeline run."""
    from rich.console import Console
    from rich.table import Table

    table = Table("stage", "status", "cached", "wall s", "receipt", title="pipeline")
    for s in stages:
        table.add_row(s.stage, s.status, "yes" if s.cached else "no", f"{s.wall_s:.1f}", (s.receipt_id or "-")[:16])
    Console().print(table)
