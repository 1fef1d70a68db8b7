"""``voxledger corpus``: bring a corpus in from the layout it already has, and prepare it for training."""

from __future__ import annotations

from pathlib import Path

import click

from voxledger.cli.common import cli_console, emit_json, json_option
from voxledger.tasks.corpus.importers import IMPORTERS

console = cli_console()
LAYOUTS = ("auto", "jsonl", "kaldi", *IMPORTERS)


@click.group("corpus")
def corpus() -> None:
    """Import public corpus layouts and prepare corpora for training.

    Example: voxledger corpus import ljspeech ./LJSpeech-1.1 --out ./lj/manifest.jsonl
    """


@corpus.command("import")
@click.argument("layout", type=click.Choice(LAYOUTS))
@click.argument("src", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the utterances as a voxledger manifest.jsonl here (audio paths relative to it; never overwrites).",
)
@click.option(
    "--audio-root",
    "audio_roots",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A folder outside SRC its manifest may point into; repeatable.",
)
@json_option("the summary")
def import_corpus(layout: str, src: Path, out: Path | None, audio_roots: tuple[Path, ...], as_json: bool) -> None:
    """Read SRC in LAYOUT (or detect it with ``auto``) into voxledger utterances; summarise, or
    write them with --out. Lines that cannot become utterances are listed; the audit reports them too.

    Example: voxledger corpus import libritts ./LibriTTS_R --out ./libritts/manifest.jsonl
    """
    from voxledger.tasks.corpus.manifests import load_corpus, write_jsonl

    loaded = load_corpus(src, audio_roots=audio_roots, layout=layout)
    if out is not None:
        write_jsonl(loaded, out)
    utts = loaded.utterances
    summary = {
        "source": str(src),
        "utterances": len(utts.utterances),
        "splits": utts.splits(),
        "speakers": len({u.speaker for u in utts.utterances}),
        "segments": sum(u.is_segment for u in utts.utterances),
        "issues": [f"{i.file}:{i.line}: {i.message}" for i in loaded.issues],
        "written": str(out) if out else None,
    }
    if as_json:
        emit_json(summary)
        return
    console.print(
        f"{summary['utterances']} utterances, {summary['speakers']} speakers, splits {summary['splits']}, {summary['segments']} segments"
    )
    for line in list(summary["issues"])[:20]:  # type: ignore[call-overload]
        console.print(f"  issue: {line}")
    if out is not None:
        if out.absolute().parent.is_relative_to(src.absolute()):  # beside its audio: init reads it and writes this corpus's plans
            console.print(f"wrote {out}; next: voxledger init {out.parent}")
        else:  # its audio paths lead out of its folder: the audit is told where they may point
            console.print(f"wrote {out}; next: voxledger audit {out} --audio-root {src}")


@corpus.command("prepare")
@click.argument("src", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--policy",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="The audit policy training will be held to: its sample_rate_hz, channels and loudness_lufs.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for the derived corpus (default <home>/corpora/<name>-<key>); never overwritten.",
)
@click.option(
    "--audio-root",
    "audio_roots",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A folder outside SRC its manifest may point into; repeatable. Not part of any identity.",
)
@json_option("the summary")
@click.pass_context
def prepare(ctx: click.Context, src: Path, policy: Path, out: Path | None, audio_roots: tuple[Path, ...], as_json: bool) -> None:
    """Cut segments, down-mix, resample (soxr) and loudness-normalise SRC into a derived corpus
    that meets POLICY, with a receipt binding each derived file to its source; then audit and
    train on the derived corpus.

    Example: voxledger corpus prepare ./data --audio-root /mnt/audio --policy plans/audit-demo.yaml --out ./prepared
    """
    from voxledger.cli.common import run_flow

    outcome = run_flow(
        ctx,
        "voxledger.flows.corpus:prepare_corpus",
        str(src.absolute()),
        str(policy.absolute()),
        str(out.absolute()) if out else None,
        tuple(str(r.absolute()) for r in audio_roots),
        quiet=as_json,
    )
    r = outcome.receipt.result
    summary = {"receipt": outcome.receipt_id, "cached": outcome.cached, "corpus": str(outcome.corpus_dir), **r.model_dump(mode="json")}
    if as_json:
        emit_json(summary)
        return
    console.print(
        f"{r.n_utterances} utterances ({r.hours:.3f} h): {r.n_cut} cut, {r.n_resampled} resampled, {r.n_downmixed} down-mixed, "
        f"{r.n_loudness_normalised} loudness-normalised, {r.n_peak_limited} peak-limited{' (cached)' if outcome.cached else ''}"
    )
    console.print(f"receipt {outcome.receipt_id}\nnext: voxledger audit {outcome.corpus_dir} --policy {policy}")


@corpus.command("materialise")
@click.argument("src", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="New folder for the copy (never overwritten).")
@click.option(
    "--cwd",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Folder the commands run in (default: the current one, as in a Kaldi recipe).",
)
@click.option("--timeout-s", type=click.FloatRange(min=1), default=600.0, show_default=True, help="Longest one command may run.")
@json_option("the summary")
@click.pass_context
def materialise(ctx: click.Context, src: Path, out: Path, cwd: Path | None, timeout_s: float, as_json: bool) -> None:
    """Run every wav.scp pipe command of the Kaldi data directory SRC once, without a shell, into
    a copy at OUT whose wav.scp names the files written; the receipt records each command, the
    program that ran (path and sha256) and the digest of its output.

    Example: voxledger corpus materialise data/train --out data/train_files
    """
    from voxledger.cli.common import run_flow

    done = run_flow(
        ctx,
        "voxledger.flows.corpus:materialise_pipes",
        str(src.absolute()),
        str(out.absolute()),
        str((cwd or Path.cwd()).absolute()),
        timeout_s,
        quiet=as_json,
    )
    r = done.receipt.result
    summary = {"receipt": done.receipt_id, "out": str(out), **r.model_dump(mode="json")}
    if as_json:
        emit_json(summary)
        return
    console.print(f"ran {r.n_commands} commands in {r.seconds:.1f} s into {out} ({r.n_files} files)\nreceipt {done.receipt_id}")
    console.print(f"next: voxledger init {out}")


COMMANDS = (corpus,)
