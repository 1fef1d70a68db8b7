"""``voxledger bench``: same-run speed ratios and statistical limits, each with its goal."""

from __future__ import annotations

import click
from rich.table import Table

from voxledger.cli.common import cli_console, emit_json, json_option

console = cli_console()


@click.command("bench")
@click.option("--quick", is_flag=True, help="Small sizes: a smoke run, not a measurement.")
@click.option(
    "--only",
    default="hash,corpus,catalog,cli,audit,train,features,eval,prefect,demo",
    show_default=True,
    help="Comma-separated sections: hash, corpus, catalog (stores); cli (read commands against `python -c pass`); "
    "audit, train, eval, prefect (stages); features (a training stage's features binding: aligning a voice against "
    "the home's memo); "
    "demo (stage times of the latest pipeline run in --home); stats (simulated error rates of every interval and test), "
    "corpus-scale (audit of a large corpus), store-dvc (store against DVC), sync (push/pull against a local S3 server), "
    "listening-server (simulated raters against `packets serve`), install (byte-compiling a package as pip does "
    "against `voxledger.postinstall`), pipeline-rerun (a `pipeline run` with every stage cached: the home's runner "
    "against the command's own process), sweep (4 tiny members on 2 workers against 1, the gate's cost per member, "
    "the sweep gate under no true effect). The last eight are not in the default set.",
)
@click.option(
    "--replications",
    type=click.IntRange(min=20),
    default=None,
    help="Simulated data sets per row of the stats section (default 1000, 150 with --quick); more narrows the Monte Carlo error.",
)
@json_option("the figures")
@click.pass_context
def bench(ctx: click.Context, quick: bool, only: str, replications: int | None, as_json: bool) -> None:
    """Measure throughput against baselines taken in the same run (openssl, one core, cold cache, bare loops).

    Example: voxledger bench --only hash,catalog
    """
    from voxledger.bench import SECTIONS, run_all

    sections = tuple(s.strip() for s in only.split(",") if s.strip())
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise click.BadParameter(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}", param_hint="--only")
    with console.status("benchmarking"):
        figures = run_all(quick=quick, sections=sections, home=ctx.find_root().obj["home"], replications=replications)
    if as_json:
        emit_json([f.__dict__ for f in figures])
        return
    table = Table("benchmark", "value", "unit", "goal", title="voxledger bench" + (" (quick)" if quick else ""))
    for f in figures:
        table.add_row(f.name, f"{f.value:,.2f}", f.unit, f.goal)
    console.print(table)


COMMANDS = (bench,)
