"""``voxledger store``: put, verify, push, pull and status of the home's content-addressed store."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click
from rich.progress import Progress

from voxledger.cli.common import cli_console, emit_json, json_option, open_home, resolve_node, run_flow
from voxledger.schemas.errors import CatalogError, VoxledgerError

console = cli_console()


@click.group()
def store() -> None:
    """Content-addressed store: put and verify bytes."""


@store.command("put")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@json_option()
@click.pass_context
def store_put(ctx: click.Context, path: Path, as_json: bool) -> None:
    """Store a file or directory and record an ingest receipt.

    Example: voxledger store put ./corpus --json
    """

    rid, digest = run_flow(ctx, "voxledger.flows.store:store_put", str(path.absolute()), quiet=as_json)
    if as_json:
        emit_json({"receipt": rid, "sha256": digest})
    else:
        click.echo(f"{digest}  {path}\nreceipt {rid}")


@store.command("verify")
@click.argument("digests", nargs=-1)
@click.option(
    "--deep",
    is_flag=True,
    help="Also re-hash every file the stat cache vouches for (corpus audio, trees, model files) and drop entries that no longer hold "
    "(runs as the Prefect flow scrub_store).",
)
@click.option("--schedule", metavar="CRON", default=None, help="With --deep: register the scrub as a Prefect deployment on this cron.")
@click.option("--pool", default="default", show_default=True, help="With --schedule: the work pool whose worker runs the scrub.")
@json_option()
@click.pass_context
def store_verify(ctx: click.Context, digests: tuple[str, ...], deep: bool, schedule: str | None, pool: str, as_json: bool) -> None:
    """Check the whole home: re-hash every object, find every object a receipt names that is missing,
    and compare the catalog's rows with the receipts (digests or unique prefixes: re-hash only those).
    With --deep, also scrub the stat cache: a byte flipped under an unchanged stat is found (docs/provenance.md).

    Example: voxledger store verify

    Example: voxledger store verify --deep

    Example: voxledger store verify --deep --schedule "0 4 * * 0"
    """
    from voxledger.stores.verify import VerifyReport, verify_store

    if (schedule or deep) and digests:
        raise click.UsageError("--deep and --schedule check the whole home; give no digests with them")
    if schedule is not None:
        _schedule_scrub(ctx, schedule, pool, deep, as_json)
        return
    home = open_home(ctx)
    if digests:
        report = VerifyReport(objects=len(digests))
        for d in [_stored_digest(ctx, d) for d in digests]:
            try:
                home.blobs.verify(d)
            except VoxledgerError as exc:
                report.damaged.append(str(exc))
    elif deep:
        report = run_flow(ctx, "voxledger.flows.store:scrub_store", quiet=as_json)
    else:
        with Progress(console=console, transient=True, disable=as_json) as bar:
            task = bar.add_task("verifying", total=None)
            report = verify_store(home, lambda phase, done, total: bar.update(task, description=phase, completed=done, total=total))
    scrub = report.stat_cache
    if as_json:
        emit_json(
            {
                "checked": report.objects,
                "receipts": report.receipts,
                "bad": report.damaged,
                "missing": report.missing,
                "catalog": report.catalog,
                **({"stat_cache": {**asdict(scrub), "dropped": scrub.dropped}} if scrub is not None else {}),
            }
        )
    problems = report.problems
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more (--json lists all)"] if len(problems) > 20 else [])
        lied = f", {len(scrub.lied)} stat-cache entr(ies) vouching for changed bytes" if scrub is not None else ""
        raise click.ClickException(
            f"{len(report.damaged)} damaged, {len(report.missing)} missing, {len(report.catalog)} catalog disagreement(s){lied} "
            f"({report.objects} objects, {report.receipts} receipts checked):\n" + "\n".join(shown)
        )
    if not as_json:
        walked = f", every object named by {report.receipts} receipts present, catalog consistent" if not digests else ""
        click.echo(f"ok: {report.objects} objects verified{walked}")
        if scrub is not None:
            click.echo(
                f"stat cache: {scrub.confirmed} of {scrub.entries} entries confirmed by a re-hash ({scrub.rehashed} files read beyond the "
                f"store), {scrub.stale + scrub.unlocated} that no longer name a file dropped"
            )


def _schedule_scrub(ctx: click.Context, cron: str, pool: str, deep: bool, as_json: bool) -> None:
    """Register the scheduled scrub of this home (``flows.deploy.scrub_deployment``)."""
    from voxledger.flows.deploy import ensure_pools, register, scrub_deployment
    from voxledger.hosting.runtime import prefect_session

    if not deep:
        raise click.UsageError("--schedule registers the deep scrub; give --deep with it")
    home = open_home(ctx)
    spec = scrub_deployment(str(home.root), cron, pool)
    with prefect_session(home.root):
        created = ensure_pools({pool})
        (deployment_id,) = register([spec])
    if as_json:
        emit_json({"name": spec.name, "entrypoint": spec.entrypoint, "work_pool": pool, "cron": cron, "id": deployment_id})
        return
    if created:
        click.echo(f"created process work pool {pool}")
    click.echo(f"{spec.name} pool={pool} cron={cron!r} {deployment_id}: start a worker with `prefect worker start --pool {pool}`")


def _run_sync(ctx: click.Context, kind: str, full: bool, as_json: bool) -> None:
    """Run the push or pull flow for this home and report what it copied."""
    import time

    t0 = time.perf_counter()
    out = run_flow(ctx, f"voxledger.flows.sync:{'push' if kind == 'pushed' else 'pull'}", full)
    _sync_report(kind, out, as_json, time.perf_counter() - t0)


def _sync_report(kind: str, out: dict[str, object], as_json: bool, seconds: float) -> None:
    if as_json:
        emit_json(out | {"seconds": round(seconds, 3)})
        return
    click.echo(
        f"{kind} {out['store']}: {out['receipts_copied']} receipts and {out['blobs_copied']} blobs "
        f"({int(out['bytes_copied']):,} bytes) copied, {out['receipts_seen']} receipts seen"  # type: ignore[call-overload]
        + (f", {out['catalog_rows_new']} new catalog rows" if kind == "pulled" else "")
        + f" in {seconds:.1f} s"
    )
    skew = list(out.get("clock_skew") or [])  # type: ignore[call-overload]
    if skew:
        click.echo(
            f"warning: {len(skew)} journal segment(s) stamped well ahead of this machine's clock (first: {skew[0]}): "
            "a writer's clock is off; the segments were read all the same",
            err=True,
        )
    for line in list(out.get("refused") or []):  # type: ignore[call-overload]
        click.echo(f"refused: {line}", err=True)
    missing = out["missing_blobs"]
    if missing:
        click.echo(f"warning: {len(missing)} blobs named by receipts were not in the source; first: {missing[0]}", err=True)  # type: ignore[arg-type,index]


@store.command("push")
@click.option("--full", is_flag=True, help="Consider every local receipt, not only those not yet pushed or pulled.")
@json_option("what was copied")
@click.pass_context
def store_push(ctx: click.Context, full: bool, as_json: bool) -> None:
    """Publish this home's receipts and their blobs to the shared S3 store (VOXLEDGER_S3_* settings).

    Blobs go up before the receipts that name them, receipts before their markers; only what the
    bucket lacks is sent, create-only. Example: VOXLEDGER_S3_BUCKET=voxledger voxledger store push
    """
    _run_sync(ctx, "pushed", full, as_json)


@store.command("pull")
@click.option("--full", is_flag=True, help="List every receipt in the bucket instead of the journal after the last pull.")
@json_option("what was copied")
@click.pass_context
def store_pull(ctx: click.Context, full: bool, as_json: bool) -> None:
    """Ingest what the shared S3 store gained since the last pull: receipts verified against their
    ids and schemas, blobs against their digests, then indexed in the catalog.

    Example: VOXLEDGER_S3_BUCKET=voxledger voxledger store pull
    """
    _run_sync(ctx, "pulled", full, as_json)


@store.command("status")
@click.option("--offline", is_flag=True, help="Only what this home remembers; make no request to the bucket.")
@json_option("the counts")
@click.pass_context
def store_status(ctx: click.Context, offline: bool, as_json: bool) -> None:
    """What this home has not pushed yet, and (one listing) what the next pull would read.

    Example: voxledger store status --json
    """
    from dataclasses import asdict

    from voxledger.stores.s3 import S3BlobStore
    from voxledger.stores.sync import sync_status

    st = sync_status(open_home(ctx, existing=True), S3BlobStore.from_env(), ask_remote=not offline)
    if as_json:
        emit_json(asdict(st))
        return
    click.echo(f"shared store: {st.store}")
    click.echo(f"local receipts: {st.local_receipts} ({st.known_shared} known shared, {st.not_pushed} not pushed)")
    click.echo(f"last pull cursor: {st.cursor or 'never pulled'}")
    if st.new_segments is not None:
        click.echo(f"new journal segments in the bucket: {st.new_segments}" + (" (run `voxledger store pull`)" if st.new_segments else ""))


def _stored_digest(ctx: click.Context, ref: str) -> str:
    """A digest as given (64 hex), else the one stored object or catalog node it is a unique prefix of."""
    ref = ref.strip().lower()
    if not ref or len(ref) > 64 or any(c not in "0123456789abcdef" for c in ref):  # never a path: checked before any use
        raise VoxledgerError(f"{ref[:80]!r} is not a digest or digest prefix: give 8 to 64 hex characters (0-9, a-f)")
    if len(ref) == 64 or len(ref) < 8:
        return ref if len(ref) == 64 else resolve_node(ctx, ref)  # resolve_node explains what is wrong with it
    folder = open_home(ctx, existing=True).blobs.objects / ref[:2]
    found = sorted(ref[:2] + p.name for p in folder.glob(ref[2:] + "*")) if folder.is_dir() else []
    if len(found) > 1:
        raise CatalogError(f"prefix {ref!r} is ambiguous ({', '.join(f[:16] for f in found[:3])}...): give more characters")
    return found[0] if found else resolve_node(ctx, ref)


COMMANDS = (store,)
