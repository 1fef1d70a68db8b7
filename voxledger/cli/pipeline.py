"""``voxledger pipeline``: run every stage of a pipeline plan; list the stage table."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from voxledger.cli.common import (
    cli_console,
    complete_hints,
    emit_json,
    json_option,
    plans_dir,
    print_stages,
    run_flow,
)

console = cli_console()
PLANS = plans_dir()


@click.group("pipeline")
def pipeline_group() -> None:
    """The orchestrated pipeline."""


@pipeline_group.command("run")
@click.argument("plan_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--corpus", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option(
    "--packets", "packets_dir", type=click.Path(file_okay=False, path_type=Path), default=None, help="Write listening packets here."
)
@json_option("the stage outcomes")
@click.pass_context
def pipeline_run(ctx: click.Context, plan_file: Path, corpus: Path, packets_dir: Path | None, as_json: bool) -> None:
    """Run audit -> train -> promote -> evaluate -> package -> packets from a pipeline plan.

    Example: voxledger pipeline run plans/pipeline-demo.yaml --corpus ./demo/corpus --packets ./demo/packets
    """
    with complete_hints(corpus, _evaluation_plan(plan_file)):
        out = run_flow(
            ctx,
            "voxledger.flows.pipeline:pipeline",
            str(corpus.absolute()),
            str(plan_file.absolute()),
            str(PLANS),
            str(packets_dir.absolute()) if packets_dir else None,
        )
    if as_json:
        emit_json({"pipeline_receipt": out.pipeline_receipt, "stages": [s.model_dump(mode="json") for s in out.stages]})
    else:
        print_stages(out.stages)
        click.echo(f"pipeline receipt {out.pipeline_receipt}")


def _evaluation_plan(plan_file: Path) -> Path | None:
    """The evaluation plan a pipeline plan names (beside it, else bundled), for the hints of a failed gate; None when unreadable."""
    from voxledger.schemas.errors import VoxledgerError
    from voxledger.schemas.pipeline import PipelinePlan
    from voxledger.tasks.plans import load_plan

    try:
        name = load_plan(plan_file, PipelinePlan).evaluation
    except VoxledgerError:
        return None  # the run itself reports the plan's problem
    beside = plan_file.parent / name
    return beside if beside.is_file() else PLANS / name


@pipeline_group.command("stages")
@click.argument("plan_file", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option("the stage table")
def pipeline_stages(plan_file: Path | None, as_json: bool) -> None:
    """List the stage table: each stage's flow, task, receipt and plan; with PLAN_FILE, whether and where each runs.

    Example: voxledger pipeline stages plans/pipeline-demo.yaml
    """
    from voxledger.flows.stages import describe
    from voxledger.schemas.pipeline import PipelinePlan
    from voxledger.tasks.plans import load_plan

    rows = describe(load_plan(plan_file, PipelinePlan) if plan_file else None)
    if as_json:
        emit_json(rows)
        return
    columns = ["stage", "flow", "task", "receipt", "plan_field", "verdict", *(["plan_file", "enabled", "pool"] if plan_file else [])]
    table = Table(*columns, title="pipeline stages, in run order")
    for row in rows:
        table.add_row(*("-" if row[c] is None else str(row[c]) for c in columns))
    console.print(table)


COMMANDS = (pipeline_group,)
