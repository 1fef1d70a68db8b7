"""``voxledger bench``: throughput figures with a baseline measured in the same run.

Each figure is a ratio or a rate measured now, on this machine, never a constant: hashing against
``openssl dgst -sha256`` (the one-core SHA-NI limit), two cores against one, the stat cache
against a cold pass, catalog ingest, and lineage walks over a large graph.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from voxledger.bench_sections.common import Figure

if TYPE_CHECKING:
    from voxledger.stores.catalog import Catalog
from voxledger.bench_sections.common import make_corpus as _make_corpus
from voxledger.bench_sections.common import timed as _timed


def bench_hash_large(work: Path, size_mib: int) -> list[Figure]:
    """Our streaming sha256 vs openssl on one file (page cache warm for both)."""
    from voxledger.stores.hashing import sha256_stream

    path = work / "large.bin"
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        f.writelines(block for _ in range(size_mib))
    subprocess.run(["openssl", "dgst", "-sha256", str(path)], capture_output=True, check=True)  # warm cache
    t_ssl = min(
        _timed(lambda: subprocess.run(["openssl", "dgst", "-sha256", str(path)], capture_output=True, check=True))[0] for _ in range(2)
    )
    t_ours = min(_timed(lambda: sha256_stream(path))[0] for _ in range(2))
    path.unlink()
    mb = size_mib * (1 << 20) / 1e6
    return [
        Figure(f"sha256 {size_mib} MiB: openssl dgst", mb / t_ssl, "MB/s"),
        Figure(f"sha256 {size_mib} MiB: voxledger", mb / t_ours, "MB/s"),
        Figure("voxledger / openssl throughput", t_ssl / t_ours, "x", ">= 0.9"),
    ]


def bench_corpus(work: Path, n: int) -> list[Figure]:
    """Parallel hashing of many files, and put_tree cold vs stat-cached."""
    from voxledger.stores.blobs import LocalBlobStore
    from voxledger.stores.hashing import StatCache, hash_files
    from voxledger.stores.trees import put_tree

    files = _make_corpus(work / "corpus", n, 64 * 1024)
    hash_files(files, workers=1)  # warm the page cache so both runs read from memory
    t1 = min(_timed(lambda: hash_files(files, workers=1))[0] for _ in range(2))
    t2 = min(_timed(lambda: hash_files(files, workers=2))[0] for _ in range(2))
    store = LocalBlobStore(work / "store")
    cache = StatCache(work / "stat.sqlite")
    t_cold, _ = _timed(lambda: put_tree(store, work / "corpus", cache=cache))
    t_warm, _ = _timed(lambda: put_tree(store, work / "corpus", cache=cache))
    return [
        Figure(f"hash {n} files x 64 KiB, 1 thread", n / t1, "files/s"),
        Figure(f"hash {n} files x 64 KiB, 2 threads", n / t2, "files/s"),
        Figure("2 cores / 1 core", t1 / t2, "x", ">= 1.7"),
        Figure(f"put_tree {n} files, first pass", n / t_cold, "files/s"),
        Figure(f"put_tree {n} files, stat-cache pass", n / t_warm, "files/s"),
        Figure("stat-cache pass speed-up", t_cold / t_warm, "x", ">= 10"),
    ]


def synthetic_receipts(n: int) -> list[tuple[str, dict[str, Any]]]:
    """n valid ingest receipt documents chained input -> output (ids are their canonical digests)."""
    from voxledger.schemas.base import Artifact, Producer
    from voxledger.schemas.canonical import canonical_digest
    from voxledger.schemas.core import IngestParameters, IngestReceipt
    from voxledger.stores.identity import environment

    env = environment()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    template = IngestReceipt(
        producer=Producer(flow="bench", task="synthetic"),
        subjects=(Artifact(role="file", sha256="0" * 64, size_bytes=1, media_type="application/octet-stream"),),
        environment=env,
        started_at=t0,
        finished_at=t0,
        parameters=IngestParameters(source="bytes", name="x", file_count=1, total_bytes=1),
    ).model_dump(mode="json")
    docs = []
    for i in range(n):
        doc = dict(template)
        doc["subjects"] = [{"role": "file", "sha256": f"{i:064x}", "size_bytes": i, "media_type": "application/octet-stream"}]
        doc["inputs"] = [{"role": "source", "sha256": f"{i - 1:064x}", "ref": "artifact"}] if i % 20 else []
        doc["parameters"] = {**template["parameters"], "name": f"x{i}"}
        docs.append((canonical_digest(doc), doc))
    return docs


def bench_catalog(work: Path, n_receipts: int, n_edges: int) -> list[Figure]:
    """Catalog ingest rate, and a depth-20 lineage walk over a large edge table."""
    from voxledger.stores.catalog import Catalog
    from voxledger.stores.lineage import walk

    docs = synthetic_receipts(n_receipts)
    cat = Catalog(work / "ingest.duckdb")
    t_ingest, _ = _timed(lambda: [cat.ingest(docs[i : i + 10000]) for i in range(0, len(docs), 10000)])
    big = Catalog(work / "lineage.duckdb")
    chain_len = 20
    n_chains = n_edges // chain_len
    src = [f"{c:032x}{k:032x}" for c in range(n_chains) for k in range(chain_len)]
    dst = [f"{c:032x}{k + 1:032x}" for c in range(n_chains) for k in range(chain_len)]
    table = pa.table(
        {"src": src, "dst": dst, "role": ["r"] * len(src), "direction": ["output"] * len(src), "src_ref": ["receipt"] * len(src)}
    )
    with big.connect() as con:
        con.register("incoming", table)
        con.execute("INSERT INTO edges SELECT * FROM incoming")
        con.unregister("incoming")
    leaf = f"{n_chains // 2:032x}{chain_len:032x}"
    with big.connect(read_only=True) as con:
        walk(con, leaf, "up", 20)
        times = []
        for _ in range(5):
            t, edges = _timed(lambda: walk(con, leaf, "up", 20))
            times.append(t)
        assert len(edges) == chain_len, f"lineage walk found {len(edges)} edges, expected {chain_len}"
    attached, instance = _unit_of_work(cat)
    by_statement, by_row, n_rows = _insert_paths(work)
    return [
        Figure(f"catalog ingest {n_receipts} receipts", n_receipts / t_ingest, "receipts/s"),
        Figure(f"lineage depth 20 over {len(src):,} edges (median of 5)", sorted(times)[2] * 1000, "ms", "< 100"),
        Figure("catalog unit of work (lock, attach, one query, detach; median of 30)", attached * 1000, "ms"),
        Figure("the same with a new DuckDB instance per unit, as before: time ratio", instance / attached, "x", "> 1"),
        Figure(f"catalog write of 20 receipts ({n_rows} rows), one statement per table (median of 15)", by_statement * 1000, "ms"),
        Figure("the same rows with one INSERT per row (executemany), as before: time ratio", by_row / by_statement, "x", "> 1"),
    ]


def _insert_paths(work: Path, rounds: int = 30) -> tuple[float, float, int]:
    """Median seconds to write the rows of a 20-receipt batch in one transaction, as the catalog does
    (each table's columns bound as lists, one statement per table) and with ``executemany`` (one
    execution per row, what every ingest of up to 64 rows a table did before), alternating, each
    round with new receipts on two catalogs."""
    from voxledger.stores.catalog import Catalog, _insert_rows, _rows_for

    docs = synthetic_receipts(20 * rounds + 1)[1:]
    ours, theirs = Catalog(work / "by-statement.duckdb"), Catalog(work / "by-row.duckdb")

    def statement(tables: dict[str, list[dict[str, Any]]]) -> None:
        with ours.connect() as con:
            con.execute("BEGIN")
            _insert_rows(con, tables)
            con.execute("COMMIT")

    def by_row(tables: dict[str, list[dict[str, Any]]]) -> None:
        with theirs.connect() as con:
            con.execute("BEGIN")
            for table, rows in tables.items():
                names = list(rows[0])
                sql = f"INSERT OR IGNORE INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
                con.executemany(sql, [[r.get(n) for n in names] for r in rows])
            con.execute("COMMIT")

    a, b, n_rows = [], [], 0
    for k in range(rounds):
        tables = {t: rows for t, rows in _rows_for(docs[k * 20 : (k + 1) * 20]).items() if rows}
        if k < rounds // 2:  # the first half migrates both files and warms both paths
            statement(tables)
            by_row(tables)
            continue
        a.append(_timed(partial(statement, tables))[0])
        b.append(_timed(partial(by_row, tables))[0])
        n_rows = sum(map(len, tables.values()))
    dumps = []
    for cat in (ours, theirs):
        with cat.connect(read_only=True) as con:
            dumps.append([con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in ("receipts", "artifacts", "edges")])
    assert dumps[0] == dumps[1], "the one-statement write and the per-row write left different rows"
    return sorted(a)[len(a) // 2], sorted(b)[len(b) // 2], n_rows


def _unit_of_work(cat: Catalog) -> tuple[float, float]:
    """Median seconds of one ``cat.connect()`` with a query, as the catalog opens it (the file attached to
    this process's DuckDB) and with a new ``duckdb.connect`` of the file per unit (what every receipt
    write and catalog read paid before), alternating so both see the same machine."""
    import duckdb

    from voxledger.stores.catalog import DUCKDB_CONFIG

    def attached() -> None:
        with cat.connect() as con:
            con.execute("SELECT count(*) FROM receipts").fetchone()

    def instance() -> None:
        with cat.lock:
            con = duckdb.connect(str(cat.path), config=dict(DUCKDB_CONFIG))
            try:
                con.execute("SELECT count(*) FROM receipts").fetchone()
            finally:
                con.close()

    ours, theirs = [], []
    for _ in range(30):
        ours.append(_timed(attached)[0])
        theirs.append(_timed(instance)[0])
    return sorted(ours)[15], sorted(theirs)[15]


SECTIONS = (
    "hash", "corpus", "catalog", "cli", "audit", "train", "features", "eval", "prefect", "demo", "stats", "corpus-scale", "store-dvc", "sync",
    "listening-server", "install", "pipeline-rerun", "verify", "sweep",
)  # fmt: skip
"""Every section, in run order: the stores' three, then the stages (``voxledger.bench_sections``)."""


def run_all(
    *,
    quick: bool = False,
    sections: tuple[str, ...] = ("hash", "corpus", "catalog"),
    home: str | None = None,
    replications: int | None = None,
) -> list[Figure]:
    """Run the benchmarks; ``quick`` shrinks every size (a smoke run, not a measurement).

    ``home`` is the voxledger home whose past pipeline runs the ``demo`` section reads;
    ``replications`` sets the simulated data sets per row of the ``stats`` section.
    """
    figures: list[Figure] = []
    work = Path(tempfile.mkdtemp(prefix="voxledger-bench-"))
    try:
        if "hash" in sections:
            figures += bench_hash_large(work, 32 if quick else 1024)
        if "corpus" in sections:
            figures += bench_corpus(work, 300 if quick else 10_000)
        if "catalog" in sections:
            figures += bench_catalog(work, 2_000 if quick else 100_000, 20_000 if quick else 1_000_000)
        if set(sections) - {"hash", "corpus", "catalog"}:
            from voxledger.bench_sections import run_stages

            figures += run_stages(work, sections, quick=quick, home=home, replications=replications)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures
