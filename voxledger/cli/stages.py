"""Stage commands: train, promote, eval run/report, alias history, pipeline run, serve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pydantic
from rich.table import Table

from voxledger.cli.common import (
    cli_console,
    emit_json,
    interval_cell,
    json_option,
    open_home,
    plans_dir,
    print_stages,
    resolve_node,
    resolve_receipt,
    run_flow,
)
from voxledger.schemas.errors import validation_lines
from voxledger.schemas.multiplicity import family_line, p_with_adjusted

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
    click.echo(f"next: voxledger promote {out.receipt_id[:12]} --corpus {corpus}")


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
    out = run_flow(ctx, "voxledger.flows.promote:promote", str(corpus.absolute()), run_id, str(policy_file.absolute()), quiet=as_json)
    r = out.receipt.result
    if as_json:
        emit_json({"receipt": out.receipt_id, "cached": out.cached, "promoted": r.promoted})
        return
    click.echo(f"promoted {r.promoted}{' [cached]' if out.cached else ''}; receipt {out.receipt_id}")
    if r.error_control:
        click.echo(f"error control: {r.error_control}")


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


@click.group("alias")
def alias_group() -> None:
    """Aliases (champion, candidate, ...): they move only through promotion receipts."""


@alias_group.command("history")
@click.argument("alias", required=False)
@click.option("--at", "at", default=None, help="Only the move in force at this ISO date/time (e.g. 2026-11-29T12:00:00Z).")
@json_option("the moves")
@click.pass_context
def alias_history(ctx: click.Context, alias: str | None, at: str | None, as_json: bool) -> None:
    """Show the append-only alias history ("what was champion on date D, and why").

    Example: voxledger alias history champion --at 2026-11-29T12:00:00Z
    """
    if at:
        at = _iso_time(at)
    from voxledger.stores.queries import alias_moves

    rows, known = alias_moves(open_home(ctx, existing=True).catalog, alias, at)
    if alias and alias not in known:
        raise click.ClickException(
            f"no alias {alias!r} in this home's history; known aliases: {', '.join(known) or 'none (no promotion recorded yet)'}"
        )
    if as_json:
        emit_json([dict(zip(("alias", "target", "base", "moved_at", "reason", "receipt"), r, strict=True)) for r in rows])
        return
    table = Table("alias", "target", "moved at", "reason", "receipt")
    for a, t, _, m, why, rid in rows:
        table.add_row(a, t[:16], str(m), why, rid[:16])
    console.print(table)


@click.group("pipeline")
def pipeline_group() -> None:
    """The orchestrated pipeline."""


@pipeline_group.command("run")
@click.argument("plan_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--corpus", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True)
@click.option(
    "--packets", "packets_dir", type=click.Path(file_okay=False, path_type=Path), default=None, help="Write listening packets here."
)
@json_option("the stage outcomes")
@click.pass_context
def pipeline_run(ctx: click.Context, plan_file: Path, corpus: Path, packets_dir: Path | None, as_json: bool) -> None:
    """Run audit -> train -> promote -> evaluate -> package -> packets from a pipeline plan.

    Example: voxledger pipeline run plans/pipeline-demo.yaml --corpus ./demo/corpus --packets ./demo/packets
    """
    out = run_flow(
        ctx,
        "voxledger.flows.pipeline:pipeline",
        str(corpus.absolute()),
        str(plan_file.absolute()),
        str(PLANS),
        str(packets_dir.absolute()) if packets_dir else None,
    )
    if as_json:
        emit_json({"pipeline_receipt": out.pipeline_receipt, "stages": [s.model_dump(mode="json") for s in out.stages]})
    else:
        print_stages(out.stages)
        click.echo(f"pipeline receipt {out.pipeline_receipt}")


@pipeline_group.command("stages")
@click.argument("plan_file", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option("the stage table")
def pipeline_stages(plan_file: Path | None, as_json: bool) -> None:
    """List the stage table: each stage's flow, task, receipt and plan; with PLAN_FILE, whether and where each runs.

    Example: voxledger pipeline stages plans/pipeline-demo.yaml
    """
    from voxledger.flows.stages import describe
    from voxledger.schemas.pipeline import PipelinePlan
    from voxledger.tasks.plans import load_plan

    rows = describe(load_plan(plan_file, PipelinePlan) if plan_file else None)
    if as_json:
        emit_json(rows)
        return
    columns = ["stage", "flow", "task", "receipt", "plan_field", "verdict", *(["plan_file", "enabled", "pool"] if plan_file else [])]
    table = Table(*columns, title="pipeline stages, in run order")
    for row in rows:
        table.add_row(*("-" if row[c] is None else str(row[c]) for c in columns))
    console.print(table)


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


def _iso_time(text: str) -> str:
    """``text`` as an ISO 8601 time (UTC when no zone is given), or a usage error naming it."""
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise click.BadParameter(
            f"{text!r} is not an ISO date/time; give e.g. 2026-11-29 or 2026-11-29T12:00:00Z", param_hint="--at"
        ) from exc
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).isoformat()


COMMANDS = (train, promote, eval_group, alias_group, pipeline_group, checkpoints_group)
