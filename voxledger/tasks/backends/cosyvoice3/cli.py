"""``voxledger cosyvoice3 preflight``: check a CosyVoice checkout and model folder before training.

The CLI attaches `cli_group` through ``tasks/backends/base.py`` ``COMMAND_GROUPS``; importing this
module loads click only (the checks import on use).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from voxledger.schemas.errors import TrainingError, UpstreamError
from voxledger.settings import load_settings

MARK = {"error": "ERROR", "warning": "warn", "handled": "fixed"}


def cli_group() -> click.Group:
    """The ``cosyvoice3`` command group."""
    return cosyvoice3


@click.group()
def cosyvoice3() -> None:
    """The cosyvoice3 backend: a real FunAudioLLM/CosyVoice checkout."""


@cosyvoice3.command("preflight")
@click.argument("checkout", type=click.Path(path_type=Path))
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.option(
    "--python",
    "python",
    type=click.Path(path_type=Path),
    default=None,
    help="Another interpreter (upstream's pins) to report on (default $VOXLEDGER_COSYVOICE_PYTHON); running through it is not implemented.",
)
@click.option(
    "--campplus-onnx",
    type=click.Path(path_type=Path),
    default=None,
    help="The speaker-embedding ONNX (default $VOXLEDGER_COSYVOICE_CAMPPLUS_ONNX, else MODEL_DIR/campplus.onnx).",
)
@click.option(
    "--speech-tokenizer-onnx",
    type=click.Path(path_type=Path),
    default=None,
    help="The speech tokenizer ONNX (default $VOXLEDGER_COSYVOICE_SPEECH_TOKENIZER_ONNX, else MODEL_DIR/speech_tokenizer_v3.onnx).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (for scripts) instead of a table.")
def preflight(
    checkout: Path, model_dir: Path, python: Path | None, campplus_onnx: Path | None, speech_tokenizer_onnx: Path | None, as_json: bool
) -> None:
    """Check CHECKOUT and MODEL_DIR against the upstream manifest: required files, the ONNX graphs'
    inputs and outputs, and upstream's whole import set imported in a child of this interpreter
    (a missing module, a triton that breaks torch / transformers, transformers outside the tested
    range); print each known incompatibility with its fix. Writes nothing; exits non-zero when
    anything would stop training or synthesis.

    Example: voxledger cosyvoice3 preflight /opt/CosyVoice /opt/CosyVoice/pretrained_models/Fun-CosyVoice3-0.5B
    """
    from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
    from voxledger.tasks.backends.cosyvoice3.environment import check_environment

    settings = load_settings().cosyvoice
    python = python or settings.python
    config = CosyVoice3Config(
        checkout_dir=checkout,
        model_dir=model_dir,
        campplus_onnx=campplus_onnx or settings.campplus_onnx,
        speech_tokenizer_onnx=speech_tokenizer_onnx or settings.speech_tokenizer_onnx,
    )
    report = check_environment(config, python)
    if as_json:
        # the CLI's JSON convention (voxledger.cli.common.emit_json): stable key order
        click.echo(json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=True, default=str))
    else:
        versions = ", ".join(f"{k} {v or 'not installed'}" for k, v in report.versions.items())
        click.echo(f"upstream manifest: commit {report.manifest_commit}; this environment: {versions}")
        for f in report.findings:
            click.echo(f"[{MARK[f.severity]}] {f.id}: {f.message}\n        fix: {f.fix}")
        if not report.findings:
            click.echo("no findings")
    if report.errors:
        raise TrainingError(
            f"cosyvoice3 preflight: {len(report.errors)} error(s) ({', '.join(sorted({f.id for f in report.errors}))}); "
            "fix them before training"
        )


@cosyvoice3.command("scaffold")
@click.argument("out_dir", metavar="DIR", type=click.Path(path_type=Path))
@click.option(
    "--layers", type=int, required=True, help="Qwen2 layers and DiT depth (each at most its released count: 24 / 22); widths stay real."
)
@click.option(
    "--checkout",
    type=click.Path(path_type=Path),
    default=None,
    help="The FunAudioLLM/CosyVoice checkout whose classes build it (default $VOXLEDGER_COSYVOICE_DIR).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every random weight (same arguments: same bytes).")
def scaffold(out_dir: Path, layers: int, checkout: Path | None, seed: int) -> None:
    """Write a random-weights model folder in Fun-CosyVoice3-0.5B's layout into DIR (new or empty), built
    with the checkout's own classes at the released widths, only the layer counts reduced: cosyvoice3.yaml,
    llm.pt, flow.pt, hift.pt, CosyVoice-BlankEN/ (bf16 weights, 4.x config, a byte-level BPE tokenizer),
    ONNX stand-ins with upstream's inputs and outputs, and scaffold.json marking it random weights. For
    checking an environment end to end without the released weights; its audio is noise.

    Example: voxledger cosyvoice3 scaffold /tmp/cv3-scaffold --layers 2 --checkout /opt/CosyVoice
    """
    from voxledger.tasks.backends.cosyvoice3.scaffold import scaffold as write_scaffold

    checkout = checkout or load_settings().cosyvoice.dir
    if checkout is None:
        raise UpstreamError("cosyvoice3 scaffold needs a CosyVoice checkout: pass --checkout PATH or set VOXLEDGER_COSYVOICE_DIR")
    info = write_scaffold(out_dir, layers, checkout, seed)
    size = sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file())
    click.echo(
        f"wrote {out_dir}: random weights (seed {seed}; Qwen2 {info['layers']['qwen2']} layers, DiT depth {info['layers']['dit']}), "
        f"{len(info['files']) + 1} files, {size / 1e6:.0f} MB; check it with: voxledger cosyvoice3 preflight {checkout} {out_dir}"
    )
