"""``voxledger packets``: export, verify, serve and revoke blind per-rater listening packets."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from voxledger.cli.common import cli_console, emit_json, json_option, open_home, plans_dir, resolve_receipt, run_flow

console = cli_console()

if TYPE_CHECKING:
    from voxledger.schemas.listening_receipts import LeakCheck


DEFAULT_PROTOCOL = plans_dir() / "listening-demo.yaml"


@click.group()
def packets() -> None:
    """Blind listening-test packets: one self-contained web page per rater."""


@packets.command("export")
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=DEFAULT_PROTOCOL,
    show_default=True,
    help="Listening protocol YAML.",
)
@click.option(
    "--stimuli",
    "stimuli_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Stimulus set JSON (StimulusSet in schemas/listening.py, docs/listening.md: evaluation_plan_sha256 + stimuli with audio digests in the store).",
)
@click.option(
    "--evaluation",
    "evaluation",
    default=None,
    help="Or an evaluation receipt (id or prefix): its generated audio are the stimuli, as the pipeline's packets stage does.",
)
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@json_option("the result")
@click.pass_context
def packets_export(
    ctx: click.Context, plan_path: Path, stimuli_path: Path | None, evaluation: str | None, out: Path, as_json: bool
) -> None:
    """Write one blinded packet per rater under OUT and record a packet_set receipt.

    The stimuli come from an evaluation receipt (any evaluation: of a promoted adapter or of a
    checkpoint evaluated by hand) or from a stimulus-set file you write.

    Example: voxledger packets export --plan plans/listening-demo.yaml --evaluation 3fa2c1d0 ./packets
    """

    if (stimuli_path is None) == (evaluation is None):
        raise click.UsageError("give exactly one of --evaluation RECEIPT (stimuli from its audio) or --stimuli FILE")
    evaluation_rid = resolve_receipt(ctx, evaluation, "evaluation") if evaluation else None
    outcome = run_flow(
        ctx,
        "voxledger.flows.packets:packets",
        str(plan_path.absolute()),
        str(out.absolute()),
        evaluation_rid=evaluation_rid,
        stimuli_file=str(stimuli_path.absolute()) if stimuli_path else None,
        quiet=as_json,
    )
    p = outcome.receipt.parameters
    summary = {
        "receipt": outcome.receipt_id,
        "cached": outcome.cached,
        "packet_set_id": p.packet_set_id,
        "packets": {r.rater_id: str(out / r.rater_id) for r in p.packets},
        "key_commitment_sha256": p.key_commitment_sha256,
        "balance": p.balance.model_dump(mode="json"),
        "loudness": p.loudness.model_dump(mode="json"),
        "skipped": list(p.skipped),
        "leak_check": _leak_summary(p.leak_check),
        "familiarisation_trials": p.familiarisation_trials,
        "headphone_check": p.headphone_check,
        "completion_codes": str(out / "completion-codes.csv") if p.completion_code != "none" else None,
    }
    if as_json:
        emit_json(summary)
        return
    b = p.balance
    click.echo(f"packet set {p.packet_set_id}: {len(p.packets)} packets under {out}{' (from cache)' if outcome.cached else ''}")
    click.echo(
        f"design: {b.prompts} prompts x {b.raters_per_prompt} raters each; {b.prompts_per_rater_min}-{b.prompts_per_rater_max} prompts "
        f"and {b.trials_per_rater_min}-{b.trials_per_rater_max} trials per rater; position spread {b.position_spread_max}"
    )
    click.echo(f"loudness: all clips at {p.loudness.applied_lufs} LUFS (spread {p.loudness.output_lufs_spread} LU)")
    before = [f"headphone check ({p.headphone_check})"] * (p.headphone_check != "none")
    before += [f"{p.familiarisation_trials} unscored practice items"] * bool(p.familiarisation_trials)
    if before:
        click.echo(f"before item 1: {' and '.join(before)}")
    if p.completion_code != "none":
        click.echo(f"completion codes ({p.completion_code}): {out / 'completion-codes.csv'}")
    for s in p.skipped:
        click.echo(f"skipped: {s}")
    for line in _leak_lines(p.leak_check):
        click.echo(line)
    click.echo(f"receipt {outcome.receipt_id}")


def _leak_summary(lc: LeakCheck | None) -> dict[str, Any] | None:
    if lc is None:
        return None
    return {"passed": lc.passed, "leaks": list(lc.leaks), "unremoved": list(lc.unremoved),
            "families": [f.model_dump(mode="json") for f in lc.families], "families_disclosed": list(lc.families_disclosed)}  # fmt: skip


def _leak_lines(lc: LeakCheck | None) -> list[str]:
    """The leak check as the export prints it: verdict, each family's maximum against its null, what is disclosed."""
    if lc is None:
        return []
    lines = [f"leak check {'passed' if lc.passed else 'FAILED (recorded: on_leak warn)'}, gate AUC {lc.auc_max:g}"]
    for f in lc.families:
        mark = "above the gate" if f.auc > lc.auc_max and f.auc > f.null_p95 else "under"
        lines.append(f"  family {f.family} ({'gated' if f.gated else 'stated'}): max AUC {f.auc:.3f} ({f.member}, {f.a} vs {f.b}), "
                     f"shuffled labels 95th percentile {f.null_p95:.3f}: {mark}")  # fmt: skip
    lines += [f"  leak: {s}" for s in lc.leaks] + [f"  disclosed, not removed: {s}" for s in (*lc.unremoved, *lc.families_disclosed)]
    return lines


