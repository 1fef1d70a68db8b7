"""``voxledger query``: read-only SQL over the catalog, bounded in time, memory and rows."""

from __future__ import annotations

import click
from rich.table import Table

from voxledger.cli.common import cli_console, emit_json, json_option, open_home

console = cli_console()


@click.command("query")
@click.argument("sql")
@json_option("the rows as JSON objects")
@click.pass_context
def query(ctx: click.Context, sql: str, as_json: bool) -> None:
    """Run one read-only SELECT against the catalog, in a sandbox with no file, network or extension access.

    Example: voxledger query "SELECT kind, count(*) FROM receipts GROUP BY kind"
    """
    from voxledger.stores.sandbox import run_query

    if not sql.strip():
        raise click.BadParameter('give a SQL statement, e.g. "SELECT kind, count(*) FROM receipts GROUP BY kind"', param_hint="SQL")
    cols, rows = run_query(open_home(ctx, existing=True).catalog, sql)
    if as_json:
        emit_json([dict(zip(cols, r, strict=True)) for r in rows])
        return
    table = Table(*cols)
    for r in rows:
        table.add_row(*(str(v) for v in r))
    console.print(table)


COMMANDS = (query,)
