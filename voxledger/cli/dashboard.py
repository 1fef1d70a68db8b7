"""``voxledger dashboard``: render the home's static HTML dashboard from the catalog."""

from __future__ import annotations

from pathlib import Path

import click

from voxledger.cli.common import cli_console, open_home

console = cli_console()


@click.command("dashboard")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=Path("dashboard.html"), show_default=True)
@click.pass_context
def dashboard(ctx: click.Context, output: Path) -> None:
    """Write a static HTML dashboard (no network when viewed) from the catalog.

    Example: voxledger dashboard -o demo/dashboard.html
    """
    from voxledger.dashboards.report import build_dashboard

    home = open_home(ctx, existing=True)
    console.print(f"wrote {build_dashboard(home.catalog, output, blobs=home.blobs.get_bytes)}")


COMMANDS = (dashboard,)