@packets.command("extend")
@click.argument("packet_set")
@click.option("--raters", type=click.IntRange(1, 499), required=True, help="How many raters to add.")
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="New (or empty) folder for the added raters' packets, trials.csv and completion codes.",
)
@json_option("the result")
@click.pass_context
def packets_extend(ctx: click.Context, packet_set: str, raters: int, out: Path, as_json: bool) -> None:
    """Add RATERS packets to PACKET_SET (a packet_set receipt id) without changing its packets.

    The added raters get a block design of their own over the same prompts (each prompt heard by
    the same number of them), rendered like the first packets; a new packet_set receipt lists
    every packet, old and new, with the balance audit and leak check of the whole. Aggregate that
    receipt with every submission.

    Example: voxledger packets extend 3fa2c1d9 --raters 4 --out ./packets-more
    """
    rid = resolve_receipt(ctx, packet_set, "packet_set")
    open_home(ctx).require_writable()
    outcome = run_flow(ctx, "voxledger.flows.packets_extend:extend_packets", rid, raters, str(out.absolute()), quiet=as_json)
    p = outcome.receipt.parameters
    ext, b = p.extension, p.balance
    added = list(ext.raters_added) if ext else []
    if as_json:
        emit_json({"receipt": outcome.receipt_id, "cached": outcome.cached, "extends": rid, "packet_set_id": p.packet_set_id,
                   "added": {r: str(out / r) for r in added}, "raters_per_prompt_added": ext.raters_per_prompt if ext else 0,
                   "balance": b.model_dump(mode="json"), "leak_check": _leak_summary(p.leak_check)})  # fmt: skip
        return
    click.echo(
        f"packet set {p.packet_set_id}: {len(added)} packets added under {out} ({len(p.packets)} in all){' (from cache)' if outcome.cached else ''}"
    )
    click.echo(
        f"design: every prompt heard by {b.raters_per_prompt_min}-{b.raters_per_prompt_max} raters "
        f"({ext.raters_per_prompt if ext else 0} of them added); position spread {b.position_spread_max}"
    )
    for line in _leak_lines(p.leak_check):
        click.echo(line)
    click.echo(f"receipt {outcome.receipt_id} (aggregate this one, with every submission)")


@packets.command("verify")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@json_option("the result")
def packets_verify(folder: Path, as_json: bool) -> None:
    """Check a rater's packet folder is intact (page, manifest, every audio file) before sending it.

    Example: voxledger packets verify ./packets/r01
    """
    from voxledger.tasks.listening.verify import verify_packet_dir

    manifest = verify_packet_dir(folder)
    if as_json:
        emit_json(
            {"folder": str(folder), "rater_id": manifest.rater_id, "trials": len(manifest.trials), "audio_files": len(manifest.audio)}
        )
        return
    click.echo(f"ok: packet of rater {manifest.rater_id}: {len(manifest.trials)} trials, {len(manifest.audio)} audio files intact")


@packets.command("serve")
@click.argument("packet_set")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (keep the default behind a reverse proxy).")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port to listen on (0: any free port).")
@click.option(
    "--public-url",
    default=None,
    help="The address raters reach, e.g. https://listen.example.org behind a TLS reverse proxy: links are printed with it "
    "and an https address marks the session cookie Secure.",
)
@click.pass_context
def packets_serve(ctx: click.Context, packet_set: str, host: str, port: int, public_url: str | None) -> None:
    """Serve PACKET_SET (a packet_set receipt id) to its raters until stopped (Ctrl-C).

    Prints one capability link per rater (also written to a file in the home); audio by opaque
    per-rater ids; every event timed by the server and journalled; each finished rater's
    submission lands in the home and is aggregated as `ratings aggregate` does (docs/listening.md).

    Example: voxledger packets serve 3fa2c1d9 --port 8765
    """

    if public_url is not None and not public_url.startswith(("http://", "https://")):
        raise click.BadParameter(f"{public_url!r} is not an http(s) address", param_hint="--public-url")
    rid = resolve_receipt(ctx, packet_set, "packet_set")
    open_home(ctx).require_writable()
    run_flow(ctx, "voxledger.flows.listening_server:listening_server", rid, host, port, public_url)


@packets.command("revoke")
@click.argument("packet_set")
@click.argument("rater")
@click.option("--new-link", is_flag=True, help="Also issue the rater a new link (printed; the running server accepts it at once).")
@click.pass_context
def packets_revoke(ctx: click.Context, packet_set: str, rater: str, new_link: bool) -> None:
    """Revoke RATER's link to served PACKET_SET: a running server refuses it (and its session) from the next request.

    Example: voxledger packets revoke 3fa2c1d9 r03 --new-link
    """
    from voxledger.tasks.listening.served import check_revocable

    rid = resolve_receipt(ctx, packet_set, "packet_set")
    home = open_home(ctx)
    home.require_writable()
    check_revocable(home, rid, rater)
    path = run_flow(ctx, "voxledger.flows.listening_server:revoke_rater_link", rid, rater, new_link)
    click.echo(f"revoked the link of rater {rater}")
    if path:
        click.echo(f"new link path for {rater}: {path} (prefix it with the server's address)")


COMMANDS = (packets,)
