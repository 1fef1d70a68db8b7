"""``voxledger serve``: run a pipeline plan on a schedule until Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from voxledger.cli.common import cli_console, home_ref, open_home, plans_dir

console = cli_console()


@click.command("serve")
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=plans_dir() / "pipeline-demo.yaml",
    show_default=True,
)
@click.option("--corpus", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option("--cron", default=None, help="Override the plan's schedule_cron.")
@click.pass_context
def serve(ctx: click.Context, plan_file: Path, corpus: Path, cron: str | None) -> None:
    """Serve the pipeline as a Prefect deployment on the plan's cron schedule (Ctrl-C stops).

    Example: voxledger serve --corpus ./demo/corpus --cron "0 3 * * *"
    """
    from voxledger.flows.pipeline import pipeline
    from voxledger.hosting.runtime import prefect_session
    from voxledger.schemas.pipeline import PipelinePlan
    from voxledger.tasks.plans import load_plan

    plan = load_plan(plan_file, PipelinePlan)
    schedule = cron or plan.schedule_cron
    if not schedule:
        raise click.ClickException(f"{plan_file} has no schedule_cron; pass --cron")
    params = {
        "home": home_ref(ctx).model_dump(mode="json"),
        "corpus": str(corpus.absolute()),
        "plan_file": str(plan_file.absolute()),
        "plans_dir": str(plans_dir()),
    }
    console.print(f"serving pipeline {plan.name!r} on cron {schedule!r} with {json.dumps(params, default=str)}")
    home_root = open_home(ctx).root
    previous = signal.signal(signal.SIGINT, lambda *_: _stop_serving(home_root))
    # the runs' own processes inherit this: their logs (tracebacks of an interrupted stage included) go to
    # Prefect's run history, not over this console (Prefect's PREFECT_LOGGING_[PATH]_[KEY] overrides)
    for handler in ("CONSOLE", "CONSOLE_FLOW_RUNS"):
        os.environ.setdefault(f"PREFECT_LOGGING_HANDLERS_{handler}_LEVEL", "CRITICAL")
    try:
        with prefect_session(home_root):
            console.print(f"polling for scheduled runs of deployment pipeline/voxledger-{plan.name}; Ctrl-C stops")
            pipeline.serve(
                name=f"voxledger-{plan.name}", cron=schedule, parameters=params, print_starting_message=False, limit=1
            )  # one run at a time: ticks wait
    finally:
        signal.signal(signal.SIGINT, previous)
    console.print("stopped")


STOP_GRACE_S = 1.0
"""How long Ctrl-C lets a run in progress record its failed receipt before ``serve`` exits."""


def _stop_serving(home_root: Path) -> None:
    """Ctrl-C on ``serve``: end the run in progress and exit within about two seconds.

    The runner's own graceful stop (SIGTERM) takes 5 s or more while it reports every state to the
    API. Instead the run's process gets SIGTERM straight away (its pipeline ends the stage and records
    a failed receipt naming it, then the run reports its own state), this process waits up to
    ``STOP_GRACE_S`` for it and exits 130. A run still writing then finishes its receipt on its own.
    """
    import psutil

    from voxledger.hosting.server import read_state

    server = read_state(home_root)
    keep = {server.pid} if server is not None else set()  # the home's Prefect server outlives serve
    # multiprocessing's resource tracker is no run: it ignores signals and leaves when the run has gone
    runs = [c for c in psutil.Process().children() if c.pid not in keep and "resource_tracker" not in " ".join(_cmdline(c))]
    for child in runs:
        try:
            child.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(runs, timeout=STOP_GRACE_S)
    if not runs:
        said = "stopped serving (no run was in progress)"
    else:
        said = (
            f"stopped serving; the run in progress was stopped ({len(runs) - len(alive)} of {len(runs)} run process(es) gone, "
            "the rest finishing): its pipeline receipt is failed and names the stage it stopped in"
        )
    click.echo(f"Interrupted: {said}", err=True)
    sys.stdout.flush()
    os._exit(130)


def _cmdline(proc: Any) -> list[str]:
    import psutil

    try:
        return list(proc.cmdline())
    except psutil.Error:
        return []


COMMANDS = (serve,)
