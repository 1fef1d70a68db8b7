"""The home's resident flow runner (``voxledger.hosting.runner``), as a user meets it: the ``voxledger``
program against a home's own Prefect server. A warm runner answers exactly as the command's own
process does (output, errors, receipts); Ctrl-C reaches its flow; a killed command takes its flow
with it; ``server stop`` ends it."""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.corpus_factory import build_small_corpus
from tests.factories import interrupt
from tests.flows.conftest import write_plans
from voxledger.hosting import runner
from voxledger.schemas.errors import AuditFailedError, RequestRefusedError, VoxledgerError
from voxledger.tasks.processes import pid_alive

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    # no PREFECT_API_URL: the home's own server, as a user's commands use it; and the same environment for
    # every command (pytest names the current test in one: a runner serves only its own environment)
    drop = ("PREFECT_API_URL", "VOXLEDGER_PREFECT", "VOXLEDGER_RUNNER", "PYTEST_CURRENT_TEST")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return env | extra


def _vx(home: Path) -> list[str]:
    return [sys.executable, "-m", "voxledger.cli", "--home", str(home)]


def _log(home: Path) -> str:
    path = home / "prefect" / "runner.log"
    return path.read_text() if path.is_file() else ""


def _served(home: Path, pid: int) -> list[str]:
    """The runner's log lines about the command with this pid."""
    return [line for line in _log(home).splitlines() if f"for pid {pid}" in line]


