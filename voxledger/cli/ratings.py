"""``voxledger ratings``: aggregate verified listening submissions into statistics."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from voxledger.cli.common import cli_console, emit_json, json_option, open_home, resolve_receipt, run_flow

console = cli_console()


REFUSED_EXIT = 3  # the aggregate is recorded, but some files were refused


@click.group()
def ratings() -> None:
    """Rater submissions: verify, unblind and aggregate."""


@ratings.command("aggregate")
@click.argument("packet_set")
@click.argument("submissions", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--csv", "csv_out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Also write the unblinded ratings as CSV."
)
@json_option("the aggregate result")
@click.pass_context
def ratings_aggregate(ctx: click.Context, packet_set: str, submissions: tuple[Path, ...], csv_out: Path | None, as_json: bool) -> None:
    """Verify SUBMISSIONS against PACKET_SET (a packet_set receipt id) and record the aggregate.

    A file that cannot be read, parsed or checked is refused on its own (one `refused FILE: reason`
    line each) and the others are aggregated; the exit status is then 3. Exit 0: every file accepted.

    Example: voxledger ratings aggregate 3fa2c1d9 ./submissions/*.json --csv ratings.csv
    """

    home = open_home(ctx)
    outcome = run_flow(
        ctx,
        "voxledger.flows.ratings:ratings",
        resolve_receipt(ctx, packet_set, "packet_set"),
        [str(s.absolute()) for s in submissions],
        quiet=as_json,
    )
    r = outcome.receipt.result
    refused = REFUSED_EXIT if r.rejections else 0
    if csv_out is not None:
        with open(csv_out, "xb") as f:
            f.write(home.blobs.get_bytes(outcome.receipt.subject("ratings_csv").sha256))
    if as_json:
        emit_json({"receipt": outcome.receipt_id, "cached": outcome.cached, **json.loads(outcome.receipt.result.model_dump_json())})
        ctx.exit(refused)
    for rej in r.rejections:
        click.echo(f"refused {rej.file}: {' '.join(rej.reason.split())}", err=True)
    table = Table("criterion", "candidate", "mean", "95% CI", "ratings", "raters", title="listening test (screened raters)")
    for s in r.scores:
        ci = f"[{s.ci_low:.2f}, {s.ci_high:.2f}]" if s.ci_low is not None and s.ci_high is not None else "-"
        table.add_row(s.criterion, s.candidate, f"{s.mean:.2f}", ci, str(s.ratings), str(s.raters))
    console.print(table)
    excluded = [f"{s.rater_id} ({'; '.join(s.reasons)})" for s in r.screening if not s.included]
    click.echo(
        f"accepted {r.submissions_accepted} submission(s), refused {len(r.rejections)}; rows refused {r.rejected_rows}; "
        f"missing raters {list(r.attrition.missing_raters)}; missing cells {r.attrition.missing_cells}"
    )
    if excluded:
        click.echo("excluded by screening: " + ", ".join(excluded))
    from voxledger.tasks.listening.report import summary_lines

    for line in summary_lines(r, outcome.receipt.parameters.statistics.confidence):
        click.echo(line)
    click.echo(f"receipt {outcome.receipt_id}")
    ctx.exit(refused)


COMMANDS = (ratings,)
