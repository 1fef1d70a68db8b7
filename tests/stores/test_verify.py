"""`store verify` finds what is gone and what the catalog rewrote; every repair leaves a home that
`catalog rebuild` can rebuild; a catalog DuckDB cannot read points at the rebuild in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from voxledger.cli import main
from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.core import IngestParameters, IngestReceipt
from voxledger.schemas.prune import PruneParameters, PruneReceipt
from voxledger.stores.home import Home
from voxledger.stores.trees import TREE_MEDIA_TYPE, load_manifest, put_tree
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import reuse


def cli(home: Home, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--home", str(home.root), *args])
    out = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        out += f"\nTraceback (escaped the CLI): {result.exception!r}"
    return result.exit_code, out


def _flip_byte(path: Path) -> None:
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _record(home: Home, tmp_path: Path, name: str, parent: str | None = None) -> tuple[str, str, str]:
    """A receipt with a tree output (two files) and a plain input (plus a parent receipt).

    Returns (receipt id, tree digest, plain input digest)."""
    src = tmp_path / f"out-{name}"
    src.mkdir()
    (src / "adapter.safetensors").write_bytes(b"tensor bytes " * 50 + name.encode())
    (src / "config.json").write_bytes(b'{"name": "' + name.encode() + b'"}')
    tree_sha, _ = put_tree(home.blobs, src)
    plain = home.blobs.put_bytes(b"input of " + name.encode())
    inputs = [InputRef(role="plain", sha256=plain, ref="artifact")]
    if parent:
        inputs.append(InputRef(role="parent", sha256=parent, ref="receipt"))
    receipt = build_receipt(
        IngestReceipt, flow="test", task=name, started_at=utc_now(), key=cache_key("test", {"name": name}, None, {}),
        subjects=[artifact(home.blobs, "checkpoint", tree_sha, TREE_MEDIA_TYPE)], inputs=inputs,
        parameters=IngestParameters(source="tree", name=name, file_count=2, total_bytes=1),
    )  # fmt: skip
    return home.record(receipt), tree_sha, plain


@pytest.fixture
def world(home: Home, tmp_path: Path) -> tuple[Home, dict[str, str]]:
    first, tree, plain = _record(home, tmp_path, "champion")
    second, _, _ = _record(home, tmp_path, "package", parent=first)
    return home, {"first": first, "second": second, "tree": tree, "plain": plain}


def test_a_clean_home_verifies(world: tuple[Home, dict[str, str]]) -> None:
    home, _ = world
    code, out = cli(home, "store", "verify")
    assert code == 0, out
    assert "every object named by 2 receipts present, catalog consistent" in out


@pytest.mark.parametrize("which", ["tree file", "plain input", "parent receipt"])
def test_a_deleted_object_is_found(world: tuple[Home, dict[str, str]], which: str) -> None:
    home, ids = world
    target = {
        "tree file": load_manifest(home.blobs, ids["tree"]).entries[0].sha256,
        "plain input": ids["plain"],
        "parent receipt": ids["first"],
    }[which]
    home.blobs.path_of(target).unlink()
    code, out = cli(home, "store", "verify")
    assert code == 1, out
    assert f"object {target} is missing" in out or f"receipt {target} is listed in store/receipts but its object is missing" in out
    assert "Traceback" not in out
    code, out = cli(home, "store", "verify", "--json")
    assert code == 1 and any(target in line for line in json.loads(out.split("\nError:")[0])["missing"])


def test_blobs_a_prune_receipt_removed_are_not_missing(world: tuple[Home, dict[str, str]]) -> None:
    home, ids = world
    gone = load_manifest(home.blobs, ids["tree"]).entries[0].sha256
    home.blobs.path_of(gone).unlink()
    prune = build_receipt(
        PruneReceipt, flow="t", task="t", started_at=utc_now(),
        parameters=PruneParameters(plan_sha256=ids["plain"], removed_blobs=(gone,), freed_bytes=10),
    )  # fmt: skip
    home.record(prune)
    code, out = cli(home, "store", "verify")
    assert code == 0, out


def test_quarantine_of_a_damaged_receipt_then_rebuild_succeeds(world: tuple[Home, dict[str, str]], tmp_path: Path) -> None:
    home, ids = world
    key = home.receipts.read(ids["second"]).cache_key
    assert key is not None
    _flip_byte(home.blobs.path_of(ids["second"]))
    assert reuse(home, key, IngestReceipt) is None  # damaged receipt: quarantined, the stage runs again
    assert (home.blobs.root / "quarantine" / "receipts" / ids["second"]).exists()
    _record(home, tmp_path, "package-again", parent=ids["first"])
    code, out = cli(home, "store", "verify")  # the stale catalog row is named, with the fix
    assert code == 1 and "catalog lists 1 receipt(s) the store does not hold" in out and "catalog rebuild" in out, out
    code, out = cli(home, "catalog", "rebuild")
    assert code == 0, out
    assert "rebuilt catalog from 2 receipts" in out  # the quarantined receipt is no longer listed
    code, out = cli(home, "store", "verify")
    assert code == 0, out


def test_rebuild_skips_a_receipt_whose_object_is_gone_and_says_so(world: tuple[Home, dict[str, str]]) -> None:
    home, ids = world
    home.blobs.path_of(ids["second"]).unlink()  # deleted by hand: its marker still lists it
    result = CliRunner().invoke(main, ["--home", str(home.root), "catalog", "rebuild"])
    assert result.exit_code == 0, result.output
    assert "rebuilt catalog from 1 receipts" in result.stdout
    assert "1 receipt(s) left out" in result.stderr and ids["second"] in result.stderr


def test_a_rewritten_lineage_edge_is_detected(world: tuple[Home, dict[str, str]]) -> None:
    home, ids = world
    forged = "f" * 64
    with home.catalog.connect() as con:  # a silent rewrite of one digest in the lineage graph
        con.execute("UPDATE edges SET src = ? WHERE dst = ? AND role = 'parent'", [forged, ids["second"]])
    code, out = cli(home, "store", "verify")
    assert code == 1, out
    assert f"catalog row of receipt {ids['second']} disagrees with the receipt: edges" in out and "catalog rebuild" in out
    assert cli(home, "catalog", "rebuild")[0] == 0
    assert cli(home, "store", "verify")[0] == 0


def test_lineage_answers_are_checked_against_the_receipts_they_walk(world: tuple[Home, dict[str, str]]) -> None:
    """No `store verify` needed: a lineage or provenance answer over a rewritten index is refused."""
    from voxledger.stores.catalog import _write_sums

    home, ids = world
    code, out = cli(home, "lineage", ids["second"], "--up", "--json")
    assert code == 0 and ids["first"] in out, out
    forged = "e" * 64
    with home.catalog.connect() as con:  # two copies of a digest flipped alike: DuckDB's checksum cannot see it
        con.execute("UPDATE edges SET src = ? WHERE dst = ? AND role = 'parent'", [forged, ids["second"]])
    for args in (("lineage", ids["second"], "--up"), ("lineage", ids["first"], "--down"), ("provenance", "downstream", ids["first"])):
        code, out = cli(home, *args)  # the sums the last write recorded no longer match: whatever the walk
        assert code == 1 and "Traceback" not in out, (args, out)
        assert "table edges no longer matches the sums its last write recorded" in out and "catalog rebuild" in out, (args, out)
    with home.catalog.connect() as con:
        _write_sums(con)  # a forger who also rewrote the sums: every receipt the walk passes is read back
    code, out = cli(home, "lineage", ids["second"], "--up")
    assert code == 1 and f"the catalog's lineage disagrees with receipt {ids['second']}" in out, out
    with home.catalog.connect() as con:  # an edge deleted (sums rewritten too): the answer would silently lose a parent
        con.execute("DELETE FROM edges WHERE dst = ? AND role = 'parent'", [ids["second"]])
        _write_sums(con)
    code, out = cli(home, "lineage", ids["second"], "--up")
    assert code == 1 and "1 of its edges are absent" in out, out
    assert cli(home, "store", "verify")[0] == 1  # the whole check finds it too
    assert cli(home, "catalog", "rebuild")[0] == 0
    code, out = cli(home, "lineage", ids["second"], "--up", "--json")
    assert code == 0 and ids["first"] in out, out


@pytest.mark.parametrize(
    ("sql", "field"),
    [
        ("UPDATE receipts SET cache_key = '{f}' WHERE receipt_sha256 = '{rid}'", "cache_key"),
        ("UPDATE receipts SET status = 'failed' WHERE receipt_sha256 = '{rid}'", "status"),
        ("UPDATE artifacts SET media_type = 'text/plain' WHERE sha256 = '{tree}'", "size/media type"),
        ("DELETE FROM edges WHERE dst = '{rid}'", "edges"),
    ],
)
def test_other_catalog_rewrites_are_detected(world: tuple[Home, dict[str, str]], sql: str, field: str) -> None:
    home, ids = world
    with home.catalog.connect() as con:
        con.execute(sql.format(f="f" * 64, rid=ids["second"], tree=ids["tree"]))
    code, out = cli(home, "store", "verify")
    assert code == 1 and field in out, out


def test_a_catalog_failing_its_checksum_points_at_rebuild(world: tuple[Home, dict[str, str]]) -> None:
    home, _ = world
    path = home.catalog.path
    data = bytearray(path.read_bytes())
    for offset in range(12288 + 64, len(data), 4096):  # one flip in every data block after the headers
        data[offset] ^= 0x10
    path.write_bytes(bytes(data))
    for args in (("query", "SELECT count(*) FROM receipts"), ("store", "verify")):
        code, out = cli(home, *args)
        assert code == 1, out
        lines = out.strip().splitlines()
        assert len(lines) == 1 and "voxledger catalog rebuild" in lines[0] and "unexpected" not in out, out
    code, out = cli(home, "catalog", "rebuild")
    assert code == 0, out
    assert cli(home, "store", "verify")[0] == 0


def test_a_source_tree_input_is_not_reported_for_files_never_stored(home: Home, tmp_path: Path) -> None:
    from voxledger.stores.trees import build_manifest, manifest_bytes

    src = tmp_path / "corpus"
    src.mkdir()
    (src / "a.wav").write_bytes(b"audio on disk only")
    tree_sha = home.blobs.put_bytes(manifest_bytes(build_manifest(src)))
    receipt = build_receipt(
        IngestReceipt, flow="t", task="t", started_at=utc_now(),
        subjects=[artifact(home.blobs, "file", home.blobs.put_bytes(b"derived"), "application/octet-stream")],
        inputs=[InputRef(role="source_audio_tree", sha256=tree_sha, ref="artifact")],
        parameters=IngestParameters(source="bytes", name="x", file_count=1, total_bytes=1),
    )  # fmt: skip
    home.record(receipt)
    code, out = cli(home, "store", "verify")
    assert code == 0, out


def test_a_damaged_block_no_query_reads_is_still_found(world: tuple[Home, dict[str, str]]) -> None:
    """One flipped byte in the block of a table that neither the drift check nor the sums read (the migration
    log): only a scan of every table finds it, and `store verify` must not say 'consistent'."""
    import duckdb

    home, _ = world
    path = home.catalog.path
    with duckdb.connect(str(path), read_only=True) as con:
        (block,) = {
            r[0] for r in con.execute("SELECT block_id FROM pragma_storage_info('schema_migrations') WHERE block_id >= 0").fetchall()
        }
        block_size = con.execute("PRAGMA database_size").fetchone()[2]  # type: ignore[index]
    data = bytearray(path.read_bytes())
    data[3 * 4096 + block * block_size + 100] ^= 0x10  # past the three file headers and the block's checksum
    path.write_bytes(bytes(data))
    code, out = cli(home, "store", "verify")
    assert code == 1 and "voxledger catalog rebuild" in out and "consistent" not in out and "unexpected" not in out, out
    assert cli(home, "catalog", "rebuild")[0] == 0 and cli(home, "store", "verify")[0] == 0


def test_receipts_in_the_store_the_catalog_does_not_index_are_reported(world: tuple[Home, dict[str, str]]) -> None:
    """A second home writing to a shared store leaves receipts this catalog never indexed: reported, not 'consistent'."""
    home, ids = world
    with home.catalog.connect() as con:  # as if the receipt had been written by another home (no catalog row here)
        con.execute("DELETE FROM edges WHERE src = ? OR dst = ?", [ids["second"], ids["second"]])
        con.execute("DELETE FROM receipts WHERE receipt_sha256 = ?", [ids["second"]])
    code, out = cli(home, "store", "verify")
    assert code == 1 and "does not index" in out and ids["second"][:12] in out, out
