"""``voxledger equivalence compare`` and ``attribute``: stage-by-stage comparison of two runtimes."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from voxledger.cli.common import cli_console, emit_json, json_option, plans_dir, resolve_node, run_flow
from voxledger.schemas.errors import EquivalenceError

console = cli_console()
DEFAULT_PLAN = plans_dir() / "equivalence-default.yaml"


def _runtime(spec: str) -> dict[str, object]:
    """Parse ``name[,dtype=..][,device=..][,tf32]`` into runtime settings."""
    name, *opts = spec.split(",")
    out: dict[str, object] = {"name": name}
    for opt in opts:
        key, _, value = opt.partition("=")
        out[key] = True if key == "tf32" and not value else value
    return out


@click.group()
def equivalence() -> None:
    """Numerical equivalence between runtimes of one model."""


@equivalence.command("compare")
@click.argument("reference")
@click.argument("candidate")
@click.option("--plan", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=DEFAULT_PLAN, show_default=True)
@click.option("--ref-runtime", default="reference", show_default=True, help="name[,dtype=float32][,device=cpu][,tf32]")
@click.option("--cand-runtime", default="candidate", show_default=True, help="name[,dtype=..][,device=..][,tf32]")
@json_option("the report")
@click.pass_context
def compare(ctx: click.Context, reference: str, candidate: str, plan: Path, ref_runtime: str, cand_runtime: str, as_json: bool) -> None:
    """Compare stage dumps (folders of tokens.i32 / mel.f32 / pcm.f32 / .npy, or stored tree
    digests); record an equivalence receipt; exit non-zero on RED.

    Example: voxledger equivalence compare dumps/torch dumps/ggml --cand-runtime ggml,dtype=f16
    """

    reference, candidate = (_dump_ref(ctx, r) for r in (reference, candidate))
    out = run_flow(
        ctx,
        "voxledger.flows.equivalence:equivalence",
        "compare",
        reference,
        candidate,
        str(plan.absolute()),
        _runtime(ref_runtime),
        _runtime(cand_runtime),
        quiet=as_json,
    )
    _report(out, as_json)


@equivalence.command("attribute")
@click.argument("base")
@click.argument("adapter")
@click.option("--ref-runtime", type=click.Choice(["adapter", "merged"]), default="adapter", show_default=True)
@click.option("--cand-runtime", type=click.Choice(["adapter", "merged"]), default="merged", show_default=True)
@click.option("--text", default="The salt breeze came across from the sea.", show_default=True, help="Probe sentence.")
@click.option("--speaker", default=None, help="Speaker to synthesize (default: the adapter's new speaker).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--plan", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=DEFAULT_PLAN, show_default=True)
@json_option("the report")
@click.pass_context
def attribute(
    ctx: click.Context,
    base: str,
    adapter: str,
    ref_runtime: str,
    cand_runtime: str,
    text: str,
    speaker: str | None,
    seed: int,
    plan: Path,
    as_json: bool,
) -> None:
    """Blame a gap between two runtimes of an adapter on the stage that causes it.

    BASE and ADAPTER are stored tree digests or unique prefixes (a full training run's model, a LoRA run's
    checkpoint); BASE is '-' for a backend whose base is its own configured model (cosyvoice3 without
    --base). The backend of ADAPTER's run splits synthesis into stages. Each stage of the candidate
    gets the reference's input (tiny: durations, then mel), so a gap shows at its source and nowhere
    after. The fed-forward dumps are compared under PLAN and recorded as an equivalence receipt; exits
    non-zero on RED.

    Example: voxledger equivalence attribute 44a1... 76b6... --ref-runtime adapter --cand-runtime merged
    """

    base_ref = None if base == "-" else resolve_node(ctx, base)
    adapter = resolve_node(ctx, adapter)
    out = run_flow(
        ctx,
        "voxledger.flows.equivalence:equivalence",
        "attribute",
        base_ref,
        adapter,
        str(plan.absolute()),
        {"name": ref_runtime},
        {"name": cand_runtime},
        text,
        speaker,
        seed,
        quiet=as_json,
    )
    _report(out, as_json)


def _dump_ref(ctx: click.Context, ref: str) -> str:
    """A dump folder as given; anything else is a stored tree digest or unique prefix."""
    return ref if Path(ref).exists() else resolve_node(ctx, ref)


def _report(out: object, as_json: bool) -> None:
    receipt_id, receipt = out.receipt_id, out.receipt  # type: ignore[attr-defined]
    report = receipt.report
    if as_json:
        emit_json({"receipt": receipt_id, "report": report.model_dump(mode="json")})
    else:
        table = Table("stage", "kind", "band", "rel", "max abs", "mean abs", "worst at / divergence", title="equivalence")
        for s in report.stages:
            where = str(s.first_divergence) if s.kind == "tokens" else str(s.worst_index)
            table.add_row(s.stage, s.kind, s.band, _fmt(s.rel), _fmt(s.max_abs_err), _fmt(s.mean_abs_err), where)
        console.print(table)
        console.print(f"overall: [bold]{report.band}[/bold]  receipt {receipt_id}")
    if not report.passed:
        raise EquivalenceError(f"RED: {receipt.error}; receipt {receipt_id}")


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3e}"


COMMANDS = (equivalence,)
