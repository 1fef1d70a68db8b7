"""Every way a user's own corpus went wrong at the CLI: a clean ``Error:`` line, the right exit code, no traceback.

One small home is shared by the module (a stored binary file, a passing audit, an empty corpus's
failing audit); cases that only read run in-process through click's runner. Cases whose error is
raised inside a Prefect flow run as subprocesses, because Prefect's console handler writes to the
real stderr, which the runner does not capture.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from voxledger.cli import main
from voxledger.cli.common import plans_dir
from voxledger.stores.home import Home

from .corpus_factory import build_small_corpus

pytestmark = pytest.mark.prefect

PLANS = plans_dir()


def run(home: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner(env=env).invoke(main, ["--home", str(home), *args])
    out = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        out += f"\nTraceback (escaped the CLI): {result.exception!r}"
    return result.exit_code, out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A home with an ingest of a binary file, a passing audit and a failing (empty) audit."""
    root = tmp_path_factory.mktemp("cli-errors")
    home = root / "home"
    corpus = build_small_corpus(root / "corpus")
    (root / "blob.bin").write_bytes(bytes(range(256)) * 4)  # not UTF-8
    code, out = run(home, "store", "put", str(root / "blob.bin"), "--json")
    assert code == 0, out
    binary = json.loads(out)["sha256"]
    code, out = run(home, "audit", str(corpus), "--json")
    assert code == 0, out
    audit = json.loads(out)["receipt"]
    (root / "empty").mkdir()
    (root / "empty" / "manifest.jsonl").write_text("")
    code, empty_out = run(home, "audit", str(root / "empty"), "--json")
    code_q, out = run(home, "query", "SELECT receipt_sha256 FROM receipts WHERE kind = 'plan'", "--json")
    plan = json.loads(out)[0]["receipt_sha256"]
    (root / "empty.json").write_text("")
    (root / "bad.yaml").write_text("name: [unclosed\n")
    return {"root": root, "home": home, "corpus": corpus, "binary": binary, "audit": audit, "plan": plan,
            "empty_audit": (code, empty_out)}  # fmt: skip


def test_empty_corpus_fails_its_audit_and_is_recorded(world: dict) -> None:  # type: ignore[type-arg]
    code, out = world["empty_audit"]
    assert code == 1, out
    assert "empty_corpus" in out and '"verdict": "fail"' in out and "Traceback" not in out
    rid = json.JSONDecoder().raw_decode(out)[0]["receipt"]
    assert len(rid) == 64  # the failing audit is still recorded
    (finding,) = Home(world["home"]).receipts.read_document(rid)["result"]["findings"]
    assert "manifest.jsonl, 0 non-blank line(s)" in finding["message"] and "one JSON object per line" in finding["message"], finding


# (arguments with placeholders, exit code, fragment of the message)
CASES = [
    ("eval report {plan}", 1, "is a plan receipt, not evaluation"),
    ("eval report {audit}", 1, "is a audit receipt, not evaluation"),
    ("receipt show {binary}", 1, "names an artifact"),
    ("export in-toto {binary}", 1, "names an artifact"),
    ("provenance diff {binary} {audit}", 1, "names an artifact"),
    ("eval report {binary}", 1, "names an artifact"),
    ("alias history --at yesterday", 2, "'yesterday' is not an ISO date/time"),
    ("alias history nosuch", 1, "no alias 'nosuch'"),
    ("eval run {plans}/eval-demo.yaml --corpus {corpus} --bind base", 2, "'base' is not NAME=SHA256"),
    ("checkpoints prune --execute {root}/empty.json", 2, "is not a prune plan"),
    ("package keygen {root}/nodir/sub/key", 2, "does not exist; create it first"),
    ("package verify 0", 1, "'0' is neither a file nor a package digest"),
    ("query ''", 2, "give a SQL statement"),
    ("alias history --at 2026-13-45", 2, "is not an ISO date/time"),
    ("lineage " + "ab" * 32, 1, "no receipt or artifact in the catalog has the id"),
    ("lineage abc", 1, "at least 8 hex characters"),
    ("lineage 0000000g", 1, "is not a sha256 digest or prefix"),
    ("receipt show 00000000", 1, "no receipt or artifact in the catalog has the prefix '00000000'"),
    ("train {corpus} --audit {plan8} --plan {plans}/train-tiny-base.yaml", 1, "is a plan receipt, not audit"),
    ("promote {audit8} --corpus {corpus}", 1, "is a audit receipt, not training_run"),
    ("equivalence attribute 00000000 11111111", 1, "no receipt or artifact in the catalog has the prefix"),
]


@pytest.mark.parametrize(("args", "code", "fragment"), CASES, ids=[c[0].split(" {")[0] for c in CASES])
def test_failure_is_one_clean_line(world: dict, args: str, code: int, fragment: str) -> None:  # type: ignore[type-arg]
    values = {**world, "plans": PLANS, "plan8": str(world["plan"])[:8], "audit8": str(world["audit"])[:8]}
    got, out = run(world["home"], *shlex.split(args.format(**values)))
    assert got == code, out
    assert fragment in out, out
    assert "Traceback" not in out and "unexpected" not in out, out


def test_case_table_size() -> None:
    assert len(CASES) == 21


