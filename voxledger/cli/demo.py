"""``voxledger demo``: the demo corpus, a newcomer's voice, the whole pipeline end to end, its report."""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from voxledger.cli.common import cli_console, emit_json, json_option, open_home, plans_dir, print_stages, run_flow
from voxledger.cli.common import interval_cell as _iv

console = cli_console()


@click.group()
def demo() -> None:
    """The reproducible demo: corpus and the whole pipeline on the embedded defaults."""


@demo.command("corpus")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--size", type=click.Choice(["tiny", "small", "full"]), default="full", show_default=True)
@click.option("--flawed", is_flag=True, help="Plant one problem of each kind the audit must catch (listed in planted.json).")
@click.option(
    "--language",
    type=click.Choice(["en", "zh"]),
    default="en",
    show_default=True,
    help="en: English voices reading Harvard sentences; zh: Mandarin voices (espeak-ng cmn) reading everyday sentences.",
)
@json_option("what was written")
def demo_corpus(out: Path, size: str, flawed: bool, language: str, as_json: bool) -> None:
    """Synthesise the multi-speaker espeak-ng demo corpus (deterministic: identical bytes every run).

    Example: voxledger demo corpus ./demo/corpus --size small
    Example: voxledger demo corpus ./demo/corpus-zh --language zh
    """
    from voxledger.tasks.corpus.demo import build_demo_corpus
    from voxledger.tasks.corpus.demo_zh import build_mandarin_corpus

    # per language: the builder, what it makes, and the audit policy the next step names
    build, what, policy = {
        "en": (build_demo_corpus, "demo corpus", ""),
        "zh": (build_mandarin_corpus, "Mandarin demo corpus", " --policy " + _bundled_plan("audit-demo-zh.yaml")),
    }[language]
    with console.status(f"synthesising the {size} {what}") if not as_json else nullcontext():
        info = build(out, size=size, flawed=flawed)  # type: ignore[arg-type]
    summary = {
        "out": str(info.out_dir),
        "manifest": str(info.manifest_path),
        "size": info.size,
        "flawed": info.flawed,
        "utterances": info.utterance_count,
        "splits": info.split_utterances,
        "speakers": [v.speaker for v in info.voices],
        "planted": len(info.planted),
    }
    if as_json:
        emit_json(summary)
        return
    splits = ", ".join(f"{k} {v}" for k, v in sorted(info.split_utterances.items()))
    click.echo(f"wrote {info.utterance_count} utterances to {info.out_dir} ({splits})")
    click.echo("speakers: " + ", ".join(f"{v.speaker} ({v.role}, {v.espeak_voice})" for v in info.voices))
    if info.flawed:
        click.echo(f"planted problems: {len(info.planted)} (listed in {info.out_dir / 'planted.json'})")
    click.echo(f"next: voxledger audit {info.out_dir}{policy}")


@demo.command("voice")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--size", type=click.Choice(["tiny", "small", "full"]), default="full", show_default=True)
@json_option("what was written")
def demo_voice(out: Path, size: str, as_json: bool) -> None:
    """Synthesise one voice in LJSpeech layout (metadata.csv + wavs/, 22.05 kHz, no splits): a stand-in
    for your own recordings, in a voice the shipped base has never heard.

    Example: voxledger demo voice ./my-voice && voxledger init ./my-voice
    """
    from voxledger.tasks.corpus.demo import build_voice_corpus

    with console.status(f"synthesising the {size} voice corpus") if not as_json else nullcontext():
        folder, clips = build_voice_corpus(out, size=size)  # type: ignore[arg-type]
    if as_json:
        emit_json({"out": str(folder), "clips": clips, "layout": "ljspeech"})
        return
    click.echo(f"wrote {clips} clips to {folder} (LJSpeech layout: metadata.csv, wavs/)")
    click.echo(f"next: voxledger init {folder}")


