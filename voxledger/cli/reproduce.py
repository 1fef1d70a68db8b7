"""``voxledger reproduce``: re-run a receipt's stage and compare the result with the original."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from voxledger.cli.common import cli_console, emit_json, json_option, resolve_receipt, run_flow

console = cli_console()


@click.command("reproduce")
@click.argument("receipt")
@click.option(
    "--corpus",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="The corpus folder the original read (audit, training, promotion, evaluation, pipeline); checked against the recorded digests.",
)
@click.option(
    "--scratch",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="New or empty folder for the re-run's home (kept); default: a temporary one, removed.",
)
@click.option(
    "--allow-code-drift", is_flag=True, help="Re-run even though the code differs from the recorded code (the receipt records it)."
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Force this many torch threads in the re-run (mimics a machine with another core count).",
)
@click.option(
    "--deep", is_flag=True, help="Trust no stat cache: read and hash every input, seeded object and corpus file (the receipt records it)."
)
@json_option("the verdict and every comparison")
@click.pass_context
def reproduce(
    ctx: click.Context,
    receipt: str,
    corpus: Path | None,
    scratch: Path | None,
    allow_code_drift: bool,
    threads: int | None,
    deep: bool,
    as_json: bool,
) -> None:
    """Re-run an audit, training, promotion, evaluation, package or equivalence receipt in a scratch home and record the verdict.

    A pipeline run is reproduced stage by stage: each stage receipt it chains is reproduced (its
    own scratch home, its own reproduction receipt) and the run's verdict is the worst of theirs.

    Verdicts: exact (bit for bit, same environment), within_bands (inside the stage's bands, or
    identical under another environment), differs (outside; exit status 1). docs/provenance.md.

    Example: voxledger reproduce 3f2a9c01 --corpus ./demo/corpus

    Example: voxledger reproduce 3f2a9c01 --corpus ./demo/corpus --threads 1 --json

    Example: voxledger reproduce 3f2a9c01 --corpus ./demo/corpus --deep

    Example: voxledger reproduce 7be01d44
    """
    from voxledger.schemas.reproduction import REPRODUCIBLE_KINDS

    rid = resolve_receipt(ctx, receipt, *REPRODUCIBLE_KINDS)
    out = run_flow(
        ctx,
        "voxledger.flows.reproduce:reproduce",
        rid,
        str(corpus.absolute()) if corpus else None,
        str(scratch.absolute()) if scratch else None,
        allow_code_drift,
        threads,
        deep,
        quiet=as_json,
    )
    r = out.receipt
    if as_json:
        emit_json({"receipt": out.receipt_id, **r.model_dump(mode="json", include={"parameters", "result"})})
    else:
        _print(out.receipt_id, r)
    if r.result.verdict == "differs":
        ctx.exit(1)


def _print(rid: str, r: object) -> None:

    p, res = r.parameters, r.result  # type: ignore[attr-defined]
    for d in p.environment_differences:
        console.print(f"environment differs: {d.field}: recorded {d.recorded}, here {d.here}")
    table = Table("output", "verdict", "reason", title=f"reproduction of {p.original_kind} {p.original[:12]} ({p.stage})")
    for c in res.comparisons:
        table.add_row(c.name, c.verdict, c.reason)
    console.print(table)
    click.echo(f"verdict: {res.verdict} ({res.reason}); re-run {res.rerun_wall_s:.1f} s")
    click.echo(
        "stat cache: not trusted (--deep), every file read"
        if p.deep
        else f"stat cache: trusted for {p.stat_cache_trusted} file(s) (--deep reads them all)"
    )
    click.echo(f"receipt {rid}")


COMMANDS = (reproduce,)
