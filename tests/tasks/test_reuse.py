"""Cached reuse verifies what it trusts: the catalog only points at candidates; the receipt must
record the key asked for, and every object behind its outputs and inputs (trees whole) must hash
right, or nothing is served."""

from __future__ import annotations

from pathlib import Path

import pytest

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.core import IngestParameters, IngestReceipt
from voxledger.schemas.errors import BlobMissingError
from voxledger.stores.home import Home
from voxledger.stores.trees import TREE_MEDIA_TYPE, load_manifest, put_tree
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import reuse


def _flip_byte(path: Path) -> None:
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _stage(home: Home, tmp_path: Path, name: str) -> tuple[str, str, str, str]:
    """Record one stage's receipt: a tree input (two files), a plain input, one output.

    Returns (cache key, receipt id, tree input digest, plain input digest)."""
    src = tmp_path / f"tree-{name}"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(b"adapter weights " * 64 + name.encode())
    (src / "sub" / "b.txt").write_bytes(b"config for " + name.encode())
    tree_sha, _ = put_tree(home.blobs, src)
    producer = build_receipt(  # the tree is some earlier stage's output (a checkpoint, say), recorded whole
        IngestReceipt, flow="test", task=f"produce-{name}", started_at=utc_now(),
        subjects=[artifact(home.blobs, "checkpoint", tree_sha, TREE_MEDIA_TYPE)],
        parameters=IngestParameters(source="tree", name=name, file_count=2, total_bytes=1),
    )  # fmt: skip
    home.record(producer)
    plain_sha = home.blobs.put_bytes(b"a plain input of " + name.encode())
    out_sha = home.blobs.put_bytes(b"the output of " + name.encode())
    key = cache_key("test", {"tree": tree_sha, "plain": plain_sha, "name": name}, None, {})
    receipt = build_receipt(
        IngestReceipt,
        flow="test",
        task=name,
        started_at=utc_now(),
        key=key,
        subjects=[artifact(home.blobs, "file", out_sha, "application/octet-stream")],
        inputs=[InputRef(role="weights", sha256=tree_sha, ref="artifact"), InputRef(role="plain", sha256=plain_sha, ref="artifact")],
        parameters=IngestParameters(source="bytes", name=name, file_count=1, total_bytes=1),
    )
    return key, home.record(receipt), tree_sha, plain_sha


def test_a_hit_reports_what_it_verified(home: Home, tmp_path: Path) -> None:
    key, rid, _, _ = _stage(home, tmp_path, "gate")
    hit = reuse(home, key, IngestReceipt)
    assert hit is not None and hit.receipt_id == rid and hit.cached
    assert hit.verified is not None
    # receipt + 1 output + tree manifest, its 2 files and the plain input
    assert (hit.verified.output_objects, hit.verified.input_objects, hit.verified.objects) == (1, 4, 6)


def test_a_forged_cache_key_in_the_catalog_is_not_served(home: Home, tmp_path: Path) -> None:
    gate_key, gate_rid, _, _ = _stage(home, tmp_path, "gate")
    final_key = cache_key("test", {"name": "final"}, None, {})
    with home.catalog.connect() as con:  # the attack: one UPDATE makes the gate receipt claim the final's key
        con.execute("UPDATE receipts SET cache_key = ? WHERE receipt_sha256 = ?", [final_key, gate_rid])
    heard: list[str] = []
    assert reuse(home, final_key, IngestReceipt, report=heard.append) is None
    assert home.find_cached(final_key) is None
    assert len(heard) == 1 and "catalog rebuild" in heard[0] and gate_rid[:12] in heard[0]


def test_a_genuine_row_behind_a_forged_one_is_still_found(home: Home, tmp_path: Path) -> None:
    key, rid, _, _ = _stage(home, tmp_path, "final")
    _, forged_rid, _, _ = _stage(home, tmp_path, "gate")  # newer, so listed first under the forged key
    with home.catalog.connect() as con:
        con.execute("UPDATE receipts SET cache_key = ? WHERE receipt_sha256 = ?", [key, forged_rid])
    hit = reuse(home, key, IngestReceipt)
    assert hit is not None and hit.receipt_id == rid
    assert hit.verified is not None and hit.verified.passed_over == 1


@pytest.mark.parametrize("damage", ["flip", "delete"])
@pytest.mark.parametrize("where", ["tree file", "tree manifest", "plain input"])
def test_a_damaged_input_is_never_served_from_cache(home: Home, tmp_path: Path, damage: str, where: str) -> None:
    key, rid, tree_sha, plain_sha = _stage(home, tmp_path, "final")
    target = {
        "tree file": load_manifest(home.blobs, tree_sha).entries[0].sha256,
        "tree manifest": tree_sha,
        "plain input": plain_sha,
    }[where]
    path = home.blobs.path_of(target)
    if damage == "flip":
        _flip_byte(path)
    else:
        path.unlink()
    with pytest.raises(BlobMissingError, match=f"receipt {rid} matches this work.*{target}.*not served from cache"):
        reuse(home, key, IngestReceipt)
    assert not home.blobs.has(target)  # a damaged copy is moved aside, never served
    if damage == "flip":
        assert any(p.name.startswith(target) for p in (home.blobs.root / "quarantine").iterdir())


