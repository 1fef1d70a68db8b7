"""``voxledger corpus``: bring a corpus in from the layout it already has, and prepare it for training."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from voxledger.cli import emit_json, main
from voxledger.tasks.corpus.importers import IMPORTERS

console = Console()
LAYOUTS = ("auto", "jsonl", "kaldi", *IMPORTERS)


@main.group("corpus")
def corpus() -> None:
    """Import public corpus layouts and prepare corpora for training.

    Example: voxledger corpus import ljspeech ./LJSpeech-1.1 --out ./lj/manifest.jsonl
    """


@corpus.command("import")
@click.argument("layout", type=click.Choice(LAYOUTS))
@click.argument("src", type=click.Path(exists=True, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the utterances as a voxledger manifest.jsonl here (audio paths relative to it; never overwrites).")
@click.option("--audio-root", "audio_roots", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A folder outside SRC its manifest may point into; repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
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
    summary = {"source": str(src), "utterances": len(utts.utterances), "splits": utts.splits(),
               "speakers": len({u.speaker for u in utts.utterances}), "segments": sum(u.is_segment for u in utts.utterances),
               "issues": [f"{i.file}:{i.line}: {i.message}" for i in loaded.issues], "written": str(out) if out else None}  # fmt: skip
    if as_json:
        emit_json(summary)
        return
    console.print(f"{summary['utterances']} utterances, {summary['speakers']} speakers, splits {summary['splits']}, {summary['segments']} segments")
    for line in summary["issues"][:20]:
        console.print(f"  issue: {line}")
    if out is not None:
        hint = f" --audio-root {src}" if not out.absolute().parent.is_relative_to(src.absolute()) else ""
        console.print(f"wrote {out}; next: voxledger audit {out}{hint} --policy plans/audit-demo.yaml")
