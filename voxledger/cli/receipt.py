"""``voxledger receipt``: show, validate, and the generated JSON Schemas of receipt kinds."""

from __future__ import annotations

from pathlib import Path

import click

from voxledger.cli.common import cli_console, emit_json, open_home, resolve_receipt
from voxledger.schemas.errors import ReceiptError

console = cli_console()


@click.group()
def receipt() -> None:
    """Receipts: show, validate, generate JSON Schemas."""


@receipt.command("show")
@click.argument("receipt_id")
@click.pass_context
def receipt_show(ctx: click.Context, receipt_id: str) -> None:
    """Print a receipt document (verified against its id and validated).

    Example: voxledger receipt show 3fa2...
    """
    home = open_home(ctx, existing=True)
    rid = resolve_receipt(ctx, receipt_id)
    emit_json(home.receipts.read_document(rid))


@receipt.command("validate")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def receipt_validate(path: Path) -> None:
    """Validate a receipt JSON file against its kind's schema, listing every problem.

    Example: voxledger receipt validate receipt.json
    """
    from voxledger.schemas.limits import load_json
    from voxledger.stores.receipts import validate_document

    doc = load_json(path.read_bytes(), str(path), ReceiptError)
    model = validate_document(doc, source=str(path))
    click.echo(f"ok: {path} is a valid {model.kind} receipt")  # type: ignore[attr-defined]


@receipt.command("schemas")
@click.option("--write", is_flag=True, help="Write the generated schemas into schemas/json/.")
def receipt_schemas(write: bool) -> None:
    """Check (or write) the JSON Schemas generated from the receipt models.

    Example: voxledger receipt schemas --write
    """
    from voxledger.schemas.registry import schema_files
    from voxledger.stores.receipts import SCHEMA_DIR

    files = schema_files()
    stale = [n for n, text in files.items() if not (SCHEMA_DIR / n).is_file() or (SCHEMA_DIR / n).read_text() != text]
    extra = sorted(p.name for p in SCHEMA_DIR.glob("*.schema.json") if p.name not in files)
    if write:
        for name in stale:
            (SCHEMA_DIR / name).write_text(files[name])
        for name in extra:
            (SCHEMA_DIR / name).unlink()
        click.echo(f"wrote {len(stale)} schema file(s), removed {len(extra)}")
    elif stale or extra:
        raise click.ClickException(f"schemas out of date: {stale + extra}; run `voxledger receipt schemas --write`")
    else:
        click.echo(f"ok: {len(files)} schema files match the models")


COMMANDS = (receipt,)
