"""``voxledger export``: receipts in formats other tools read (in-toto statements, an MLflow tracking store)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from voxledger.cli.common import cli_console, emit_json, json_option, open_home, resolve_receipt, run_flow

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


@export.command("mlflow")
@click.argument("folder", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--tracking-uri",
    "uri",
    default=None,
    help="An MLflow tracking store to write to instead of FOLDER (e.g. http://127.0.0.1:5000, sqlite:///mlflow.db).",
)
@click.option("--experiment", default="voxledger", show_default=True, help="The MLflow experiment the runs go in.")
@json_option("what was exported")
@click.pass_context
def export_mlflow(ctx: click.Context, folder: Path | None, uri: str | None, experiment: str, as_json: bool) -> None:
    """Project the home's runs, metrics, packages and aliases into an MLflow tracking store; only what is new is written.

    One run per stage receipt (params, metrics, per-epoch curves, tagged with its digests), one
    registered model per model line with a version per package, and each line's aliases
    (champion, candidate) as its alias history leaves them. FOLDER (default ./mlflow) holds a local
    store (mlflow.db, artifacts/); --tracking-uri names another store. Needs the mlflow extra:
    pip install 'voxledger[mlflow]'. Recorded as an mlflow_export receipt.

    Example: voxledger export mlflow ./mlflow
    """
    from voxledger.tasks.mlflow_export import folder_store, load_mlflow

    if folder is not None and uri is not None:
        raise click.BadParameter(f"give FOLDER ({folder}) or --tracking-uri ({uri}), not both", param_hint="FOLDER")
    load_mlflow()  # a missing extra is refused before any flow starts
    artifact_root = None
    if uri is None:
        folder = folder or Path("mlflow")
        if not folder.absolute().parent.is_dir():
            raise click.BadParameter(
                f"folder {folder.parent} does not exist; create it first (mkdir -p {folder.parent})", param_hint="FOLDER"
            )
        folder.mkdir(exist_ok=True)
        uri, artifact_root = folder_store(folder), (folder / "artifacts").absolute().as_uri()
    out = run_flow(ctx, "voxledger.flows.mlflow_export:export_mlflow", uri, experiment, artifact_root, quiet=as_json)
    r, p = out.receipt.result, out.receipt.parameters
    if as_json:
        emit_json({"receipt": out.receipt_id, "tracking_uri": p.tracking_uri, **r.model_dump(mode="json")})
        return
    click.echo(f"{p.tracking_uri}, experiment {p.experiment} ({r.experiment_id})")
    click.echo(f"runs: {len(r.runs)} ({r.runs_created} new); model versions: {len(r.versions)} ({r.versions_created} new)")
    for a in r.aliases:
        where = f"{a.model} version {a.version}" if a.version else "no package of its checkpoint (not set)"
        click.echo(f"{a.line}:{a.alias} -> {where}{' [set]' if a.changed else ''}")
    click.echo(f"receipt {out.receipt_id}")


COMMANDS = (export,)