def test_a_damaged_output_runs_the_stage_again(home: Home, tmp_path: Path) -> None:
    key, rid, _, _ = _stage(home, tmp_path, "final")
    out = home.receipts.read(rid, IngestReceipt).subjects[0].sha256
    _flip_byte(home.blobs.path_of(out))
    assert reuse(home, key, IngestReceipt) is None
    assert not home.blobs.has(out)


def test_tree_outputs_are_checked_whole(home: Home, tmp_path: Path) -> None:
    src = tmp_path / "out"
    src.mkdir()
    (src / "w.bin").write_bytes(b"weights" * 100)
    tree_sha, manifest = put_tree(home.blobs, src)
    key = cache_key("test", {"n": 1}, None, {})
    receipt = build_receipt(
        IngestReceipt, flow="t", task="t", started_at=utc_now(), key=key,
        subjects=[artifact(home.blobs, "tree", tree_sha, TREE_MEDIA_TYPE)],
        parameters=IngestParameters(source="tree", name="out", file_count=1, total_bytes=700),
    )  # fmt: skip
    home.record(receipt)
    _flip_byte(home.blobs.path_of(manifest.entries[0].sha256))
    assert reuse(home, key, IngestReceipt) is None


def test_a_source_tree_whose_files_were_never_stored_is_bound_by_its_manifest(home: Home, tmp_path: Path) -> None:
    """A corpus's audio tree read from disk: the manifest is stored, the files need not be."""
    from voxledger.stores.trees import build_manifest, manifest_bytes

    src = tmp_path / "corpus"
    src.mkdir()
    (src / "a.wav").write_bytes(b"RIFF audio on disk only")
    tree_sha = home.blobs.put_bytes(manifest_bytes(build_manifest(src)))
    key = cache_key("test", {"tree": tree_sha}, None, {})
    receipt = build_receipt(
        IngestReceipt, flow="t", task="t", started_at=utc_now(), key=key,
        subjects=[artifact(home.blobs, "file", home.blobs.put_bytes(b"derived"), "application/octet-stream")],
        inputs=[InputRef(role="source_audio_tree", sha256=tree_sha, ref="artifact")],
        parameters=IngestParameters(source="bytes", name="x", file_count=1, total_bytes=1),
    )  # fmt: skip
    rid = home.record(receipt)
    hit = reuse(home, key, IngestReceipt)
    assert hit is not None and hit.receipt_id == rid and hit.verified is not None and hit.verified.input_objects == 1
    home.blobs.path_of(tree_sha).unlink()  # the manifest itself is still required
    with pytest.raises(BlobMissingError, match=tree_sha):
        reuse(home, key, IngestReceipt)


def test_a_damaged_output_of_a_receipt_it_read_is_not_vouched_for(home: Home, tmp_path: Path) -> None:
    """A promotion reads its gate evaluation (a receipt input); one flipped byte in a clip that evaluation
    produced must not be certified by serving the promotion from cache: the clip is quarantined and the
    stage runs again, so the evaluation regenerates it."""
    clip = home.blobs.put_bytes(b"RIFF a gate evaluation clip " * 32)
    evaluation = build_receipt(
        IngestReceipt, flow="test", task="gate-evaluation", started_at=utc_now(),
        subjects=[artifact(home.blobs, "audio:incumbent", clip, "audio/wav")],
        parameters=IngestParameters(source="bytes", name="gate", file_count=1, total_bytes=1),
    )  # fmt: skip
    evaluation_rid = home.record(evaluation)
    key = cache_key("test", {"promote": 1}, None, {})
    promotion = build_receipt(
        IngestReceipt, flow="test", task="promote", started_at=utc_now(), key=key,
        subjects=[artifact(home.blobs, "decision", home.blobs.put_bytes(b"epoch47 promoted"), "application/json")],
        inputs=[InputRef(role="evaluation", sha256=evaluation_rid, ref="receipt")],
        parameters=IngestParameters(source="bytes", name="promote", file_count=1, total_bytes=1),
    )  # fmt: skip
    rid = home.record(promotion)
    hit = reuse(home, key, IngestReceipt)
    assert hit is not None and hit.receipt_id == rid and hit.verified is not None and hit.verified.evidence_objects == 1
    _flip_byte(home.blobs.path_of(clip))
    heard: list[str] = []
    assert reuse(home, key, IngestReceipt, report=heard.append) is None
    assert not home.blobs.has(clip) and "evidence it read (evaluation/audio:incumbent)" in heard[0]
