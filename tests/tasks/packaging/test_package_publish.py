"""Publication into a retention root: exclusive, idempotent, and consistent after SIGKILL."""

from __future__ import annotations

import hashlib
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from voxledger.schemas.errors import DigestMismatchError, UnsafePathError
from voxledger.tasks.packaging.publish import INCOMING, publish_file, sweep_incoming

ROOT = Path(__file__).resolve().parents[3]


def _file(path: Path, data: bytes) -> tuple[Path, str]:
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


def test_publish_is_exclusive_and_idempotent(tmp_path: Path) -> None:
    src, sha = _file(tmp_path / "a.tar", b"package bytes" * 1000)
    first = publish_file(src, sha, tmp_path / "ret", "pkg-1.tar")
    assert not first.already_present and first.path.read_bytes() == src.read_bytes()
    assert first.path.stat().st_mode & 0o777 == 0o444
    again = publish_file(src, sha, tmp_path / "ret", "pkg-1.tar")
    assert again.already_present and again.path == first.path
    other, other_sha = _file(tmp_path / "b.tar", b"other bytes")
    with pytest.raises(DigestMismatchError) as err:
        publish_file(other, other_sha, tmp_path / "ret", "pkg-1.tar")
    assert sha in str(err.value) and other_sha in str(err.value) and "never overwritten" in str(err.value)
    assert first.path.read_bytes() == src.read_bytes()
    with pytest.raises(DigestMismatchError, match="expected"):
        publish_file(other, sha, tmp_path / "ret", "pkg-2.tar")  # bytes that do not match the claimed digest
    assert not (tmp_path / "ret" / "pkg-2.tar").exists()
    for bad in ("../x.tar", "sub/x.tar", ".hidden", ""):
        with pytest.raises(UnsafePathError):
            publish_file(src, sha, tmp_path / "ret", bad)
    assert list((tmp_path / "ret" / INCOMING).iterdir()) == []


PUBLISHER = """
import hashlib, sys
from pathlib import Path
from voxledger.tasks.packaging.publish import publish_file
src_dir, root = Path(sys.argv[1]), Path(sys.argv[2])
print("ready", flush=True)
for i in range(int(sys.argv[3])):
    src = src_dir / f"p{i}.tar"
    publish_file(src, hashlib.sha256(src.read_bytes()).hexdigest(), root, f"p{i}.tar")
print("done", flush=True)
"""


def test_sigkill_at_random_moments_never_leaves_a_partial_file_under_a_final_name(tmp_path: Path) -> None:
    n, size = 12, 4 << 20
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    expected = {}
    for i in range(n):
        data = hashlib.sha256(str(i).encode()).digest() * (size // 32)
        expected[f"p{i}.tar"] = _file(src_dir / f"p{i}.tar", data)[1]
    rng = random.Random(20240611)  # fixed: the kill moments are repeatable
    killed = strays = 0
    for attempt in range(5):
        # a fresh retention root each time, so every attempt has real copying for the kill to interrupt
        root = tmp_path / f"ret{attempt}"
        proc = subprocess.Popen(
            [sys.executable, "-c", PUBLISHER, str(src_dir), str(root), str(n)], stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        incoming = root / INCOMING
        while proc.poll() is None and not (incoming.is_dir() and any(incoming.iterdir())):
            time.sleep(0.0002)  # wait for the first copy to start, whatever the disk's speed
        time.sleep(rng.uniform(0.0, 0.02))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed += proc.returncode == -signal.SIGKILL
        strays += len(list((root / INCOMING).iterdir())) if (root / INCOMING).is_dir() else 0
        finals = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.iterdir() if p.is_file()}
        for name, digest in finals.items():  # whatever is under a final name is complete and correct
            assert digest == expected[name], f"attempt {attempt}: {name} is partial or wrong"
    assert killed >= 3, "the publisher finished before most kills: nothing was proved"
    assert strays >= 1, "no kill landed mid-copy: widen the kill window"
    done = subprocess.run(
        [sys.executable, "-c", PUBLISHER, str(src_dir), str(root), str(n)], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.iterdir() if p.is_file()} == expected
    assert sweep_incoming(root) == [] and list((root / INCOMING).iterdir()) == []  # strays of dead publishers were swept
