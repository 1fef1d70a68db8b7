"""``voxledger train``: train a base or a LoRA adapter from a training plan (stage ``train_base``/``train_adapter``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from voxledger.cli.common import (
    cli_console,
    emit_json,
    json_option,
    plans_dir,
    resolve_node,
    resolve_receipt,
    run_flow,
)

if TYPE_CHECKING:
    from voxledger.schemas.training import TrainingRunReceipt

console = cli_console()
PLANS = plans_dir()


@click.command("train")
@click.argument("corpus", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--audit", "audit_rid", required=True, help="Receipt id (or a unique prefix of >= 8 hex) of a passing audit of CORPUS.")
@click.option("--plan", "plan_file", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True)
@click.option("--base", "base_sha", default=None, help="Base model tree digest or unique prefix (LoRA plans).")
@json_option("the run summary")
@click.pass_context
def train(ctx: click.Context, corpus: Path, audit_rid: str, plan_file: Path, base_sha: str | None, as_json: bool) -> None:
    """Train (or resume a crashed run) under a frozen training plan.

    Example: voxledger train ./demo/corpus --audit 3fa2... --plan plans/train-tiny-base.yaml
    """

    audit_id = resolve_receipt(ctx, audit_rid, "audit")
    base = resolve_node(ctx, base_sha) if base_sha else None
    out = run_flow(ctx, "voxledger.flows.train:train", str(corpus.absolute()), audit_id, str(plan_file.absolute()), base, quiet=as_json)
    r = out.receipt
    summary = {
        "receipt": out.receipt_id,
        "cached": out.cached,
        "best": r.subject("best").sha256,
        "last": r.subject("last").sha256,
        "best_epoch": r.result.best_epoch,
        "epochs": len(r.result.epochs),
        "stop_reason": r.result.stop_reason,
    }
    if as_json:
        emit_json(summary)
        return
    click.echo(f"trained {summary['epochs']} epoch(s), stopped: {r.result.stop_reason}{' [cached]' if out.cached else ''}")
    click.echo(f"best checkpoint (epoch {r.result.best_epoch}): {summary['best']}")
    click.echo(f"last checkpoint: {summary['last']}")
    click.echo(f"receipt {out.receipt_id}")
    if r.parameters.mode == "lora":
        click.echo(f"next: voxledger promote {out.receipt_id[:16]} --policy {_policy_for(plan_file, r)} --corpus {corpus}")


def _policy_for(plan_file: Path, run: TrainingRunReceipt) -> str:
    """The promotion policy beside the training plan for this run's model line (the one that names
    the line, else the only one there), or a placeholder that says what to pass."""
    from voxledger.schemas.promotion import model_line
    from voxledger.tasks.stages.promote import policies_beside, run_voice

    line = model_line(run_voice(run), run.parameters.backend)
    found = policies_beside(plan_file, line)
    return str(found[0]) if len(found) == 1 else f"PROMOTION_POLICY.yaml   (the policy of line {line})"


COMMANDS = (train,)
