"""``voxledger equivalence compare``: stage-by-stage comparison of two runtimes."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from voxledger.cli import emit_json, main, open_home
from voxledger.schemas.errors import EquivalenceError

console = Console()
DEFAULT_PLAN = Path(__file__).resolve().parent.parent / "plans" / "equivalence-default.yaml"


def _runtime(spec: str) -> dict[str, object]:
    """Parse ``name[,dtype=..][,device=..][,tf32]`` into runtime settings."""
    name, *opts = spec.split(",")
    out: dict[str, object] = {"name": name}
    for opt in opts:
        key, _, value = opt.partition("=")
        out[key] = True if key == "tf32" and not value else value
    return out


@main.group()
def equivalence() -> None:
    """Numerical equivalence between runtimes of one model."""


@equivalence.command("compare")
@click.argument("reference")
@click.argument("candidate")
@click.option("--plan", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=DEFAULT_PLAN, show_default=True)
@click.option("--ref-runtime", default="reference", show_default=True, help="name[,dtype=float32][,device=cpu][,tf32]")
@click.option("--cand-runtime", default="candidate", show_default=True, help="name[,dtype=..][,device=..][,tf32]")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def compare(ctx: click.Context, reference: str, candidate: str, plan: Path, ref_runtime: str, cand_runtime: str, as_json: bool) -> None:
    """Compare stage dumps (folders of tokens.i32 / mel.f32 / pcm.f32 / .npy, or stored tree
    digests); record an equivalence receipt; exit non-zero on RED.

    Example: voxledger equivalence compare dumps/torch dumps/ggml --cand-runtime ggml,dtype=f16
    """
    from voxledger.schemas.equivalence import RuntimeDescriptor
    from voxledger.tasks.equivalence.compare import load_equivalence_plan
    from voxledger.tasks.equivalence.record import record_equivalence

    out = record_equivalence(
        open_home(ctx), reference, candidate, load_equivalence_plan(plan), plan_name=plan.name,
        ref_runtime=RuntimeDescriptor.model_validate(_runtime(ref_runtime)),
        cand_runtime=RuntimeDescriptor.model_validate(_runtime(cand_runtime)),
    )  # fmt: skip
    report = out.receipt.report
    if as_json:
        emit_json({"receipt": out.receipt_id, "report": report.model_dump(mode="json")})
    else:
        table = Table("stage", "kind", "band", "rel", "max abs", "mean abs", "worst at / divergence", title="equivalence")
        for s in report.stages:
            where = str(s.first_divergence) if s.kind == "tokens" else str(s.worst_index)
            table.add_row(s.stage, s.kind, s.band, _fmt(s.rel), _fmt(s.max_abs_err), _fmt(s.mean_abs_err), where)
        console.print(table)
        console.print(f"overall: [bold]{report.band}[/bold]  receipt {out.receipt_id}")
    if not report.passed:
        raise EquivalenceError(f"RED: {out.receipt.error}; receipt {out.receipt_id}")


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3e}"
