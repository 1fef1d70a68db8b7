"""``voxledger checkpoints``: plan and execute pruning of checkpoints no receipt still needs."""

from __future__ import annotations

from pathlib import Path

import click
import pydantic

from voxledger.cli.common import (
    cli_console,
    emit_json,
    json_option,
    open_home,
    plans_dir,
    run_flow,
)
from voxledger.schemas.errors import validation_lines

console = cli_console()
PLANS = plans_dir()


@click.group("checkpoints")
def checkpoints_group() -> None:
    """Training checkpoints in the store."""


@checkpoints_group.command("prune")
@click.option("--plan-out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write a reviewable prune plan here.")
@click.option(
    "--execute", "execute", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None, help="Execute a reviewed plan file."
)
@click.option("--keep-best", type=click.IntRange(min=0), default=1, show_default=True, help="Best checkpoints kept per run.")
@json_option("what was planned or removed")
@click.pass_context
def checkpoints_prune(ctx: click.Context, plan_out: Path | None, execute: Path | None, keep_best: int, as_json: bool) -> None:
    """Plan (--plan-out) or execute (--execute) checkpoint pruning; referenced checkpoints are never removed.

    Example: voxledger checkpoints prune --plan-out prune.json && voxledger checkpoints prune --execute prune.json
    """
    from voxledger.tasks.stages.checkpoints import make_plan

    home = open_home(ctx)
    if (plan_out is None) == (execute is None):
        raise click.UsageError("give exactly one of --plan-out FILE or --execute FILE")
    if plan_out is not None:
        plan = make_plan(home, keep_best)
        try:
            with open(plan_out, "x", encoding="utf-8") as f:
                f.write(plan.model_dump_json(indent=2))
        except FileExistsError as exc:
            raise click.BadParameter(f"{plan_out} exists; plans are never overwritten: choose a new file", param_hint="--plan-out") from exc
        n = sum(len(e.blobs) for e in plan.remove)
        if as_json:
            emit_json({"plan": str(plan_out), "keep": len(plan.keep), "remove": len(plan.remove), "blobs": n})
            return
        console.print(
            f"wrote {plan_out}: keep {len(plan.keep)} checkpoints, remove {len(plan.remove)} ({n} blobs); review it, then --execute"
        )
        return
    try:
        rid, receipt = run_flow(ctx, "voxledger.flows.store:prune_checkpoints", str(execute.absolute()), quiet=as_json)  # type: ignore[union-attr]
    except pydantic.ValidationError as exc:
        raise click.BadParameter(
            f"{execute} is not a prune plan ({exc.error_count()} problem(s), e.g. {validation_lines(exc, limit=1)[0]}); "
            "write one with --plan-out and review it",
            param_hint="--execute",
        ) from exc
    if as_json:
        emit_json({"receipt": rid, "removed_blobs": len(receipt.parameters.removed_blobs), "freed_bytes": receipt.parameters.freed_bytes})
        return
    console.print(f"removed {len(receipt.parameters.removed_blobs)} blobs ({receipt.parameters.freed_bytes:,} bytes); receipt {rid}")


COMMANDS = (checkpoints_group,)
