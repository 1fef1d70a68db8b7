"""``voxledger audit`` and ``voxledger demo corpus``."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from voxledger.cli import emit_json, main, open_home
from voxledger.schemas.errors import AuditFailedError

console = Console()
DEFAULT_POLICY = Path(__file__).resolve().parent.parent / "plans" / "audit-demo.yaml"


@main.command("audit")
@click.argument("corpus", type=click.Path(exists=True, path_type=Path))
@click.option("--policy", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=DEFAULT_POLICY, show_default=True)
@click.option("--audio-root", "audio_roots", multiple=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A folder outside the corpus its manifest may point into (absolute paths, '..'); repeatable. Not part of any identity.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--max-rows", type=int, default=40, show_default=True, help="Findings rows to print.")
@click.pass_context
def audit(ctx: click.Context, corpus: Path, policy: Path, audio_roots: tuple[Path, ...], as_json: bool, max_rows: int) -> None:
    """Audit a corpus (JSONL or Kaldi) under a frozen policy; exit non-zero when it fails.

    Example: voxledger audit ./demo/corpus --policy plans/audit-demo.yaml

    Example: voxledger audit ./data --audio-root /mnt/audio   (Kaldi wav.scp with absolute paths)
    """
    from voxledger.flows.audit_corpus import audit_corpus
    from voxledger.flows.runtime import quiet_prefect

    home = open_home(ctx)
    with quiet_prefect():
        summary = audit_corpus(str(corpus), str(policy), str(home.root), fail_on_error=False)
    doc = home.receipts.read_document(summary["receipt_id"])
    if as_json:
        emit_json(summary)
    else:
        _print_findings(doc, max_rows)
    if summary["verdict"] == "fail":
        raise AuditFailedError(f"verdict: fail ({summary['counts_by_severity']['error']} errors); receipt {summary['receipt_id']}")


def _print_findings(doc: dict, max_rows: int) -> None:  # type: ignore[type-arg]
    result = doc["result"]
    table = Table("severity", "code", "utterances", "message", title=f"audit of {doc['parameters']['corpus_name']}")
    order = {"error": 0, "warning": 1, "info": 2}
    findings = sorted(result["findings"], key=lambda f: (order[f["severity"]], f["code"]))
    for f in findings[:max_rows]:
        ids = ", ".join(f["utterance_ids"][:4]) + (" ..." if len(f["utterance_ids"]) > 4 else "")
        table.add_row(f["severity"], f["code"], ids, f["message"][:120])
    console.print(table)
    if len(findings) > max_rows:
        console.print(f"... {len(findings) - max_rows} more findings (voxledger query \"SELECT * FROM audit_findings\")")
    splits = Table("split", "utterances", "speakers", "hours", title="corpus statistics")
    for s in result["stats"]["splits"]:
        splits.add_row(s["split"], str(s["utterances"]), str(s["speakers"]), f"{s['hours']:.3f}")
    console.print(splits)
    console.print(f"counts by code: {result['counts_by_code']}")
    console.print(f"verdict: [bold]{result['verdict']}[/bold]")
