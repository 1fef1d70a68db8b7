"""``voxledger cosyvoice3 preflight``: check a CosyVoice checkout and model folder before training."""

from __future__ import annotations

from pathlib import Path

import click

from voxledger.cli.common import emit_json, json_option
from voxledger.schemas.errors import TrainingError
from voxledger.settings import load_settings

MARK = {"error": "ERROR", "warning": "warn", "handled": "fixed"}


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
@json_option("the report")
def preflight(checkout: Path, model_dir: Path, python: Path | None, as_json: bool) -> None:
    """Check CHECKOUT and MODEL_DIR against the upstream manifest and the installed torch,
    transformers, torchaudio and torchcodec; print each known incompatibility with its fix.
    Writes nothing; exits non-zero when anything would stop training or synthesis.

    Example: voxledger cosyvoice3 preflight /opt/CosyVoice /opt/CosyVoice/pretrained_models/Fun-CosyVoice3-0.5B
    """
    from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
    from voxledger.tasks.backends.cosyvoice3.environment import check_environment

    python = python or load_settings().cosyvoice.python
    report = check_environment(CosyVoice3Config(checkout_dir=checkout, model_dir=model_dir), python)
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        versions = ", ".join(f"{k} {v or 'not installed'}" for k, v in report.versions.items())
        click.echo(f"upstream manifest: commit {report.manifest_commit}; this environment: {versions}")
        for f in report.findings:
            click.echo(f"[{MARK[f.severity]}] {f.id}: {f.message}\n        fix: {f.fix}")
        if not report.findings:
            click.echo("no findings")
    if report.errors:
        raise TrainingError(f"cosyvoice3 preflight: {len(report.errors)} error(s) ({', '.join(sorted({f.id for f in report.errors}))}); "
                            "fix them before training")  # fmt: skip


COMMANDS = (cosyvoice3,)
