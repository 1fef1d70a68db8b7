"""``voxledger init``: editable plans for a user's own corpus (writing files is not a stage: no flow)."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import click

from voxledger.cli.common import emit_json, json_option
from voxledger.schemas.training import DEFAULT_BACKEND, BackendName

BACKEND_NAMES = get_args(BackendName)


@click.command("init")
@click.argument("corpus", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder the plans are written to (default: plans-NAME, so several corpora sit side by side).",
)
@click.option(
    "--base",
    type=click.Choice(["auto", "shipped", "train"]),
    default="auto",
    show_default=True,
    help="The adapter's base: the one shipped with the backend, or trained here on the other speakers "
    "(auto: train when there are other speakers, else shipped).",
)
@click.option(
    "--backend",
    type=click.Choice(list(BACKEND_NAMES)),
    default=DEFAULT_BACKEND,
    show_default=True,
    help="Model family the plans train and evaluate (cosyvoice3 adapts its own configured model: docs/cosyvoice3.md).",
)
@click.option("--target", default=None, help="Speaker the adapter learns (default: the one with most train utterances).")
@click.option("--train-split", default=None, help="Split to train on (default: the one named like 'train').")
@click.option(
    "--dev-split", default=None, help="Held-out split for CV loss and the promotion gate (default: 'dev', 'valid', 'val' or 'cv')."
)
@click.option("--test-split", default=None, help="Split of the final evaluation prompts (default: 'test' or 'eval'; else the dev split).")
@click.option("--name", default=None, help="Plan name prefix (default: the corpus folder's name).")
@click.option("--force", is_flag=True, help="Overwrite plan files already in --out.")
@click.option(
    "--sweep",
    is_flag=True,
    help="Also write sweep.yaml: the adapter at half, the same and twice its learning rate, judged in one gate (voxledger sweep run).",
)
@json_option("what was decided and written")
def init(
    corpus: Path,
    out: Path | None,
    base: str,
    backend: str,
    target: str | None,
    train_split: str | None,
    dev_split: str | None,
    test_split: str | None,
    name: str | None,
    force: bool,
    sweep: bool,
    as_json: bool,
) -> None:
    """Write editable plans (audit, training, promotion, evaluation, listening, pipeline) for CORPUS.

    Splits, speakers, language and audio format come from the corpus manifest; each file starts
    with the command that runs it. Refuses, writing nothing, when the corpus lacks what a plan
    needs (no dev split, a target speaker without dev utterances, mixed languages).

    A one-speaker corpus (LJSpeech layout, say) gets an adapter on the base the backend ships;
    a corpus without splits is split deterministically (no recording or sentence crosses splits).

    With --sweep, a corpus that gets an adapter also gets sweep.yaml, a small sweep of it
    (docs/sweeps.md).

    Example: voxledger init ./my-corpus --target alice
    """
    from voxledger.tasks.plans_init import init_plans

    result = init_plans(
        corpus,
        out,
        name=name,
        force=force,
        base=base,  # type: ignore[arg-type]
        backend=backend,  # type: ignore[arg-type]
        sweep=sweep,
        target=target,
        train_split=train_split,
        dev_split=dev_split,
        test_split=test_split,
    )
    r = result.roles
    out = result.written[0].parent
    summary = {
        "corpus": str(corpus),
        "out": str(out),
        "train_split": r.train,
        "dev_split": r.dev,
        "test_split": r.test,
        "target": r.target,
        "base_speakers": list(r.base_speakers),
        "shipped_base": r.shipped.name if r.shipped else None,
        "backend": backend,
        "own_base": r.own_base,
        "language": r.language,
        "sample_rate_hz": r.sample_rate_hz,
        "written": [str(p) for p in result.written],
        "notes": list(result.notes),
    }
    if as_json:
        emit_json(summary)
        return
    click.echo(
        f"splits: train {r.train}, dev {r.dev}, test {r.test or '(none: evaluation reads dev)'}; language {r.language}; {r.sample_rate_hz} Hz"
    )
    base_note = f"; base speakers {', '.join(r.base_speakers)}" if r.base_speakers else ""
    base_note += f"; base: shipped {r.shipped.name}" if r.shipped else ""
    click.echo(f"target speaker {r.target}{base_note}")
    for path in result.written:
        click.echo(f"wrote {path}")
    for note in result.notes:
        click.echo(f"note: {note}")
    if "pipeline.yaml" in {p.name for p in result.written}:
        click.echo(f"next: voxledger pipeline run {out}/pipeline.yaml --corpus {corpus} --packets ./packets")
    else:
        click.echo(f"next: voxledger audit {corpus} --policy {out}/audit.yaml")


COMMANDS = (init,)
