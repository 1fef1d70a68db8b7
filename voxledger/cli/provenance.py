"""``voxledger provenance``: questions about where things came from, answered from the catalog."""

from __future__ import annotations

import click
from rich.table import Table

from voxledger.cli.common import cli_console, emit_json, json_option, open_home, resolve_node, resolve_receipt

console = cli_console()


def _show(rows: list[dict], as_json: bool, title: str) -> None:  # type: ignore[type-arg]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        console.print(f"{title}: none")
        return
    table = Table(*rows[0].keys(), title=title)
    for r in rows:
        table.add_row(*(str(v) for v in r.values()))  # whole: a terminal wraps, a pipe keeps every character
    console.print(table)


@click.group()
def provenance() -> None:
    """Provenance questions answered from the catalog."""


@provenance.command("downstream")
@click.argument("ref")
@json_option("the rows")
@click.pass_context
def downstream_cmd(ctx: click.Context, ref: str, as_json: bool) -> None:
    """Everything downstream of a corpus (its manifest or audio-tree digest, or its audit receipt).

    Example: voxledger provenance downstream 5f29360
    """
    from voxledger.stores.lineage import walk
    from voxledger.stores.provenance import downstream
    from voxledger.stores.verify import check_walked_edges

    node = resolve_node(ctx, ref)
    home = open_home(ctx, existing=True)
    with home.catalog.connect(read_only=True) as con:
        # an artifact (a corpus manifest or audio tree) starts at the receipts that recorded it
        starts = [node, *sorted({e.src for e in walk(con, node, "up", 1) if e.direction == "output"})]
        walked = [(e.src, e.dst, e.role, e.direction) for start in starts for e in walk(con, start, "down", 30)]
        rows = {r["receipt"]: r for start in starts for r in downstream(con, start)}
    check_walked_edges(home, walked)
    _show(sorted(rows.values(), key=lambda r: (str(r["finished_at"]), r["receipt"])), as_json, f"downstream of {node[:16]}")


@provenance.command("speaker")
@click.argument("speaker")
@json_option("the rows")
@click.pass_context
def speaker_cmd(ctx: click.Context, speaker: str, as_json: bool) -> None:
    """Which packages were trained (adapter or base) on SPEAKER's train or CV clips (held-out clips counted apart).

    Example: voxledger provenance speaker spk-b2
    """
    from voxledger.stores.provenance import packages_with_speaker
    from voxledger.stores.verify import check_walked_edges

    home = open_home(ctx, existing=True)
    walked: list[tuple[str, str, str, str]] = []
    with home.catalog.connect(read_only=True) as con:
        rows = packages_with_speaker(con, speaker, walked)
    check_walked_edges(home, walked)
    _show(rows, as_json, f"packages trained on {speaker}")


@provenance.command("champion-at")
@click.argument("when")
@click.option("--alias", default="champion", show_default=True)
@click.option("--line", default=None, help="One model line (VOICE/BACKEND, e.g. joe/tiny); default: every line.")
@json_option("the rows")
@click.pass_context
def champion_at_cmd(ctx: click.Context, when: str, alias: str, line: str | None, as_json: bool) -> None:
    """What the alias pointed at on a date in each model line, and why.

    Example: voxledger provenance champion-at 2026-12-01T00:00:00Z --line joe/tiny
    """
    from voxledger.stores.provenance import champion_at

    with open_home(ctx, existing=True).catalog.connect(read_only=True) as con:
        rows = champion_at(con, alias, when, line)
    _show(rows, as_json, f"{alias} at {when}" + (f" in line {line}" if line else ""))


@provenance.command("normaliser")
@click.argument("version")
@json_option("the rows")
@click.pass_context
def normaliser_cmd(ctx: click.Context, version: str, as_json: bool) -> None:
    """Which evaluations used normaliser VERSION (e.g. whisper-normalizer==0.1.15:EnglishTextNormalizer).

    Example: voxledger provenance normaliser voxledger-basic:1
    """
    from voxledger.stores.provenance import evaluations_with_normaliser

    with open_home(ctx, existing=True).catalog.connect(read_only=True) as con:
        _show(evaluations_with_normaliser(con, version), as_json, f"evaluations with {version}")


@provenance.command("reproductions")
@click.argument("receipt", required=False)
@json_option("the rows")
@click.pass_context
def reproductions_cmd(ctx: click.Context, receipt: str | None, as_json: bool) -> None:
    """Every `voxledger reproduce` verdict recorded here, or those of one RECEIPT.

    Example: voxledger provenance reproductions 3f2a9c01
    """
    from voxledger.stores.provenance import reproductions

    original = resolve_receipt(ctx, receipt) if receipt else None
    with open_home(ctx, existing=True).catalog.connect(read_only=True) as con:
        _show(reproductions(con, original), as_json, "reproductions" + (f" of {original[:12]}" if original else ""))


@provenance.command("diff")
@click.argument("a")
@click.argument("b")
@click.option("--all", "show_all", is_flag=True, help="Include volatile fields (timings).")
@json_option("the rows")
@click.pass_context
def diff_cmd(ctx: click.Context, a: str, b: str, show_all: bool, as_json: bool) -> None:
    """Diff two receipts (e.g. two pipeline or training runs) field by field.

    Example: voxledger provenance diff 2e4891ca 9f00aa31
    """
    from voxledger.stores.provenance import diff_receipts

    home = open_home(ctx, existing=True)
    rows = diff_receipts(home.receipts.read_document(resolve_receipt(ctx, a)), home.receipts.read_document(resolve_receipt(ctx, b)))
    _show([r for r in rows if show_all or not r["volatile"]], as_json, "differences")


COMMANDS = (provenance,)