def test_ids_chain_by_prefix(world: dict) -> None:  # type: ignore[type-arg]
    home, audit, binary = world["home"], str(world["audit"]), str(world["binary"])
    code, out = run(home, "receipt", "show", audit[:8])
    assert code == 0 and json.loads(out)["kind"] == "audit"
    code, out = run(home, "store", "verify", binary[:10])
    assert code == 0 and "1 objects verified" in out, out
    code, out = run(home, "provenance", "downstream", audit[:8], "--json")
    assert code == 0 and audit in {r["receipt"] for r in json.loads(out)}
    doc = json.loads(run(home, "receipt", "show", audit)[1])
    for role in ("manifest", "audio_tree"):  # the documented corpus inputs lead to the audit that recorded them
        digest = next(s["sha256"] for s in doc["subjects"] if s["role"] == role)
        code, out = run(home, "provenance", "downstream", digest[:12], "--json")
        assert code == 0 and audit in {r["receipt"] for r in json.loads(out)}, (role, out)


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("voxledger ")


def _tree_state(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()}


def test_read_only_home_serves_every_read_command(world: dict, tmp_path: Path) -> None:  # type: ignore[type-arg]
    """Permissions are removed for real; when the tests run as root (who writes anyway), the home is
    also declared read-only through VOXLEDGER_READ_ONLY, the switch a read-only mount uses. Either
    way the proof is the same: every read works and not one file under the home changes."""
    import shutil

    home = tmp_path / "ro-home"
    shutil.copytree(world["home"], home, ignore=shutil.ignore_patterns("*.lock", "prefect*", "server*"))
    (home / "cache" / "stat-cache.sqlite").unlink(missing_ok=True)  # the cache must not be needed
    env = {"VOXLEDGER_READ_ONLY": "1"} if os.geteuid() == 0 else None
    before = _tree_state(home)
    subprocess.run(["chmod", "-R", "a-w", str(home)], check=True)
    try:
        audit = str(world["audit"])
        for args in (
            ("query", "SELECT count(*) AS n FROM receipts", "--json"),
            ("lineage", audit[:8]),
            ("store", "verify"),
            ("receipt", "show", audit[:8]),
            ("provenance", "downstream", audit[:8]),
            ("dashboard", "-o", str(tmp_path / "dash.html")),
        ):
            code, out = run(home, *args, env=env)
            assert code == 0, (args, out)
        code, out = run(home, "store", "put", str(world["root"] / "empty.json"), env=env)
        assert code == 1 and "read-only" in out and "Traceback" not in out, out
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(home)], check=True)
    assert _tree_state(home) == before


def test_disk_full_is_said_plainly(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[type-arg]
    import errno

    from voxledger.stores.blobs import LocalBlobStore

    def full(*_a: object, **_k: object) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(LocalBlobStore, "put_bytes", full)
    monkeypatch.setattr(LocalBlobStore, "put_file", full)
    code, out = run(world["home"], "store", "put", str(world["root"] / "blob.bin"))
    assert code == 1 and "disk is full" in out and "Nothing already recorded was lost" in out and "Free space" in out, out
    assert "Traceback" not in out


def _cli(home: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "VOXLEDGER_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "voxledger.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


def test_errors_inside_flows_print_no_prefect_traceback(world: dict) -> None:  # type: ignore[type-arg]
    root, corpus, audit = world["root"], str(world["corpus"]), str(world["audit"])
    home = world["home"]
    cases = {
        "audit --policy malformed": (["audit", corpus, "--policy", str(root / "bad.yaml")], "PlanError"),
        "pipeline run malformed": (["pipeline", "run", str(root / "bad.yaml"), "--corpus", corpus], "PlanError"),
        "eval run unbound input": (
            ["eval", "run", str(PLANS / "eval-demo.yaml"), "--corpus", corpus, "--bind", f"base={audit[:10]}"],
            "Error",
        ),
    }
    procs = {name: _cli(home, *argv) for name, (argv, _) in cases.items()}
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 1, (name, out)
        assert cases[name][1] in out and "Traceback" not in out and "| ERROR" not in out and "| WARNING" not in out, (name, out)


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"VOXLEDGER_S3_BUCKET": "b", "VOXLEDGER_S3_WORKERS": "abc"}, "VOXLEDGER_S3_WORKERS='abc' is not a whole number of at least 1"),
        ({"VOXLEDGER_SYNC": "maybe"}, "VOXLEDGER_SYNC='maybe' is not a yes/no value"),
        ({"VOXLEDGER_PREFECT": "server"}, "VOXLEDGER_PREFECT='server' is not one of home, ephemeral"),
    ],
)
def test_a_bad_setting_stops_any_command_in_one_line(tmp_path: Path, env: dict[str, str], fragment: str) -> None:
    """Settings are checked when the CLI starts, so even a command that never reads the variable says so."""
    for args in (("store", "status", "--offline"), ("query", "SELECT 1")):
        code, out = run(tmp_path / "home", *args, env=env)
        assert code == 1 and f"Error: SettingsError: {fragment}" in out, (args, out)
        assert len(out.strip().splitlines()) == 1 and "Traceback" not in out, out
    assert not (tmp_path / "home").exists()  # stopped before anything was written


def test_a_bad_setting_is_one_line_on_the_real_stderr(tmp_path: Path) -> None:
    env = {**os.environ, "VOXLEDGER_HOME": str(tmp_path / "home"), "VOXLEDGER_S3_WORKERS": "abc"}
    proc = subprocess.run([sys.executable, "-m", "voxledger.cli", "store", "verify"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout
    assert proc.stderr.startswith("Error: SettingsError: VOXLEDGER_S3_WORKERS='abc' is not a whole number"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
