"""``voxledger promote``: gate a training run's checkpoints against the champion (stage ``promote``)."""

from __future__ import annotations

from pathlib import Path

import click

from voxledger.cli.common import (
    cli_console,
    complete_hints,
    emit_json,
    json_option,
    plans_dir,
    resolve_receipt,
    run_flow,
)

console = cli_console()
PLANS = plans_dir()


@click.command("promote")
@click.argument("training_run")
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=PLANS / "promote-demo.yaml",
    show_default=True,
)
@click.option("--corpus", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@json_option("the decision")
@click.pass_context
def promote(ctx: click.Context, training_run: str, policy_file: Path, corpus: Path, as_json: bool) -> None:
    """Gate a training run's (id or unique prefix) best-k + last checkpoints against the champion; move aliases.

    Example: voxledger promote 9c1e... --policy plans/promote-demo.yaml --corpus ./demo/corpus
    """

    run_id = resolve_receipt(ctx, training_run, "training_run")
    with complete_hints(corpus, policy_file.parent / "eval.yaml"):  # init writes the evaluation plan beside the policy
        out = run_flow(ctx, "voxledger.flows.promote:promote", str(corpus.absolute()), run_id, str(policy_file.absolute()), quiet=as_json)
    r = out.receipt.result
    if as_json:
        emit_json({"receipt": out.receipt_id, "cached": out.cached, "promoted": r.promoted})
        return
    click.echo(f"promoted {r.promoted}{' [cached]' if out.cached else ''}; receipt {out.receipt_id}")
    if r.error_control:
        click.echo(f"error control: {r.error_control}")


COMMANDS = (promote,)
