"""Foundation commands: store, receipt, lineage, query, export, catalog."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table
from rich.tree import Tree

from voxledger.cli.common import cli_console, emit_json, json_option, open_home, resolve_node, resolve_receipt, run_flow
from voxledger.schemas.errors import CatalogError, ReceiptError, VoxledgerError

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
@json_option()
@click.pass_context
def store_verify(ctx: click.Context, digests: tuple[str, ...], as_json: bool) -> None:
    """Check the whole home: re-hash every object, find every object a receipt names that is missing,
    and compare the catalog's rows with the receipts (digests or unique prefixes: re-hash only those).

    Example: voxledger store verify
    """
    from voxledger.stores.verify import VerifyReport, verify_store

    home = open_home(ctx)
    if digests:
        report = VerifyReport(objects=len(digests))
        for d in [_stored_digest(ctx, d) for d in digests]:
            try:
                home.blobs.verify(d)
            except VoxledgerError as exc:
                report.damaged.append(str(exc))
    else:
        with Progress(console=console, transient=True, disable=as_json) as bar:
            task = bar.add_task("verifying", total=None)
            report = verify_store(home, lambda phase, done, total: bar.update(task, description=phase, completed=done, total=total))
    if as_json:
        emit_json(
            {
                "checked": report.objects,
                "receipts": report.receipts,
                "bad": report.damaged,
                "missing": report.missing,
                "catalog": report.catalog,
            }
        )
    problems = report.problems
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more (--json lists all)"] if len(problems) > 20 else [])
        raise click.ClickException(
            f"{len(report.damaged)} damaged, {len(report.missing)} missing, {len(report.catalog)} catalog disagreement(s) "
            f"({report.objects} objects, {report.receipts} receipts checked):\n" + "\n".join(shown)
        )
    if not as_json:
        walked = f", every object named by {report.receipts} receipts present, catalog consistent" if not digests else ""
        click.echo(f"ok: {report.objects} objects verified{walked}")


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


@click.group()
def receipt() -> None:
    """Receipts: show, validate, generate JSON Schemas."""


@receipt.command("show")
@click.argument("receipt_id")
@click.pass_context
def receipt_show(ctx: click.Context, receipt_id: str) -> None:
    """Print a receipt document (verified against its id and validated).

    Example: voxledger receipt show 3fa2...
    """
    home = open_home(ctx, existing=True)
    rid = resolve_receipt(ctx, receipt_id)
    emit_json(home.receipts.read_document(rid))


@receipt.command("validate")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def receipt_validate(path: Path) -> None:
    """Validate a receipt JSON file against its kind's schema, listing every problem.

    Example: voxledger receipt validate receipt.json
    """
    from voxledger.schemas.limits import load_json
    from voxledger.stores.receipts import validate_document

    doc = load_json(path.read_bytes(), str(path), ReceiptError)
    model = validate_document(doc, source=str(path))
    click.echo(f"ok: {path} is a valid {model.kind} receipt")  # type: ignore[attr-defined]


@receipt.command("schemas")
@click.option("--write", is_flag=True, help="Write the generated schemas into schemas/json/.")
def receipt_schemas(write: bool) -> None:
    """Check (or write) the JSON Schemas generated from the receipt models.

    Example: voxledger receipt schemas --write
    """
    from voxledger.schemas.registry import schema_files
    from voxledger.stores.receipts import SCHEMA_DIR

    files = schema_files()
    stale = [n for n, text in files.items() if not (SCHEMA_DIR / n).is_file() or (SCHEMA_DIR / n).read_text() != text]
    extra = sorted(p.name for p in SCHEMA_DIR.glob("*.schema.json") if p.name not in files)
    if write:
        for name in stale:
            (SCHEMA_DIR / name).write_text(files[name])
        for name in extra:
            (SCHEMA_DIR / name).unlink()
        click.echo(f"wrote {len(stale)} schema file(s), removed {len(extra)}")
    elif stale or extra:
        raise click.ClickException(f"schemas out of date: {stale + extra}; run `voxledger receipt schemas --write`")
    else:
        click.echo(f"ok: {len(files)} schema files match the models")


@click.command("lineage")
@click.argument("ref")
@click.option("--up/--down", default=True, help="Walk to what produced REF (up) or what used it (down).")
@click.option("--depth", type=click.IntRange(min=1), default=20, show_default=True, help="Hops to walk.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["tree", "graph", "json"]),
    default="tree",
    show_default=True,
    help="A tree, Graphviz dot, or JSON edges.",
)
@json_option("the edges")
@click.pass_context
def lineage(ctx: click.Context, ref: str, up: bool, depth: int, fmt: str, as_json: bool) -> None:
    """Walk the provenance graph from a receipt or artifact digest (or a unique prefix).

    Example: voxledger lineage 3fa2c1d9 --up --depth 5
    """
    from voxledger.stores.lineage import walk
    from voxledger.stores.queries import receipt_labels
    from voxledger.stores.verify import check_walked_edges

    node = resolve_node(ctx, ref)
    home = open_home(ctx, existing=True)
    with home.catalog.connect(read_only=True) as con:
        edges = walk(con, node, "up" if up else "down", depth)
        labels = receipt_labels(con)
    check_walked_edges(home, [(e.src, e.dst, e.role, e.direction) for e in edges])  # the index against the receipts
    if fmt == "json" or as_json:
        emit_json([e.__dict__ for e in edges])
    elif fmt == "graph":
        click.echo("digraph lineage {")
        for e in edges:
            click.echo(f'  "{e.src[:12]}" -> "{e.dst[:12]}" [label="{e.role}"];')
        click.echo("}")
    else:
        click.echo(_render_tree(node, edges, labels, up))


def _render_tree(node: str, edges: list, labels: dict[str, str], up: bool) -> str:  # type: ignore[type-arg]
    children: dict[str, list] = {}  # type: ignore[type-arg]
    for e in edges:
        parent, child = (e.dst, e.src) if up else (e.src, e.dst)
        children.setdefault(parent, []).append((e.role, child))

    def label(n: str) -> str:
        return f"{n[:16]} {labels.get(n, 'artifact')}"

    root = Tree(escape(label(node)))
    seen = {node}

    def add(branch: Tree, n: str) -> None:
        for role, child in children.get(n, []):
            sub = branch.add(escape(f"[{role}] {label(child)}"))
            if child not in seen:
                seen.add(child)
                add(sub, child)

    add(root, node)
    with console.capture() as cap:
        console.print(root)
    return cap.get()


@click.command("query")
@click.argument("sql")
@json_option("the rows as JSON objects")
@click.pass_context
def query(ctx: click.Context, sql: str, as_json: bool) -> None:
    """Run one read-only SELECT against the catalog, in a sandbox with no file, network or extension access.

    Example: voxledger query "SELECT kind, count(*) FROM receipts GROUP BY kind"
    """
    from voxledger.stores.sandbox import run_query

    if not sql.strip():
        raise click.BadParameter('give a SQL statement, e.g. "SELECT kind, count(*) FROM receipts GROUP BY kind"', param_hint="SQL")
    cols, rows = run_query(open_home(ctx, existing=True).catalog, sql)
    if as_json:
        emit_json([dict(zip(cols, r, strict=True)) for r in rows])
        return
    table = Table(*cols)
    for r in rows:
        table.add_row(*(str(v) for v in r))
    console.print(table)


@click.group("export")
def export() -> None:
    """Export provenance in standard formats."""


@export.command("in-toto")
@click.argument("receipt_id")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write here (never overwritten).")
@click.pass_context
def export_in_toto(ctx: click.Context, receipt_id: str, output: Path | None) -> None:
    """Write an in-toto Statement v1 (subjects = outputs, predicate = the receipt).

    Example: voxledger export in-toto 3fa2c1d9 -o statement.json
    """
    from voxledger.stores.attest import in_toto_statement

    rid = resolve_receipt(ctx, receipt_id)
    statement = in_toto_statement(rid, open_home(ctx, existing=True).receipts.read_document(rid))
    text = json.dumps(statement, indent=2, sort_keys=True)
    if output is None:
        click.echo(text)
    else:
        try:
            with open(output, "x", encoding="utf-8") as f:
                f.write(text + "\n")
        except FileExistsError as exc:
            raise click.BadParameter(
                f"{output} exists; statements are never overwritten: choose a new file", param_hint="--output"
            ) from exc
        click.echo(f"wrote {output}")


@click.group()
def catalog() -> None:
    """The DuckDB catalog: rebuild from the store, list migrations."""


@catalog.command("rebuild")
@click.pass_context
def catalog_rebuild(ctx: click.Context) -> None:
    """Recreate the catalog from receipts in the store alone.

    Example: voxledger catalog rebuild
    """
    report = open_home(ctx).rebuild()
    click.echo(f"rebuilt catalog from {report.indexed} receipts")
    if report.skipped:
        rid, why = report.skipped[0]
        click.echo(
            f"warning: {len(report.skipped)} receipt(s) left out, their own bytes missing or damaged (quarantined copies "
            f"stay in store/quarantine): e.g. {rid}: {why[:200]}",
            err=True,
        )
    if report.unprojected:
        click.echo(
            f"warning: {len(report.unprojected)} receipt(s) indexed without their typed rows, an output blob they are "
            f"read from being missing or damaged: e.g. {report.unprojected[0]}; `voxledger store verify` lists what is gone",
            err=True,
        )


@catalog.command("migrations")
@click.pass_context
def catalog_migrations(ctx: click.Context) -> None:
    """List applied schema migrations.

    Example: voxledger catalog migrations
    """
    for name in open_home(ctx).catalog.migrations():
        click.echo(name)


@click.command("bench")
@click.option("--quick", is_flag=True, help="Small sizes: a smoke run, not a measurement.")
@click.option(
    "--only",
    default="hash,corpus,catalog,cli,audit,train,features,eval,prefect,demo",
    show_default=True,
    help="Comma-separated sections: hash, corpus, catalog (stores); cli (read commands against `python -c pass`); "
    "audit, train, eval, prefect (stages); features (a training stage's features binding: aligning a voice against "
    "the home's memo); "
    "demo (stage times of the latest pipeline run in --home); stats (simulated error rates of every interval and test), "
    "corpus-scale (audit of a large corpus), store-dvc (store against DVC), sync (push/pull against a local S3 server), "
    "listening-server (simulated raters against `packets serve`), install (byte-compiling a package as pip does "
    "against `voxledger.postinstall`), pipeline-rerun (a `pipeline run` with every stage cached: the home's runner "
    "against the command's own process). The last seven are not in the default set.",
)
@click.option(
    "--replications",
    type=click.IntRange(min=20),
    default=None,
    help="Simulated data sets per row of the stats section (default 1000, 150 with --quick); more narrows the Monte Carlo error.",
)
@json_option("the figures")
@click.pass_context
def bench(ctx: click.Context, quick: bool, only: str, replications: int | None, as_json: bool) -> None:
    """Measure throughput against baselines taken in the same run (openssl, one core, cold cache, bare loops).

    Example: voxledger bench --only hash,catalog
    """
    from voxledger.bench import SECTIONS, run_all

    sections = tuple(s.strip() for s in only.split(",") if s.strip())
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise click.BadParameter(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}", param_hint="--only")
    with console.status("benchmarking"):
        figures = run_all(quick=quick, sections=sections, home=ctx.find_root().obj["home"], replications=replications)
    if as_json:
        emit_json([f.__dict__ for f in figures])
        return
    table = Table("benchmark", "value", "unit", "goal", title="voxledger bench" + (" (quick)" if quick else ""))
    for f in figures:
        table.add_row(f.name, f"{f.value:,.2f}", f.unit, f.goal)
    console.print(table)


COMMANDS = (store, receipt, lineage, query, export, catalog, bench)
