"""``voxledger export``: receipts in formats other tools read (in-toto statements)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from voxledger.cli.common import cli_console, open_home, resolve_receipt

console = cli_console()


@click.group("export")
def export() -> None:
    """Export provenance in standard formats."""


@export.command("in-toto")
@click.argument("receipt_id")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write here (never overwritten).")
@click.pass_context
def export_in_toto(ctx: click.Context, receipt_id: str, output: Path | None) -> None:
    """Write an in-toto Statement v1 (subjects = outputs, predicate = the receipt).

    Example: voxledger export in-toto 3fa2c1d9 -o statement.json
    """
    from voxledger.stores.attest import in_toto_statement

    rid = resolve_receipt(ctx, receipt_id)
    statement = in_toto_statement(rid, open_home(ctx, existing=True).receipts.read_document(rid))
    text = json.dumps(statement, indent=2, sort_keys=True)
    if output is None:
        click.echo(text)
    else:
        try:
            with open(output, "x", encoding="utf-8") as f:
                f.write(text + "\n")
        except FileExistsError as exc:
            raise click.BadParameter(
                f"{output} exists; statements are never overwritten: choose a new file", param_hint="--output"
            ) from exc
        click.echo(f"wrote {output}")


COMMANDS = (export,)