@demo.command("run")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("demo"), show_default=True)
@click.option(
    "--plan",
    "plan_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A pipeline plan  [default: plans/pipeline-demo.yaml, on the shipped base]",
)
@click.option(
    "--train-base",
    is_flag=True,
    help="Train the base on the corpus's base voices first (plans/pipeline-demo-train-base.yaml; about 13 min more on 2 fp32 cores).",
)
@json_option("the stage outcomes and the dashboard path")
@click.pass_context
def demo_run(ctx: click.Context, out: Path, plan_file: Path | None, train_base: bool, as_json: bool) -> None:
    """Build the demo corpus, run the whole pipeline, export packets and write the dashboard.

    The LoRA adapter is trained on the base that ships with the package (`voxledger base list`);
    --train-base trains that base here first.

    Example: voxledger demo run --out ./demo
    """
    if plan_file is not None and train_base:
        raise click.UsageError("--plan and --train-base contradict each other; give one")
    plan_file = plan_file or plans_dir() / ("pipeline-demo-train-base.yaml" if train_base else "pipeline-demo.yaml")
    from voxledger.dashboards.report import build_dashboard
    from voxledger.tasks.corpus.demo import build_demo_corpus

    home = open_home(ctx)
    corpus = out / "corpus"
    t0 = time.perf_counter()
    if not (corpus / "manifest.jsonl").is_file():
        from voxledger.hosting.server import start_in_background

        server = start_in_background(home.root)  # the home's Prefect server starts while the corpus is synthesised
        with console.status("synthesising the demo corpus (espeak-ng, 5 voices, 1,460 utterances)") if not as_json else nullcontext():
            build_demo_corpus(corpus, size="full")
        if server is not None:
            server.join()
    t_corpus = time.perf_counter() - t0
    summary = run_flow(
        ctx,
        "voxledger.flows.pipeline:pipeline",
        str(corpus.absolute()),
        str(plan_file.absolute()),
        str(plans_dir()),
        str((out / "packets").absolute()),
        quiet=as_json,
    )
    dash = build_dashboard(home.catalog, out / "dashboard.html", blobs=home.blobs.get_bytes)
    if as_json:
        emit_json(
            {
                "pipeline_receipt": summary.pipeline_receipt,
                "dashboard": str(dash.absolute()),
                "stages": [s.model_dump(mode="json") for s in summary.stages],
            }
        )
        return
    print_stages(summary.stages)
    _final_table(home, summary, dash, t_corpus, time.perf_counter() - t0)


def _stages_writing(kind: str) -> set[str]:
    """The stages that write receipts of ``kind`` (the stage table's rows)."""
    from voxledger.schemas.stages import rows_writing

    return {r.name for r in rows_writing(kind)}


def _summary(home: Any, stage: str, rid: str) -> str | None:
    """The one-line summary the stage's module gives of its receipt (None: a stage the table does not hold)."""
    import importlib

    from voxledger.schemas.stages import stage_row

    row = stage_row(stage)
    if row is None:
        return None
    line: str = importlib.import_module(row.module).summary(home.receipts.read(rid))
    return line


def _final_table(home: Any, summary: Any, dash: Path, t_corpus: float, total: float) -> None:
    doc = home.receipts.read_document(next(s.receipt_id for s in summary.stages if s.stage in _stages_writing("evaluation")))
    table = Table(
        "candidate", "WER (whisper_en)", "speaker sim", "predicted MOS", "gate pass", title="demo evaluation (held-out test prompts)"
    )
    for s in doc["result"]["summaries"]:
        o = s["overall"]

        def f(m: str, o: dict[str, Any] = o) -> str:
            return _iv(o.get(m))

        table.add_row(s["candidate"], f("wer:whisper_en"), f("speaker_sim"), f("predicted_mos_ovrl"), f("content_gate_pass"))
    console.print(table)
    console.print(f"corpus {t_corpus:.0f} s, total {total:.0f} s; pipeline receipt {summary.pipeline_receipt}")
    console.print(f"dashboard: [bold]{dash.absolute()}[/bold]")


