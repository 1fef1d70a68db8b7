"""``voxledger catalog``: rebuild the DuckDB index from the store; list its migrations."""

from __future__ import annotations

import click

from voxledger.cli.common import cli_console, open_home

console = cli_console()


@click.group()
def catalog() -> None:
    """The DuckDB catalog: rebuild from the store, list migrations."""


@catalog.command("rebuild")
@click.pass_context
def catalog_rebuild(ctx: click.Context) -> None:
    """Recreate the catalog from receipts in the store alone.

    Example: voxledger catalog rebuild
    """
    report = open_home(ctx).rebuild()
    click.echo(f"rebuilt catalog from {report.indexed} receipts")
    if report.skipped:
        rid, why = report.skipped[0]
        click.echo(
            f"warning: {len(report.skipped)} receipt(s) left out, their own bytes missing or damaged (quarantined copies "
            f"stay in store/quarantine): e.g. {rid}: {why[:200]}",
            err=True,
        )
    if report.unprojected:
        click.echo(
            f"warning: {len(report.unprojected)} receipt(s) indexed without their typed rows, an output blob they are "
            f"read from being missing or damaged: e.g. {report.unprojected[0]}; `voxledger store verify` lists what is gone",
            err=True,
        )


@catalog.command("migrations")
@click.pass_context
def catalog_migrations(ctx: click.Context) -> None:
    """List applied schema migrations.

    Example: voxledger catalog migrations
    """
    for name in open_home(ctx).catalog.migrations():
        click.echo(name)


COMMANDS = (catalog,)
