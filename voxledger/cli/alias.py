"""``voxledger alias``: the history of the home's aliases (champion, candidate)."""

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
    """Aliases (champion, candidate, ...): they move only through promotion receipts."""


@alias_group.command("history")
@click.argument("alias", required=False)
@click.option("--at", "at", default=None, help="Only the move in force at this ISO date/time (e.g. 2026-11-29T12:00:00Z).")
@json_option("the moves")
@click.pass_context
def alias_history(ctx: click.Context, alias: str | None, at: str | None, as_json: bool) -> None:
    """Show the append-only alias history ("what was champion on date D, and why").

    Example: voxledger alias history champion --at 2026-11-29T12:00:00Z
    """
    if at:
        at = _iso_time(at)
    from voxledger.stores.queries import alias_moves

    rows, known = alias_moves(open_home(ctx, existing=True).catalog, alias, at)
    if alias and alias not in known:
        raise click.ClickException(
            f"no alias {alias!r} in this home's history; known aliases: {', '.join(known) or 'none (no promotion recorded yet)'}"
        )
    if as_json:
        emit_json([dict(zip(("alias", "target", "base", "moved_at", "reason", "receipt"), r, strict=True)) for r in rows])
        return
    table = Table("alias", "target", "moved at", "reason", "receipt")
    for a, t, _, m, why, rid in rows:
        table.add_row(a, t[:16], str(m), why, rid[:16])
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
