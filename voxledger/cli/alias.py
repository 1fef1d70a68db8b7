"""``voxledger alias``: the history of each model line's aliases (champion, candidate)."""

from __future__ import annotations

import click
from rich.table import Table

from voxledger.cli.common import (
    cli_console,
    emit_json,
    json_option,
    open_home,
    plans_dir,
)

console = cli_console()
PLANS = plans_dir()


@click.group("alias")
def alias_group() -> None:
    """Aliases (champion, candidate, ...) of each model line: they move only through promotion receipts."""


@alias_group.command("history")
@click.argument("alias", required=False)
@click.option("--line", "line", default=None, help="Only this model line's moves (VOICE/BACKEND, e.g. joe/tiny).")
@click.option("--at", "at", default=None, help="Only the move in force at this ISO date/time (e.g. 2026-11-29T12:00:00Z).")
@json_option("the moves")
@click.pass_context
def alias_history(ctx: click.Context, alias: str | None, line: str | None, at: str | None, as_json: bool) -> None:
    """Show the append-only alias history of every model line ("what was joe/tiny's champion on date D, and why").

    ALIAS is a name (champion) or LINE:NAME (joe/tiny:champion). Each model line (a voice on a
    backend) owns its aliases; a promotion moves only its own line's.

    Example: voxledger alias history champion --line joe/tiny --at 2026-11-29T12:00:00Z
    """
    if at:
        at = _iso_time(at)
    if alias and ":" in alias:
        named, _, alias = alias.rpartition(":")
        if line not in (None, named):
            raise click.BadParameter(f"{named}:{alias} names line {named}, but --line says {line}; give one", param_hint="ALIAS")
        line = named
    from voxledger.stores.queries import alias_moves

    rows, known = alias_moves(open_home(ctx, existing=True).catalog, alias, at, line)
    pairs = [k.rpartition(":")[::2] for k in known]  # (line, alias)
    if (alias or line) and not any(line in (None, ln) and alias in (None, a) for ln, a in pairs):
        what = f"alias {alias!r}" if alias else "alias"
        raise click.ClickException(
            f"no {what}{f' in line {line}' if line else ''} in this home's history; known (LINE:ALIAS): "
            f"{', '.join(known) or 'none (no promotion recorded yet)'}"
        )
    if as_json:
        emit_json([dict(zip(("line", "alias", "target", "base", "moved_at", "reason", "receipt"), r, strict=True)) for r in rows])
        return
    table = Table("line", "alias", "target", "moved at", "reason", "receipt")
    for ln, a, t, _, m, why, rid in rows:
        table.add_row(ln, a, t[:16], str(m), why, rid[:16])
    console.print(table)


def _iso_time(text: str) -> str:
    """``text`` as an ISO 8601 time (UTC when no zone is given), or a usage error naming it."""
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise click.BadParameter(
            f"{text!r} is not an ISO date/time; give e.g. 2026-11-29 or 2026-11-29T12:00:00Z", param_hint="--at"
        ) from exc
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).isoformat()


COMMANDS = (alias_group,)
