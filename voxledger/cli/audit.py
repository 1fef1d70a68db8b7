"""``voxledger audit`` and ``voxledger demo corpus``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from voxledger.cli.common import cli_console, emit_json, json_option, open_home, plans_dir, run_flow
from voxledger.schemas.audit import AuditReceipt
from voxledger.schemas.errors import AuditFailedError

console = cli_console()
DEFAULT_POLICY = plans_dir() / "audit-demo.yaml"


@click.command("audit")
@click.argument("corpus", type=click.Path(exists=True, path_type=Path))
@click.option("--policy", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=DEFAULT_POLICY, show_default=True)
@click.option(
    "--audio-root",
    "audio_roots",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A folder outside the corpus its manifest may point into (absolute paths, '..'); repeatable. Not part of any identity.",
)
@json_option("the summary")
@click.option("--max-rows", type=int, default=40, show_default=True, help="Findings rows to print.")
@click.pass_context
def audit(ctx: click.Context, corpus: Path, policy: Path, audio_roots: tuple[Path, ...], as_json: bool, max_rows: int) -> None:
    """Audit a corpus (JSONL or Kaldi) under a frozen policy; exit non-zero when it fails.

    Example: voxledger audit ./demo/corpus --policy plans/audit-demo.yaml

    Example: voxledger audit ./data --audio-root /mnt/audio   (Kaldi wav.scp with absolute paths)
    """

    home = open_home(ctx)
    try:
        out = run_flow(
            ctx,
            "voxledger.flows.audit:audit",
            str(corpus.absolute()),
            str(policy.absolute()),
            tuple(str(r.absolute()) for r in audio_roots),
            quiet=as_json,
        )
    except AuditFailedError as exc:
        if exc.receipt_id is None:
            raise
        _show(home, exc.receipt_id, as_json, max_rows)
        raise
    _show(home, out.receipt_id, as_json, max_rows, out.receipt)
    if not as_json:
        for line in next_after_audit(corpus, policy, out.receipt_id):
            click.echo(f"next: {line}")


def next_after_audit(corpus: Path, policy: Path, receipt_id: str) -> list[str]:
    """The complete training commands after a passing audit, from the plans ``init`` wrote beside the
    policy: the base training when the plans train one, else importing the shipped base and training
    the adapter on it (the shipped tree's digest is known before it is imported). Nothing when the
    policy has no training plan beside it (the demo's bundled policy, say)."""
    from voxledger.schemas.errors import VoxledgerError
    from voxledger.schemas.training import TrainingPlan
    from voxledger.tasks.backends.base import get_backend
    from voxledger.tasks.plans import load_plan
    from voxledger.tasks.shipped_base import read_bundle

    folder, rid = policy.parent, receipt_id[:16]
    if (folder / "train-base.yaml").is_file():
        return [f"voxledger train {corpus} --audit {rid} --plan {folder / 'train-base.yaml'}"]
    adapter = folder / "train-adapter.yaml"
    if not adapter.is_file():
        return []
    try:
        backend = load_plan(adapter, TrainingPlan).backend
        shipped = get_backend(backend).shipped_base()
        tree = read_bundle(shipped).tree_sha256 if shipped is not None else None
    except VoxledgerError:
        return []  # the training command reports what is wrong with its plan
    if tree is None:
        return []
    return [f"voxledger base import {backend}", f"voxledger train {corpus} --audit {rid} --plan {adapter} --base {tree[:16]}"]


def _show(home: Any, receipt_id: str, as_json: bool, max_rows: int, receipt: AuditReceipt | None = None) -> None:
    """Print the audit receipt: the one the flow just returned, or the one stored under ``receipt_id``."""
    if receipt is None:
        receipt = home.receipts.read(receipt_id, AuditReceipt)
    r = receipt.result
    if as_json:
        emit_json(
            {"receipt": receipt_id, "verdict": r.verdict, "counts_by_code": r.counts_by_code, "counts_by_severity": r.counts_by_severity}
        )
        return
    _print_findings(receipt.model_dump(mode="json"), max_rows)
    click.echo(f"receipt {receipt_id}")


def _print_findings(doc: dict, max_rows: int) -> None:  # type: ignore[type-arg]
    result = doc["result"]
    table = Table("severity", "code", "utterances", "message", title=f"audit of {doc['parameters']['corpus_name']}")
    order = {"error": 0, "warning": 1, "info": 2}
    findings = sorted(result["findings"], key=lambda f: (order[f["severity"]], f["code"]))
    for f in findings[:max_rows]:
        more = len(f["utterance_ids"]) - 4
        ids = ", ".join(f["utterance_ids"][:4]) + (f" (+{more} more)" if more > 0 else "")
        table.add_row(f["severity"], f["code"], ids, f["message"])  # whole: a terminal wraps it, a pipe keeps it
    console.print(table)
    if len(findings) > max_rows:
        console.print(f'... {len(findings) - max_rows} more findings (voxledger query "SELECT * FROM audit_findings")')
    splits = Table("split", "utterances", "speakers", "hours", title="corpus statistics")
    for s in result["stats"]["splits"]:
        splits.add_row(s["split"], str(s["utterances"]), str(s["speakers"]), f"{s['hours']:.3f}")
    console.print(splits)
    console.print(f"counts by code: {result['counts_by_code']}")
    console.print(f"verdict: [bold]{result['verdict']}[/bold]")


COMMANDS = (audit,)