@demo.command("report")
@click.argument("pipeline_run", required=False)
@json_option("the figures")
@click.pass_context
def demo_report(ctx: click.Context, pipeline_run: str | None, as_json: bool) -> None:
    """Print the README's "what the demo measured" tables from a pipeline run's receipts (Markdown).

    Every number is read from the receipts of PIPELINE_RUN (default: the latest succeeded one),
    with the machine and code they were measured on, so the README is regenerated, never typed.

    Example: voxledger demo report > measured.md
    """
    from voxledger.cli.common import resolve_receipt
    from voxledger.schemas.evaluation import EvaluationReceipt
    from voxledger.schemas.pipeline import PipelineRunReceipt
    from voxledger.stores.queries import latest_pipeline_run

    home = open_home(ctx, existing=True)
    rid = resolve_receipt(ctx, pipeline_run, "pipeline_run") if pipeline_run else latest_pipeline_run(home.catalog)
    if rid is None:
        raise click.ClickException("no succeeded pipeline run in this home; run `voxledger demo run` first")
    run = home.receipts.read(rid, PipelineRunReceipt)
    stages: list[dict[str, Any]] = []
    for st in run.stages:
        row: dict[str, Any] = {"stage": st.stage, "wall_s": round(st.wall_s, 1), "cached": st.cached, "status": st.status}
        if st.receipt_id:
            row["result"] = _summary(home, st.stage, st.receipt_id)
        stages.append(row)
    ev_id = next((s.receipt_id for s in run.stages if s.stage in _stages_writing("evaluation")), None)
    candidates: list[dict[str, Any]] = []
    method = ""
    if ev_id:
        evr = home.receipts.read(ev_id, EvaluationReceipt)
        first = next((iv for summ in evr.result.summaries for iv in summ.overall.values()), None)
        if first is not None:
            method = f"{first.method} intervals over {first.units} prompts (the unit), {evr.parameters.n_generations} generations"
        for summ in evr.result.summaries:
            o = summ.overall
            candidates.append(
                {
                    "candidate": summ.candidate,
                    "wer_mean": o["wer:whisper_en"].mean if "wer:whisper_en" in o else None,
                    "wer_pooled": summ.micro_wer.get("whisper_en"),
                    "speaker_sim": o["speaker_sim"].mean if "speaker_sim" in o else None,
                }
            )
    env = run.environment
    machine = f"{env.platform}, Python {env.python}, torch {env.torch}; code {(env.code.git_commit or env.code.source_sha256)[:12]}"
    if as_json:
        emit_json({"pipeline_run": rid, "machine": machine, "stages": stages, "candidates": candidates, "evaluation_method": method})
        return
    click.echo(f"Pipeline run `{rid[:16]}`, {run.finished_at:%Y-%m-%d}, {machine}.\n")
    click.echo("| stage | wall | cached | result |\n|---|---|---|---|")
    for r in stages:
        click.echo(f"| {r['stage']} | {r['wall_s']:.0f} s | {'yes' if r['cached'] else 'no'} | {r.get('result', r['status'])} |")
    click.echo(f"\nPipeline {sum(r['wall_s'] for r in stages):.0f} s of stage time." + (f" Evaluation: {method}." if method else "") + "\n")
    click.echo("| candidate | WER (mean of prompts) | WER (pooled) | speaker similarity |\n|---|---|---|---|")

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    for c in candidates:
        click.echo(f"| {c['candidate']} | {fmt(c['wer_mean'])} | {fmt(c['wer_pooled'])} | {fmt(c['speaker_sim'])} |")


COMMANDS = (demo,)


def _bundled_plan(name: str) -> str:
    """A bundled plan as a hint names it: ``plans/NAME`` where that is the bundled file (a checkout's
    root), else its installed path, so the hint works when pasted anywhere."""
    here = Path("plans") / name
    bundled = plans_dir() / name
    return str(here) if here.is_file() and here.resolve() == bundled.resolve() else str(bundled)
