"""``voxledger plan``: check a plan file, and size a promotion policy's gate from a pilot evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from voxledger.cli.common import cli_console, emit_json, json_option, open_home, resolve_receipt


@click.group("plan")
def plan_group() -> None:
    """Plan files: validate them, and size promotion gates by their power."""


def _policy(path: Path) -> Any:
    from voxledger.schemas.promotion import PromotionPolicy
    from voxledger.tasks.plans import load_plan

    return load_plan(path, PromotionPolicy)


def _rows(ctx: click.Context, policy_file: Path, pilot: str) -> list[Any]:
    from voxledger.tasks.power import policy_power

    return policy_power(open_home(ctx), _policy(policy_file), resolve_receipt(ctx, pilot, "evaluation"))


@plan_group.command("power")
@click.argument("policy_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--pilot", required=True, help="Evaluation receipt (id or unique prefix) whose paired deltas give the effect and spread.")
@json_option("the power of each rule")
@click.pass_context
def plan_power(ctx: click.Context, policy_file: Path, pilot: str, as_json: bool) -> None:
    """Power of a promotion policy's paired rules at its gate design, and the prompts (per seed count) for 80%.

    Example: voxledger plan power plans/promote-demo.yaml --pilot 5d0c...
    """
    from rich.table import Table

    from voxledger.tasks.evaluation.catastrophic import resolution
    from voxledger.tasks.power import power_warning

    rows = _rows(ctx, policy_file, pilot)
    if as_json:
        emit_json({"rules": [r.__dict__ for r in rows], "warning": power_warning(rows)})
        return
    table = Table(
        "rule", "pilot", "candidate", "effect", "sd", "design", "power", "prompts for 80%", "(1 / 2 / 4 seeds)", title="gate power"
    )
    for r in rows:
        table.add_row(
            r.rule,
            r.pilot,
            r.candidate or "-",
            "-" if r.effect is None else f"{r.effect:+.4f}",
            "-" if r.sd_prompt_mean is None else f"{r.sd_prompt_mean:.4f}",
            f"{r.prompts} x {r.seeds} at {100 * r.confidence:.2f}%",
            "-" if r.power is None else f"{100 * r.power:.0f}%",
            "-" if r.prompts_needed is None else str(r.prompts_needed),
            " / ".join("-" if v is None else str(v) for v in r.prompts_needed_by_seeds.values()) or "-",
        )
    console = cli_console()
    console.print(table)
    for r in rows:
        if r.note:
            console.print(f"note: {r.rule}: {r.note}")
    warning = power_warning(rows)
    if warning:
        console.print(f"warning: {warning}")
    said = resolution(_policy(policy_file))
    if said:
        console.print(said)


@plan_group.command("check")
@click.argument("policy_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--pilot", default=None, help="Evaluation receipt to assess the policy's power with (flags < 50% at its own margin).")
@click.pass_context
def plan_check(ctx: click.Context, policy_file: Path, pilot: str | None) -> None:
    """Validate a promotion policy, say what its gate resolves of catastrophic prompts; with --pilot, flag rules under 50% power.

    Example: voxledger plan check plans/promote-demo.yaml --pilot 5d0c...
    """
    from voxledger.tasks.evaluation.catastrophic import resolution
    from voxledger.tasks.plans import plan_digest
    from voxledger.tasks.power import power_warning

    policy = _policy(policy_file)
    click.echo(f"{policy_file}: valid promotion policy {policy.name!r}, digest {plan_digest(policy)}")
    said = resolution(policy)
    if said:
        click.echo(said)
    if pilot is not None:
        warning = power_warning(_rows(ctx, policy_file, pilot))
        click.echo(f"warning: {warning}" if warning else "power: every assessed rule has at least 50% power at its own margin")


COMMANDS = (plan_group,)
