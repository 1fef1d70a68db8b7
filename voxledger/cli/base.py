"""``voxledger base``: the trained bases that ship with backends (list, verify, import, bundle)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from voxledger.cli.common import cli_console, emit_json, json_option, open_home, resolve_receipt, run_flow
from voxledger.tasks.backends.base import BACKENDS

console = cli_console()
BACKEND_CHOICE = click.Choice(sorted(BACKENDS))


@click.group("base")
def base_group() -> None:
    """Trained bases shipped inside the package, so an adapter needs no base training run.

    Example: voxledger base list
    """


@base_group.command("list")
@json_option("the shipped bases")
def base_list(as_json: bool) -> None:
    """List every backend's shipped base: name, tree digest, how it was trained.

    Example: voxledger base list --json
    """
    from voxledger.tasks.backends.base import shipped_folder
    from voxledger.tasks.shipped_base import read_bundle

    rows = []
    for name in sorted(BACKENDS):
        folder = shipped_folder(name)  # type: ignore[arg-type]
        if folder is None:
            rows.append({"backend": name, "name": None, "tree": None, "summary": "no shipped base", "folder": None})
            continue
        b = read_bundle(folder)
        rows.append({"backend": name, "name": b.name, "tree": b.tree_sha256, "summary": b.summary, "folder": str(folder)})
    if as_json:
        emit_json(rows)
        return
    table = Table("backend", "base", "tree", "trained")
    for r in rows:
        table.add_row(r["backend"], r["name"] or "-", (r["tree"] or "-")[:16], r["summary"])
    console.print(table)


@base_group.command("verify")
@click.argument("backend", type=BACKEND_CHOICE, default="tiny")
@json_option("what was checked")
def base_verify(backend: str, as_json: bool) -> None:
    """Check every byte of BACKEND's shipped base against its base.json and its receipts against each other.

    Example: voxledger base verify tiny
    """
    from voxledger.tasks.shipped_base import bundle_folder, read_bundle, verify_bundle

    folder = bundle_folder(backend)  # type: ignore[arg-type]
    bundle = read_bundle(folder)
    checked = verify_bundle(folder, bundle)
    if as_json:
        emit_json({"backend": backend, "name": bundle.name, "tree": bundle.tree_sha256, "checked": list(checked)})
        return
    for line in checked:
        click.echo(f"ok: {line}")
    click.echo(f"shipped base {bundle.name}: tree {bundle.tree_sha256} ({bundle.summary})")
    click.echo("reproduce it (same machine kind and build give the same tree; see docs/own-corpus.md):")
    for command in bundle.reproduce:
        click.echo(f"  {command}")


@base_group.command("import")
@click.argument("backend", type=BACKEND_CHOICE, default="tiny")
@json_option("the import receipt")
@click.pass_context
def base_import(ctx: click.Context, backend: str, as_json: bool) -> None:
    """Verify BACKEND's shipped base and store it in the home; prints the tree digest `train --base` takes.

    Example: voxledger base import tiny
    """

    out = run_flow(ctx, "voxledger.flows.base:base", backend, quiet=as_json)
    tree = out.receipt.subject("base").sha256
    summary = {"receipt": out.receipt_id, "cached": out.cached, "tree": tree, "name": out.receipt.parameters.name}
    if as_json:
        emit_json(summary)
        return
    click.echo(f"base {summary['name']}: tree {tree}{' [cached]' if out.cached else ''}; receipt {out.receipt_id}")
    click.echo(
        f"an adapter trains on it with --base {tree[:16]} (a passing audit of your corpus prints the whole `voxledger train` command)"
    )


@base_group.command("bundle")
@click.argument("run")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="New folder for the bundle (never overwritten).")
@click.option("--name", required=True, help="The base's name (lower case, digits, '-').")
@click.option("--reproduce", "commands", multiple=True, help="A command that trained it, in order; repeatable.")
@json_option("the bundle's base.json")
@click.pass_context
def base_bundle(ctx: click.Context, run: str, out: Path, name: str, commands: tuple[str, ...], as_json: bool) -> None:
    """Write the best checkpoint of full training run RUN, with its receipts and plan, as a shippable base bundle.

    Example: voxledger base bundle 3fa2c1d0 --out ./tiny-base --name tiny-base --reproduce "voxledger demo corpus ./demo/corpus"
    """
    from voxledger.tasks.shipped_base import write_bundle

    rid = resolve_receipt(ctx, run, "training_run")
    bundle = write_bundle(open_home(ctx), rid, out, name=name, reproduce=commands)
    if as_json:
        emit_json(bundle.model_dump(mode="json"))
        return
    click.echo(f"wrote {out}: base {bundle.name}, tree {bundle.tree_sha256} ({bundle.summary})")


COMMANDS = (base_group,)
