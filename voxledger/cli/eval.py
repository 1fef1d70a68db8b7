"""``voxledger eval``: run a frozen evaluation plan, report a receipt, pin an evaluator model's digest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from voxledger.cli.common import (
    cli_console,
    emit_json,
    interval_cell,
    json_option,
    open_home,
    plans_dir,
    resolve_node,
    resolve_receipt,
    run_flow,
)
from voxledger.schemas.multiplicity import family_line, p_with_adjusted

console = cli_console()
PLANS = plans_dir()


@click.group("eval")
def eval_group() -> None:
    """Evaluations on frozen plans."""


@eval_group.command("run")
@click.argument("plan_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--corpus", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option("--bind", "binds", multiple=True, help="NAME=SHA256 (or a unique prefix) for input:NAME artifacts in the plan.")
@json_option("the evaluation result")
@click.pass_context
def eval_run(ctx: click.Context, plan_file: Path, corpus: Path, binds: tuple[str, ...], as_json: bool) -> None:
    """Run a frozen evaluation plan (registered before any generation).

    Example: voxledger eval run plans/eval-demo.yaml --corpus ./demo/corpus --bind base=SHA --bind adapter=SHA
    """

    bindings = {name: resolve_node(ctx, digest) for name, digest in (_binding(b) for b in binds)}
    out = run_flow(ctx, "voxledger.flows.evaluate:evaluate", str(corpus.absolute()), str(plan_file.absolute()), bindings, quiet=as_json)
    doc = out.receipt.model_dump(mode="json")  # the typed outcome the flow returned: nothing is read back
    if as_json:
        emit_json({"receipt": out.receipt_id, "cached": out.cached, "result": doc["result"]})
        return
    _print_report(doc)
    click.echo(f"receipt {out.receipt_id}")


def _binding(text: str) -> tuple[str, str]:
    name, sep, digest = text.partition("=")
    if not sep or not name.strip() or not digest.strip():
        raise click.BadParameter(f"{text!r} is not NAME=SHA256 (e.g. --bind base=3fa2c1d9...)", param_hint="--bind")
    return name.strip(), digest.strip()


@eval_group.command("model-digest")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--kind", type=click.Choice(["asr", "speaker"]), default="asr", show_default=True, help="Which spec the lines are for.")
@json_option("the digests")
def eval_model_digest(folder: Path, kind: str, as_json: bool) -> None:
    """Print the digests that pin an evaluator model folder you bring, as the plan lines that name it.

    ``folder_sha256`` covers every file of the folder (path and content); an ASR folder's
    ``model.bin`` is pinned on its own too. Paste the lines under ``metrics.asr`` (a CTranslate2
    Whisper folder) or ``metrics.speaker`` (a WavLMForXVector folder).

    Example: voxledger eval model-digest ~/models/whisper-large-v3-ct2
    """
    from voxledger.stores.hashing import sha256_file
    from voxledger.tasks.metrics.models import folder_sha256

    folder = folder.absolute()
    doc: dict[str, Any] = {"model_name": folder.name, "model_dir": str(folder), "folder_sha256": folder_sha256(folder)}
    if kind == "asr":
        if not (folder / "model.bin").is_file():
            raise click.ClickException(
                f"{folder} has no model.bin: an ASR folder is a CTranslate2 Whisper model (ct2-transformers-converter)"
            )
        doc |= {"model_package": None, "model_sha256": sha256_file(folder / "model.bin")}
    else:
        doc = {"name": "speaker_wavlm_xvector", **doc}
    if as_json:
        emit_json(doc)
        return
    import yaml

    click.echo(f"# metrics.{kind} of an evaluation plan (add language, device, compute_type as you need)")
    click.echo(yaml.safe_dump({kind: doc}, sort_keys=False, allow_unicode=True).rstrip())


@eval_group.command("report")
@click.argument("receipt_id")
@json_option("the evaluation result")
@click.pass_context
def eval_report(ctx: click.Context, receipt_id: str, as_json: bool) -> None:
    """Print an evaluation's per-candidate metrics and paired comparisons.

    Example: voxledger eval report 5d0c...
    """
    doc = open_home(ctx, existing=True).receipts.read_document(resolve_receipt(ctx, receipt_id, "evaluation"))
    if as_json:
        emit_json(doc["result"])
    else:
        _print_report(doc)


def _print_report(doc: dict[str, Any]) -> None:
    from voxledger.tasks.metrics.registry import shown_metrics

    result = doc["result"]
    SHOWN = shown_metrics(sorted({m for s in result["summaries"] for m in s["overall"]}))
    table = Table(
        "candidate",
        "invalid",
        "gate fail",
        *SHOWN,
        title=f"evaluation {doc['parameters']['plan_name']} (predicted MOS is a model's prediction)",
    )
    for s in result["summaries"]:
        table.add_row(
            s["candidate"],
            f"{s['invalid_rate']:.0%}",
            f"{s['content_gate_fail_rate']:.0%}",
            *(interval_cell(s["overall"].get(m)) for m in SHOWN),
        )
    console.print(table)
    comp = Table(
        "candidate - baseline",
        "metric",
        "delta [CI]",
        "test",
        "p",
        "units",
        title="paired comparisons (unit: prompt; seeds averaged within a prompt)",
    )
    notes: set[str] = set()
    family = ""
    for c in result["comparisons"]:
        if c["metric"] in SHOWN:
            t = c["test"]
            p = "-" if t["p_value"] is None else p_with_adjusted(t["p_value"], t.get("p_adjusted"), t.get("adjustment"))
            if t.get("p_adjusted") is not None:
                family = family_line(t["adjustment"], t["family"], t["family_size"])
            comp.add_row(
                f"{c['candidate']} - {c['baseline']}",
                c["metric"],
                interval_cell(c["delta"], signed=True),
                f"{t['method']}",
                p,
                f"{t['units']} prompts / {c['n_pairs']} pairs",
            )
            notes.update(n for n in (c["delta"].get("note"), t.get("note"), c["delta"].get("fallback")) if n)
    console.print(comp)
    if family:
        console.print(family)
    if result.get("profile"):
        console.print(f"set beside the {result['profile']} protocol; this run differs from it in:")
        for line in result.get("deviations", []):
            console.print(f"  - {line}")
    if result.get("failures"):
        console.print(result["failures"])
    for c in result["comparisons"]:
        f = c.get("failures")
        if f and c["metric"] in SHOWN:
            console.print(
                f"{c['candidate']} - {c['baseline']} {c['metric']} in two parts: failed prompts (mean >= {f['threshold']:g}) "
                f"{f['candidate_failed']} vs {f['baseline_failed']} of {f['prompts']}, rate difference "
                f"{interval_cell(f['rate_delta'], signed=True)}; delta over the {f['kept']['units']} prompts kept "
                f"{interval_cell(f['kept'], signed=True)}"
            )
    for n in sorted(notes):
        console.print(f"note: {n}")


COMMANDS = (eval_group,)
