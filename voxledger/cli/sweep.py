"""``voxledger sweep``: train a grid of adapters side by side and judge them all in one gate (stage ``sweep``)."""

from __future__ import annotations

from pathlib import Path

import click

from voxledger.cli.common import emit_json, json_option, open_home, resolve_node, resolve_receipt, run_flow


@click.group("sweep")
def sweep() -> None:
    """Sweeps: a training plan varied along axes, every member an ordinary run, one gate over all members."""


@sweep.command("run")
@click.argument("sweep_plan", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--corpus", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option("--audit", "audit_rid", required=True, help="Receipt id (or a unique prefix of >= 8 hex) of a passing audit of the corpus.")
@click.option("--base", "base_sha", default=None, help="Base model tree digest or unique prefix (the members' LoRA plans bind to it).")
@json_option("the sweep summary")
@click.pass_context
def run(ctx: click.Context, sweep_plan: Path, corpus: Path, audit_rid: str, base_sha: str | None, as_json: bool) -> None:
    """Train every member of SWEEP_PLAN (finished members come from cache) and gate all their checkpoints at once.

    The training plan and promotion policy the sweep plan names are read from its folder. A sweep
    with no winner exits non-zero after recording its receipts.

    Example: voxledger sweep run plans/sweep.yaml --corpus ./demo/corpus --audit 3fa2... --base 9c1e...
    """
    audit_id = resolve_receipt(ctx, audit_rid, "audit")
    base = resolve_node(ctx, base_sha) if base_sha else None
    plan = sweep_plan.absolute()
    out = run_flow(ctx, "voxledger.flows.sweep:sweep", str(corpus.absolute()), audit_id, str(plan), str(plan.parent), base, quiet=as_json)
    r = out.receipt.result
    if as_json:
        emit_json(out.receipt.model_dump(mode="json")["result"] | {"receipt": out.receipt_id, "cached": out.cached})
        return
    click.echo(f"sweep receipt {out.receipt_id}{' [cached]' if out.cached else ''}: {len(r.members)} members, {r.members_trained} trained")
    for m in r.members:
        click.echo(
            f"  {m.name}: run {m.training_run[:16]}, best epoch {m.best_epoch}, CV loss {m.best_cv_loss:.4f}, {m.challengers} challenger(s)"
        )
    f = r.family
    click.echo(f"one gate: {f.members} members, {f.challengers} challengers x {f.rules} rule(s) in one family ({f.method})")
    click.echo(f"promoted {r.promoted} (member {r.promoted_member}); promotion receipt {r.promotion}")


@sweep.command("report")
@click.argument("sweep_receipt", required=False)
@json_option("the report")
@click.pass_context
def report(ctx: click.Context, sweep_receipt: str | None, as_json: bool) -> None:
    """Show a sweep: its grid, each member's CV curve and gate values with intervals, the winner and why.

    SWEEP_RECEIPT is a sweep receipt id or unique prefix; without it, the newest sweep.

    Example: voxledger sweep report 3fa2c81d
    """
    from voxledger.schemas.errors import ReceiptError
    from voxledger.stores.dashboard_queries import latest_of_kind
    from voxledger.stores.sweep_report import sweep_report

    home = open_home(ctx, existing=True)
    if sweep_receipt is None:
        with home.catalog.connect(read_only=True) as con:
            newest = latest_of_kind(con, "sweep")
        if not newest:
            raise ReceiptError(f"home {home.root} holds no sweep; run one with `voxledger sweep run PLAN`")
        rid = newest[0]
    else:
        rid = resolve_receipt(ctx, sweep_receipt, "sweep")
    rep = sweep_report(home.receipts.read, rid)
    if as_json:
        emit_json(rep.model_dump(mode="json"))
        return
    f = rep.family
    click.echo(f"sweep {rep.name} (receipt {rep.sweep}): {len(rep.members)} members varying {', '.join(rep.axes) or '-'}")
    click.echo(
        f"one gate: {f.challengers} challengers x {f.rules} rule(s) against the {rep.incumbent}, {f.method} "
        f"({100 * f.per_challenger_confidence:.3f}% per challenger; P(any false pass) <= {100 * f.familywise_one_sided:.2f}% one-sided)"
    )
    for m in rep.members:
        values = ", ".join(f"{a}={getattr(m.settings, a)}" for a in rep.axes)
        curve = " ".join(f"{e.cv_loss:.4f}" for e in m.curve)
        click.echo(
            f"{'*' if m.won else ' '} {m.name} ({values}): best epoch {m.best_epoch}, CV loss per epoch {curve}; run {m.training_run[:16]}"
        )
        for g in m.gate:
            iv = "not estimable" if g.low is None or g.high is None else f"[{g.low:.4f}, {g.high:.4f}]"
            value = "-" if g.value is None else f"{g.value:.4f}"
            verdict = "pass" if g.passed else "FAIL"
            click.echo(f"    {g.challenger}: {g.statistic}({g.metric}) = {value} {iv} {g.op} {g.threshold:g}: {verdict}")
    won = f"{rep.promoted} (member {rep.promoted_member})" if rep.promoted else "nothing"
    click.echo(f"promoted {won}: {rep.why}; decision {rep.promotion}")


COMMANDS = (sweep,)
