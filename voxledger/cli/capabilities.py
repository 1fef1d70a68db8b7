"""``voxledger capabilities``: the backend x stage x runtime matrix, derived from receipts alone."""

from __future__ import annotations

import html
from datetime import UTC
from pathlib import Path

import click
from rich.table import Table

from voxledger.cli.common import cli_console, emit_json, json_option, open_home
from voxledger.stores.capabilities import CapabilityMatrix, Cell

console = cli_console()
COLOURS = {"validated": "green", "smoke_tested": "yellow", "failed": "red", "never_run": "grey50"}
CSS = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;"
    "text-align:left}.validated{background:#c8f0c8}.smoke_tested{background:#fff2b3}.failed{background:#f6c0c0}"
    ".never_run{color:#888}code{font-size:90%}"
)


def _when(cell: Cell) -> str:
    return cell.finished_at.astimezone(UTC).isoformat() if cell.finished_at else "-"


def _counts(cell: Cell) -> str:
    return "/".join(str(cell.counts[s]) for s in ("validated", "smoke_tested", "failed"))


def render_html(matrix: CapabilityMatrix, source: str) -> str:
    """A static, self-contained page (inline CSS, no scripts, no network) of the matrix."""
    esc = html.escape
    rows = "".join(
        f'<tr class="{c.state}"><td>{esc(c.backend)}</td><td>{esc(c.stage)}</td><td>{esc(c.runtime)}</td><td>{c.state}</td>'
        f"<td><code>{esc(c.receipt_sha256 or '-')}</code></td><td>{esc(_when(c))}</td><td>{_counts(c)}</td><td>{esc(c.why)}</td></tr>"
        for c in matrix.cells
    )
    skipped = "".join(
        f"<li><code>{esc(u['receipt_sha256'])}</code> ({esc(u['kind'])}): {esc(u['reason'])}</li>" for u in matrix.unattributed
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>voxledger capabilities</title><style>{CSS}</style></head><body>'
        f"<h1>voxledger capabilities</h1><p>Derived from the receipts in <code>{esc(source)}</code>; regenerate with "
        "<code>voxledger capabilities --html FILE</code>. Runs are counted validated/smoke-tested/failed.</p>"
        "<table><tr><th>backend</th><th>stage</th><th>runtime</th><th>state</th><th>evidence receipt</th><th>finished</th>"
        f"<th>runs</th><th>why</th></tr>{rows}</table>"
        f"<h2>Receipts not placed on the matrix ({len(matrix.unattributed)})</h2><ul>{skipped}</ul></body></html>\n"
    )


@click.command("capabilities")
@json_option("the matrix")
@click.option(
    "--html", "html_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write a static HTML page to this file."
)
@click.pass_context
def capabilities(ctx: click.Context, as_json: bool, html_path: Path | None) -> None:
    """Which backend x stage x runtime combinations are validated, smoke-tested, failed or never run.

    Every cell links to the newest receipt that proves its state (see voxledger.stores.capabilities).

    Example: voxledger capabilities --html capabilities.html
    """
    from voxledger.stores.capabilities import capability_matrix

    home = open_home(ctx, existing=True)  # a question, not work: a mistyped --home is refused, never created empty
    with home.catalog.connect(read_only=True) as con:
        matrix = capability_matrix(con)
    if html_path is not None:
        html_path.write_text(render_html(matrix, str(home.catalog.path.name)))
    if as_json:
        emit_json(matrix.to_json())
        return
    table = Table(title="capabilities (runs counted validated/smoke-tested/failed)")
    for name in ("backend", "stage", "runtime", "state", "evidence", "finished (UTC)", "runs"):
        table.add_column(name, no_wrap=name in ("backend", "stage", "runtime", "state"))
    table.add_column("why", overflow="fold", ratio=1, min_width=24)
    for c in matrix.cells:
        colour = COLOURS[c.state]
        when = c.finished_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M") if c.finished_at else "-"
        table.add_row(
            c.backend, c.stage, c.runtime, f"[{colour}]{c.state}[/{colour}]", (c.receipt_sha256 or "-")[:12], when, _counts(c), c.why
        )
    console.print(table)
    if matrix.unattributed:
        console.print(f"{len(matrix.unattributed)} receipt(s) not placed on the matrix; see --json 'unattributed'")
    if html_path is not None:
        console.print(f"wrote {html_path}")


COMMANDS = (capabilities,)
