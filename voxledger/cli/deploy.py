"""``voxledger deploy``: register a pipeline plan's stages and pipeline as Prefect deployments."""

from __future__ import annotations

from pathlib import Path

import click

from voxledger.cli.common import emit_json, json_option, open_home


@click.command("deploy")
@click.argument("plan_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--corpus", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path), help="Corpus the stages read.")
@click.option("--dry-run", is_flag=True, help="Print the deployments and their work pools; register nothing.")
@click.option(
    "--shared-store",
    is_flag=True,
    help=(
        "Workers on several machines: each flow run pulls from the shared S3 store (VOXLEDGER_S3_*) before its stage and "
        "pushes after, in the worker's own home (its VOXLEDGER_HOME)."
    ),
)
@json_option("the deployments")
@click.pass_context
def deploy(ctx: click.Context, plan_file: Path, corpus: Path, dry_run: bool, shared_store: bool, as_json: bool) -> None:
    """Register each stage flow and the pipeline as Prefect deployments on the plan's work pools.

    Work pools come from the plan's ``work_pool`` and ``stage_pools`` (``default`` when unset);
    missing pools are created as ``process`` pools. The pipeline deployment runs on the plan's
    ``schedule_cron``. Start a worker per pool with ``prefect worker start --pool NAME``.

    Example: voxledger deploy plans/pipeline-demo.yaml --corpus ./demo/corpus
    """
    from voxledger.flows.deploy import deployment_specs, ensure_pools, register
    from voxledger.hosting.runtime import prefect_session
    from voxledger.schemas.pipeline import PipelinePlan
    from voxledger.tasks.plans import load_plan

    home = open_home(ctx)
    plan = load_plan(plan_file, PipelinePlan)
    specs = deployment_specs(plan, plan_file, home=str(home.root), corpus=str(corpus.resolve()), shared_store=shared_store)
    rows = [{"name": s.name, "entrypoint": s.entrypoint, "work_pool": s.work_pool, "cron": s.cron, "env": s.env} for s in specs]
    if not dry_run:
        with prefect_session(home.root):
            created = ensure_pools({s.work_pool for s in specs})
            for row, deployment_id in zip(rows, register(specs), strict=True):
                row["id"] = deployment_id
        if created and not as_json:
            click.echo(f"created process work pool(s): {', '.join(created)}")
    if as_json:
        emit_json(rows)
        return
    for row in rows:
        click.echo(f"{row['name']:<32} pool={row['work_pool']:<12} {row['cron'] or '':<12} {row.get('id', '(dry run)')}")
    if plan.schedule_cron is None:
        click.echo(f"note: {plan_file} has no schedule_cron: the pipeline deployment runs only when started (prefect deployment run)")


COMMANDS = (deploy,)
