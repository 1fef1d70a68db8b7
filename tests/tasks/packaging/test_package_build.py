"""End to end on the tiny backend: build, reload in a fresh process, merge-check, publish, refuse."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from tests.corpus_factory import build_small_corpus
from tests.tasks.test_training import audited, base_plan, lora_plan
from voxledger.cli import main
from voxledger.schemas.equivalence import EquivalenceBands, EquivalencePlan
from voxledger.schemas.errors import DigestMismatchError, EquivalenceError, ReceiptError
from voxledger.schemas.training import TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.stores.trees import put_tree
from voxledger.tasks.packaging.archive import verify_package
from voxledger.tasks.packaging.assemble import PackageRequest, check_deliverables
from voxledger.tasks.stage import PackageOutcome, StageOutcome
from voxledger.tasks.stages.package import (
    PROBE_PLAN,
    package_adapter_fn,
    publication_name,
)
from voxledger.tasks.stages.train import run_training

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Built:
    home: Home
    base: StageOutcome[TrainingRunReceipt]
    lora: StageOutcome[TrainingRunReceipt]
    out: PackageOutcome
    retention: Path

    @property
    def tree(self) -> str:
        return self.lora.receipt.subject("best").sha256


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("pkg")
    corpus = build_small_corpus(tmp / "corpus")
    home = Home(tmp / "home")
    audit = audited(home, corpus)
    base = run_training(home, corpus, audit, base_plan(), plan_name="t-base.yaml")
    lora = run_training(home, corpus, audit, lora_plan(), plan_name="t-lora.yaml", base_sha=base.receipt.subject("best").sha256)
    out = package_adapter_fn(home, lora.receipt_id, lora.receipt.subject("best").sha256, retention_root=tmp / "ret")
    return Built(home, base, lora, out, tmp / "ret")


def test_package_binds_receipts_and_passes_reload_and_merge_checks(built: Built) -> None:
    r = built.out.receipt
    assert r.status == "succeeded" and not built.out.cached
    assert r.result.reload.bitwise_equal and r.result.reload.max_abs_err == 0.0 and r.result.reload.tolerance == 0.0
    assert r.result.equivalence_band == "GREEN" and set(r.result.stage_rel) == {"mel", "pcm"}
    assert [s.role for s in r.subjects] == ["package", "merged_export"]
    eq = built.home.receipts.read(r.input("equivalence").sha256)
    assert eq.kind == "equivalence" and eq.parameters.candidate.name == "merged_export"  # type: ignore[attr-defined]
    published = built.retention / publication_name(verify_package(built.out.package_path).manifest.name, built.out.package_sha256)
    assert built.out.published is not None and built.out.published.path == published
    assert published.read_bytes() == built.out.package_path.read_bytes()
    v = verify_package(published)
    names = sorted(v.contents)
    assert names[:3] == ["adapter/adapter.safetensors", "adapter/adapter_config.json", "manifest.json"]
    kinds = sorted(json.loads(v.contents[n])["kind"] for n in names if n.startswith("receipts/"))
    assert kinds == ["audit", "checkpoint", "training_run"]  # the package carries its own evidence
    assert v.manifest.components.base_model_sha256 == built.base.receipt.subject("best").sha256
    assert v.manifest.binding.training_run == built.lora.receipt_id
    with built.home.catalog.connect(read_only=True) as con:
        row = con.execute("SELECT status, equivalence_band, reload_bitwise_equal, published_name FROM packages WHERE receipt_sha256 = ?",
                          [built.out.receipt_id]).fetchone()  # fmt: skip
    assert row == ("succeeded", "GREEN", True, published.name)
    from voxledger.stores.lineage import walk

    with built.home.catalog.connect(read_only=True) as con:
        up = {e.src for e in walk(con, built.out.package_sha256, "up", 10)}
    assert built.lora.receipt.parameters.bound.audit_receipt in up


ASSEMBLE = """
import sys
from pathlib import Path
from voxledger.stores.blobs import LocalBlobStore
from voxledger.tasks.packaging.assemble import PackageRequest, assemble_package
sha, _ = assemble_package(LocalBlobStore(Path(sys.argv[1])), PackageRequest(sys.argv[2], sys.argv[3]), Path(sys.argv[4]))
print(sha)
"""


def test_same_inputs_give_the_same_package_digest_in_two_processes(built: Built, tmp_path: Path) -> None:
    digests = []
    for i in range(2):
        cmd = [
            sys.executable,
            "-c",
            ASSEMBLE,
            str(built.home.root / "store"),
            built.lora.receipt_id,
            built.tree,
            str(tmp_path / f"{i}.tar"),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT, timeout=120)
        assert proc.returncode == 0, proc.stderr
        digests.append(proc.stdout.strip())
    assert digests[0] == digests[1]
    assert (tmp_path / "0.tar").read_bytes() == (tmp_path / "1.tar").read_bytes()
    # the fixture's package was built earlier in this process: the same apart from the code
    # identity, which follows any source edit made since (the digest covers the code on purpose)
    ours, theirs = verify_package(built.out.package_path), verify_package(tmp_path / "0.tar")
    same_code = ours.manifest.code == theirs.manifest.code
    assert ours.manifest.model_copy(update={"code": theirs.manifest.code}) == theirs.manifest
    assert same_code == (digests[0] == built.out.package_sha256)


def test_repeat_is_served_from_cache_and_republishes_identically(built: Built, tmp_path: Path) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2 if before != 2 else 1)  # whatever an earlier stage left behind does not matter
    try:
        again = package_adapter_fn(built.home, built.lora.receipt_id, built.tree, retention_root=tmp_path / "r2")
    finally:
        torch.set_num_threads(before)
    assert again.cached and again.receipt_id == built.out.receipt_id
    assert again.published is not None and again.published.path.read_bytes() == built.out.package_path.read_bytes()
    clash = tmp_path / "r3"
    clash.mkdir()
    (clash / again.published.path.name).write_bytes(b"someone else's bytes")
    with pytest.raises(DigestMismatchError) as err:
        package_adapter_fn(built.home, built.lora.receipt_id, built.tree, retention_root=clash)
    assert built.out.package_sha256 in str(err.value) and "already exists with different bytes" in str(err.value)


def test_bad_inputs_are_refused_naming_what_and_why(built: Built, tmp_path: Path) -> None:
    home, run, tree = built.home, built.lora.receipt_id, built.tree
    cases = [
        ({"training_run_rid": "e" * 64, "checkpoint_tree_sha": tree}, "training run receipt e{64} is not in this home's store"),
        ({"training_run_rid": run, "checkpoint_tree_sha": built.base.receipt.subject("best").sha256}, "is not a checkpoint of training run"),
        ({"training_run_rid": built.base.receipt_id, "checkpoint_tree_sha": tree}, "full-mode run; packages hold LoRA adapters"),
        ({"training_run_rid": run, "checkpoint_tree_sha": tree, "evaluation_rids": (built.lora.receipt.parameters.bound.audit_receipt,)}, "is a 'audit' receipt, expected 'evaluation'"),
        ({"training_run_rid": run, "checkpoint_tree_sha": tree, "promotion_rid": "f" * 64}, "promotion receipt f{64} is not in this home's store"),
    ]  # fmt: skip
    for kwargs, message in cases:
        with pytest.raises(ReceiptError, match=message):
            package_adapter_fn(home, **kwargs)  # type: ignore[arg-type]
    # a checkpoint tree with working state beside the deliverables never ships
    folder = tmp_path / "ckpt"
    folder.mkdir()
    manifest = json.loads(home.blobs.get_bytes(tree))
    for e in manifest["entries"]:
        (folder / e["path"]).write_bytes(home.blobs.get_bytes(e["sha256"]))
    (folder / "optimizer.pt").write_bytes(b"exp_avg")
    sha, m = put_tree(home.blobs, folder)
    with pytest.raises(ReceiptError, match=r"optimizer state .* extra \['optimizer.pt'\]"):
        check_deliverables(home.blobs, "tiny", m, sha)
    (folder / "optimizer.pt").unlink()
    base_tree = json.loads(home.blobs.get_bytes(built.base.receipt.subject("best").sha256))
    (folder / "adapter.safetensors").write_bytes(home.blobs.get_bytes(base_tree["entries"][0]["sha256"]))  # full weights
    sha, m = put_tree(home.blobs, folder)
    with pytest.raises(ReceiptError, match="not adapter weights"):
        check_deliverables(home.blobs, "tiny", m, sha)
    assert PackageRequest(run, tree).evaluation_receipts == ()


def _cli(home: Home, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["--home", str(home.root), *args])
    return res.exit_code, res.output


@pytest.mark.prefect
def test_cli_build_verify_attest_and_tampering(built: Built, tmp_path: Path) -> None:
    code, out = _cli(built.home, "package", "build", built.lora.receipt_id[:12], "--checkpoint", "best", "--json")
    assert code == 2 and "no --promotion given" in out and "--unpromoted" in out  # a checkpoint no gate vouched for
    code, out = _cli(built.home, "package", "build", built.lora.receipt_id[:12], "--checkpoint", "best", "--unpromoted", "--json")
    assert code == 0 and json.loads(out)["package_sha256"] == built.out.package_sha256 and json.loads(out)["cached"]
    assert json.loads(out)["promotion"] is None
    best = built.lora.receipt.subject("best").sha256[:16]  # a checkpoint by the 16-hex prefix the gate hint prints
    code, out = _cli(built.home, "package", "build", built.lora.receipt_id[:12], "--checkpoint", best, "--unpromoted", "--json")
    assert code == 0 and json.loads(out)["package_sha256"] == built.out.package_sha256, out
    pkg = tmp_path / "p.tar"
    shutil.copyfile(built.out.package_path, pkg)
    assert _cli(built.home, "package", "keygen", str(tmp_path / "k"))[0] == 0
    assert _cli(built.home, "package", "keygen", str(tmp_path / "other"))[0] == 0
    code, out = _cli(built.home, "package", "attest", str(pkg), "--key", str(tmp_path / "k.key"))
    assert code == 0 and (tmp_path / "p.tar.dsse.json").is_file()
    statement = json.loads(__import__("base64").b64decode(json.loads((tmp_path / "p.tar.dsse.json").read_text())["payload"]))
    assert statement["predicate"]["package_receipt_sha256"] == built.out.receipt_id
    code, out = _cli(built.home, "package", "verify", str(pkg), "--key", str(tmp_path / "k.pub"))
    assert code == 0 and "signature verified" in out, out
    code, out = _cli(built.home, "package", "verify", str(pkg), "--key", str(tmp_path / "other.pub"))
    assert code != 0 and "SignatureError" in out
    code, out = _cli(built.home, "package", "verify", built.out.package_sha256[:12])
    assert code == 0, out
    with tarfile.open(pkg) as tar:
        offset = tar.getmember("adapter/adapter.safetensors").offset_data
    data = bytearray(pkg.read_bytes())
    data[offset + 2000] ^= 0xFF
    pkg.write_bytes(bytes(data))
    code, out = _cli(built.home, "package", "verify", str(pkg))
    assert code != 0 and "adapter/adapter.safetensors: hashes to" in out and "DigestMismatchError" in out
    code, out = _cli(built.home, "package", "verify", "0" * 64)
    assert code != 0 and "neither a file nor a package digest" in out


def test_package_verify_by_digest_hashes_the_whole_file(built: Built, tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    sha = home.blobs.put_file(built.out.package_path)
    assert _cli(home, "package", "verify", sha)[0] == 0
    path = home.blobs.path_of(sha)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    assert data[-1] == 0  # the tar's end padding: no member and no header covers it
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    code, out = _cli(home, "package", "verify", sha)
    assert code == 1 and f"package {sha}: the stored file hashes to" in out and "Traceback" not in out, out
    assert len(out.strip().splitlines()) == 1


@pytest.mark.slow
def test_red_merged_export_fails_packaging_and_publishes_nothing(built: Built, tmp_path: Path) -> None:
    strict = EquivalencePlan(stages=PROBE_PLAN.stages, bands=EquivalenceBands(green_max_rel=1e-12, yellow_max_rel=1e-11))
    with pytest.raises(EquivalenceError, match="failed its checks .*RED"):
        package_adapter_fn(built.home, built.lora.receipt_id, built.tree, retention_root=tmp_path / "ret", equivalence_plan=strict)
    assert not (tmp_path / "ret").exists()
    with built.home.catalog.connect(read_only=True) as con:
        rows = con.execute("SELECT status, equivalence_band, published_name FROM packages WHERE status = 'failed'").fetchall()
    assert rows == [("failed", "RED", None)]


def test_the_reload_child_fails_with_its_reason_and_never_outlives_its_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child runs beside the package stage's own probes: its failure and its timeout are errors that say
    so, and leaving the block early (the stage's own probe failed) stops it and removes its scratch folder."""
    from voxledger.tasks.packaging.probe import FreshReload
    from voxledger.tasks.processes import pid_alive

    missing = tmp_path / "no-such.tar"
    with FreshReload(missing, None, "a text", 0, 1) as child, pytest.raises(EquivalenceError, match=r"failed \(exit 1\)") as failed:
        child.result()
    assert str(missing) in str(failed.value) and "No such file" in str(failed.value)
    with (
        FreshReload(missing, None, "a text", 0, 1, timeout_s=0.05) as child,
        pytest.raises(EquivalenceError, match="did not finish within 0 s"),
    ):
        child.result()
    monkeypatch.setenv("VOXLEDGER_RELOAD_TIMEOUT_S", "0.05")  # the setting reaches the stage's reload (it was a fixed 300 s)
    with FreshReload(missing, None, "a text", 0, 1) as child, pytest.raises(EquivalenceError, match="VOXLEDGER_RELOAD_TIMEOUT_S"):
        child.result()
    monkeypatch.delenv("VOXLEDGER_RELOAD_TIMEOUT_S")
    with pytest.raises(KeyboardInterrupt), FreshReload(missing, None, "a text", 0, 1) as child:
        pid, scratch = child.pid, child._out.parent
        raise KeyboardInterrupt  # the stage's own probe stopped first
    assert not pid_alive(pid) and not scratch.exists()