class Warm:
    def __init__(self, home: Path, corpus: Path, plans: Path, runner_pid: int) -> None:
        self.home, self.corpus, self.plans, self.runner_pid = home, corpus, plans, runner_pid

    def audit(self, corpus: Path | None = None, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
        cmd = [*_vx(self.home), "audit", str(corpus or self.corpus), "--policy", str(self.plans / "audit.yaml"), "--json"]
        proc = subprocess.Popen(cmd, env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=600)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err), _served(self.home, proc.pid)


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Warm]:
    """A home whose first command (an audit, run in its own process) left a server and a runner warm.
    Its runner log starts full (a home's 7,000 commands before): starting the runner moves it aside."""
    tmp = tmp_path_factory.mktemp("runner")
    home, corpus, plans = tmp / "home", build_small_corpus(tmp / "corpus"), write_plans(tmp / "plans")
    (home / "prefect").mkdir(parents=True)
    old_log = b"2026-01-01T00:00:00 runner 1: an old line\n" * (runner.LOG_LIMIT_BYTES // 40 + 1)
    (home / "prefect" / "runner.log").write_bytes(old_log)
    w = Warm(home, corpus, plans, 0)
    first, served = w.audit()
    assert first.returncode == 0, first.stderr
    assert served == [], "the first command of a home has no runner to use"
    deadline = time.monotonic() + 180
    while "serving" not in _log(home):
        assert time.monotonic() < deadline, f"the runner never served: {_log(home)}"
        time.sleep(0.2)
    w.runner_pid = int(re.findall(r"runner (\d+): serving", _log(home))[-1])
    assert (home / "prefect" / "runner.log.1").read_bytes() == old_log and "an old line" not in _log(home)
    yield w
    subprocess.run([*_vx(home), "server", "stop"], env=_env(), capture_output=True, timeout=120, check=False)


@pytest.mark.prefect
def test_a_warm_runner_answers_as_the_commands_own_process_does(warm: Warm) -> None:
    served, lines = warm.audit()
    assert served.returncode == 0, served.stderr
    assert any("running voxledger.flows.audit:audit" in line for line in lines) and any("returned" in line for line in lines), lines
    here, lines_here = warm.audit(VOXLEDGER_RUNNER="false")
    assert here.returncode == 0 and lines_here == [], here.stderr
    assert json.loads(served.stdout) == json.loads(here.stdout)  # the same cached receipt, the same summary

    # a failing audit: the same exit, message and receipt either way (the error crosses back whole)
    leaky = warm.corpus.parent / "leaky"
    if not leaky.exists():
        import shutil

        shutil.copytree(warm.corpus, leaky)
        rows = [json.loads(line) for line in (leaky / "manifest.jsonl").read_text().splitlines()]
        test_row = next(r for r in rows if r["split"] == "test")
        rows.append({**test_row, "id": test_row["id"] + "_copy", "split": "target_train"})  # the test recording trained on
        (leaky / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    failed, lines = warm.audit(leaky)
    failed_here, lines_here = warm.audit(leaky, VOXLEDGER_RUNNER="false")
    assert any("raised AuditFailedError" in line for line in lines) and lines_here == [], (lines, lines_here)
    assert failed.returncode == failed_here.returncode == 1, failed.stderr
    assert failed.stderr == failed_here.stderr and "AuditFailedError: audit of" in failed.stderr and "Traceback" not in failed.stderr
    assert json.loads(failed.stdout)["verdict"] == "fail" and failed.stdout == failed_here.stdout


def _training(warm: Warm, sigint: str = "terminal") -> subprocess.Popen[str]:
    """A pipeline run (with base training) that has reached its base training; started with SIGINT as
    at a terminal, or ignored (``nohup``, a background job)."""
    cmd = [*_vx(warm.home), "pipeline", "run", str(ROOT / "plans" / "pipeline-demo-train-base.yaml"), "--corpus", str(warm.corpus)]
    disposition = signal.SIG_DFL if sigint == "terminal" else signal.SIG_IGN
    proc = subprocess.Popen(cmd, env=_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, disposition))  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        if "stage train_base: running" in line:
            break
    return proc


@pytest.mark.prefect
@pytest.mark.parametrize("sigint", ["terminal", "ignored"])
def test_ctrl_c_reaches_the_flow_in_the_runner(warm: Warm, sigint: str) -> None:
    # ignored: the pipeline takes SIGINT with a handler of its own, in the command's own process too
    proc = _training(warm, sigint)
    try:
        code, took, rest = interrupt(proc)
    finally:
        proc.kill()
    assert code == 130 and took < 5.0, (code, took, rest)
    assert "Interrupted: pipeline interrupted at stage train_base; failed pipeline receipt" in rest and "Traceback" not in rest
    assert any("raised InterruptedRunError" in line for line in _served(warm.home, proc.pid)), _log(warm.home)


@pytest.mark.prefect
def test_a_killed_command_takes_its_flow_in_the_runner_with_it(warm: Warm) -> None:
    proc = _training(warm)
    try:
        (started,) = [line for line in _served(warm.home, proc.pid) if "running voxledger.flows.pipeline:pipeline" in line]
        child = int(re.findall(r"runner (\d+):", started)[0])
        assert child != warm.runner_pid and pid_alive(child)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    deadline = time.monotonic() + 10
    while pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(child), "the flow's process outlived its killed command"
    assert pid_alive(warm.runner_pid), "the runner itself serves on"


@pytest.mark.prefect
def test_server_stop_ends_the_runner(warm: Warm) -> None:
    stopped = subprocess.run([*_vx(warm.home), "server", "stop"], env=_env(), capture_output=True, text=True, timeout=120, check=False)
    assert stopped.returncode == 0, stopped.stderr
    deadline = time.monotonic() + 15
    while pid_alive(warm.runner_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not pid_alive(warm.runner_pid) and "server is gone; exiting" in _log(warm.home)


def test_a_runner_is_keyed_on_home_environment_path_and_code(tmp_path: Path) -> None:
    env, path, code = {"A": "1"}, ["/x"], "c" * 64
    name = runner.fingerprint(tmp_path, env, path, code)
    assert runner.fingerprint(tmp_path, dict(env), list(path), code) == name
    assert runner.fingerprint(tmp_path, {"A": "1", "PWD": "/elsewhere", "OLDPWD": "/"}, path, code) == name  # the shell's own
    others = [
        runner.fingerprint(tmp_path / "other", env, path, code),
        runner.fingerprint(tmp_path, {"A": "2"}, path, code),
        runner.fingerprint(tmp_path, {**env, "VOXLEDGER_SYNC": "1"}, path, code),
        runner.fingerprint(tmp_path, env, ["/y"], code),
        runner.fingerprint(tmp_path, env, path, "d" * 64),
    ]
    assert len({name, *others}) == 6
    # the code signature follows every source file: a touched file is new code
    src = Path(runner.__file__)
    before, stat = runner.code_signature(), src.stat()
    try:
        os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert runner.code_signature() != before
    finally:
        os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert runner.code_signature() == before


def test_every_error_crosses_a_process_boundary_whole() -> None:
    failed = pickle.loads(pickle.dumps(AuditFailedError("audit of c failed", receipt_id="ab" * 32)))
    assert type(failed) is AuditFailedError and str(failed) == "audit of c failed" and failed.receipt_id == "ab" * 32
    refused = pickle.loads(pickle.dumps(RequestRefusedError(409, "stale", "a newer answer exists")))
    assert (refused.status, refused.code, str(refused)) == (409, "stale", "a newer answer exists")
    assert isinstance(refused, VoxledgerError) and refused.receipt_id is None


@pytest.mark.skipif(os.getuid() != 0, reason="squatting the name needs a process of another user (run as root)")
def test_a_name_held_by_another_user_is_refused(tmp_path: Path) -> None:
    """Another user binding this command's runner name first gets neither its environment nor its files."""
    name = runner.fingerprint(tmp_path, dict(os.environ), list(sys.path), runner.code_signature())
    squat = (
        "import socket, sys, time; s = socket.socket(socket.AF_UNIX); s.bind('\\0' + sys.argv[1]); s.listen(1); print('up', flush=True); "
        "time.sleep(60)"
    )
    system_python = Path("/usr/bin/python3")  # the other user cannot run this checkout's interpreter
    if not system_python.exists():
        pytest.skip("no /usr/bin/python3 for the other user")
    proc = subprocess.Popen([str(system_python), "-c", squat, runner._address(name)[1:]], stdout=subprocess.PIPE, text=True,
                            user=65534, group=65534, cwd="/")  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        with pytest.raises(runner._Refused, match="held by uid 65534"):
            runner._ask(name, tmp_path, "voxledger.flows.audit:audit", (), {}, print)
    finally:
        proc.kill()
        proc.wait()


def test_the_runner_log_is_rotated_at_its_limit_and_keeps_one_older_file(tmp_path: Path) -> None:
    log, older = tmp_path / "runner.log", tmp_path / "runner.log.1"
    assert runner.rotate_log(log, limit=100) == log and not log.exists()  # no log yet: nothing to do
    log.write_bytes(b"a" * 99)
    runner.rotate_log(log, limit=100)
    assert log.read_bytes() == b"a" * 99 and not older.exists()  # under the limit: kept in place
    log.write_bytes(b"b" * 100)
    older.write_bytes(b"the one before")
    runner.rotate_log(log, limit=100)
    assert not log.exists() and older.read_bytes() == b"b" * 100  # moved aside, replacing the older one
