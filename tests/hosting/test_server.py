"""The home's long-lived Prefect server: started on demand, reused, survives a killed command
without leaving a process of that command behind, replaced when it dies, stopped on request."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.corpus_factory import build_small_corpus
from tests.flows.conftest import write_plans
from voxledger.hosting.server import healthy, read_state


def _env() -> dict[str, str]:
    # no PREFECT_API_URL: the commands use the home's own server, as a user's would
    return {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "VOXLEDGER_PREFECT")}


def _cli(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "voxledger.cli", "--home", str(home), *args], env=_env(), capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, pgid, command line) of every live process we can read (an exited one that its
    parent, often init, has not reaped yet is not running anything)."""
    out: dict[int, tuple[int, int, str]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat[0] not in ("Z", "X"):
            out[int(d.name)] = (int(stat[1]), int(stat[2]), cmd)
    return out


def _flow_running(api_url: str, name: str) -> bool:
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def check() -> bool:
        async with get_client() as client:
            flows = {f.id: f.name for f in await client.read_flows()}
            return any(
                flows.get(r.flow_id) == name and r.state_type and r.state_type.value == "RUNNING"
                for r in await client.read_flow_runs(limit=50)
            )

    with temporary_settings({PREFECT_API_URL: api_url}):
        return asyncio.run(check())


def test_killed_command_leaves_nothing_and_the_next_one_works(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from voxledger.hosting.server import start_in_background

    home = tmp_path / "home"
    assert start_in_background(home) is None  # an API URL of one's own (the tests'): no home server is started
    monkeypatch.delenv("PREFECT_API_URL")
    starting = start_in_background(home)  # as `demo run` does while it builds its corpus
    corpus, plans = build_small_corpus(tmp_path / "corpus"), write_plans(tmp_path / "plans")
    assert starting is not None
    starting.join(120)
    state = read_state(home)
    assert state is not None and healthy(state.api_url)
    first = _cli(home, "audit", str(corpus), "--policy", str(plans / "audit.yaml"), "--json")
    assert first.returncode == 0, first.stderr
    assert read_state(home) == state  # the command used the server started in the background
    # a long command, killed with SIGKILL while its flow runs
    proc = subprocess.Popen([sys.executable, "-m", "voxledger.cli", "--home", str(home), "pipeline", "run", str(plans / "pipeline.yaml"),
                             "--corpus", str(corpus)], env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own process group: everything it starts is findable  # fmt: skip
    deadline = time.monotonic() + 300
    while not _flow_running(state.api_url, "pipeline"):
        assert proc.poll() is None and time.monotonic() < deadline, "the pipeline flow never reached RUNNING"
        time.sleep(0.5)
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(1.0)
    procs = _processes()
    orphans = [cmd for pid, (ppid, pgid, cmd) in procs.items() if (ppid == proc.pid or pgid == proc.pid) and pid != proc.pid]
    assert orphans == [], f"processes of the killed command remain: {orphans}"
    assert [pid for pid, (_, pgid, _) in procs.items() if pgid == state.pid], "the home's server must still run"
    # the next command finds the same server and works
    again = _cli(home, "audit", str(corpus), "--policy", str(plans / "audit.yaml"), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["receipt"] == json.loads(first.stdout)["receipt"]
    assert read_state(home) == state
    # a dead server is replaced cleanly
    os.killpg(state.pid, signal.SIGKILL)
    time.sleep(0.5)
    third = _cli(home, "audit", str(corpus), "--policy", str(plans / "audit.yaml"))  # progress lines on stderr (a pipe)
    assert third.returncode == 0, third.stderr
    assert "] starting this home's Prefect server" in third.stderr, third.stderr  # what it waits for, said as it starts
    new = read_state(home)
    assert new is not None and new.pid != state.pid and healthy(new.api_url)
    stopped = _cli(home, "server", "stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    time.sleep(0.5)
    assert not [pid for pid, (_, pgid, _) in _processes().items() if pgid == new.pid]


def test_a_copied_home_does_not_reuse_or_stop_the_originals_server(tmp_path: Path) -> None:
    """``cp -a`` carries server.json along: the copy must neither reuse nor stop the original's server."""
    import shutil

    from voxledger.hosting.server import server_dir, stop_server
    from voxledger.tasks.processes import pid_alive

    original, copy = tmp_path / "original", tmp_path / "copy"
    standin = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)  # plays the server
    try:
        server_dir(original).mkdir(parents=True)
        state = {"pid": standin.pid, "port": 1, "api_url": "http://127.0.0.1:1/api", "started_at": 0.0, "home": str(original.resolve())}
        (server_dir(original) / "server.json").write_text(json.dumps(state))
        shutil.copytree(original, copy)
        assert read_state(original) is not None and read_state(original).pid == standin.pid  # type: ignore[union-attr]
        assert read_state(copy) is None
        assert stop_server(copy) is False
        assert pid_alive(standin.pid) and standin.poll() is None  # the original's server was left alone
    finally:
        standin.send_signal(signal.SIGKILL)
        standin.wait()


def _sqlite_tables_with_rows(db: Path) -> set[str]:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(db)) as con:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {n for n in names if con.execute(f'SELECT 1 FROM "{n}" LIMIT 1').fetchone() is not None}  # noqa: S608


def test_a_new_home_starts_from_the_checked_database_template_and_never_from_a_bad_one(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The first fresh home keeps its migrated database (schema rows only) as the template; the next
    new home starts from it and its server works; a template whose bytes do not match its digest,
    or that holds run history, is never used, and a home's own database is never replaced."""
    import asyncio
    import hashlib
    import shutil
    import sqlite3

    from voxledger.hosting.server import (
        _save_template,
        _seed_from_template,
        ensure_server,
        server_dir,
        stop_server,
        template_paths,
    )
    from voxledger.stores.prefect_template import TEMPLATE_TABLES

    monkeypatch.delenv("PREFECT_API_URL")
    monkeypatch.setenv("VOXLEDGER_CACHE_DIR", str(tmp_path / "cache"))
    template, sidecar = template_paths()
    assert template.parent == tmp_path / "cache" / "prefect-db"
    first, second = tmp_path / "first", tmp_path / "second"
    try:
        ensure_server(first)
        assert read_state(first).seeded_from == ""  # type: ignore[union-attr]  # nothing cached yet: migrated afresh
        digest = hashlib.sha256(template.read_bytes()).hexdigest()
        assert json.loads(sidecar.read_text())["sha256"] == digest
        assert "alembic_version" in _sqlite_tables_with_rows(template) <= TEMPLATE_TABLES  # no run history in it
        url = ensure_server(second)
        assert read_state(second).seeded_from == digest  # type: ignore[union-attr]

        async def make_and_read_a_flow_run() -> str:
            from prefect.client.orchestration import get_client
            from prefect.settings import PREFECT_API_URL, temporary_settings

            with temporary_settings({PREFECT_API_URL: url}):
                async with get_client() as client:
                    flow_id = await client.create_flow_from_name("seeded-home-check")
                    return (await client.read_flow(flow_id)).name

        assert asyncio.run(make_and_read_a_flow_run()) == "seeded-home-check"  # the seeded server records runs
    finally:
        stop_server(first)
        stop_server(second)
    # the second home now holds history: it is never kept as a template
    shutil.copy(template, tmp_path / "good.db")
    _save_template(server_dir(second))
    assert hashlib.sha256(template.read_bytes()).hexdigest() == digest, "a database with run history replaced the template"
    # a tampered template (a byte flipped) is refused, and nothing is left in the new home
    data = bytearray(template.read_bytes())
    data[len(data) // 2] ^= 0xFF
    template.write_bytes(bytes(data))
    third = server_dir(tmp_path / "third")
    third.mkdir(parents=True)
    assert _seed_from_template(third) == ""
    assert sorted(p.name for p in third.iterdir()) == []
    # a template whose digest matches but which holds run history is refused too
    shutil.copy(tmp_path / "good.db", template)
    with sqlite3.connect(template) as con:
        con.execute("CREATE TABLE planted (x)")
        con.execute("INSERT INTO planted VALUES (1)")
    sidecar.write_text(json.dumps({"sha256": hashlib.sha256(template.read_bytes()).hexdigest(), "memo": None}))
    assert _seed_from_template(third) == ""
    # a home with a database of its own keeps it, even beside a good template
    shutil.copy(tmp_path / "good.db", template)
    sidecar.write_text(json.dumps({"sha256": digest, "memo": None}))
    (third / "prefect.db").write_bytes(b"its own")
    assert _seed_from_template(third) == ""
    assert (third / "prefect.db").read_bytes() == b"its own"
    (third / "prefect.db").unlink()
    assert _seed_from_template(third) == digest  # the check above was not vacuous
    # several savers at once (threads of one process share a pid): one consistent template, no leftovers
    import threading

    monkeypatch.setenv("VOXLEDGER_CACHE_DIR", str(tmp_path / "cache-2"))
    template2, sidecar2 = template_paths()
    savers = [threading.Thread(target=_save_template, args=(server_dir(first),)) for _ in range(4)]
    for t in savers:
        t.start()
    for t in savers:
        t.join()
    assert json.loads(sidecar2.read_text())["sha256"] == hashlib.sha256(template2.read_bytes()).hexdigest()
    assert sorted(p.name for p in template2.parent.iterdir()) == [template2.name, sidecar2.name]


def test_a_server_that_fails_on_the_template_names_it_and_the_fix_works(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A template that passes its checks but that Prefect cannot start on (an unknown Alembic revision):
    the error names the template and the home's database; deleting both, as it says, starts afresh."""
    import hashlib
    import sqlite3

    import pytest

    from voxledger.hosting.server import ServerError, ensure_server, server_dir, stop_server, template_paths

    monkeypatch.delenv("PREFECT_API_URL")
    monkeypatch.setenv("VOXLEDGER_CACHE_DIR", str(tmp_path / "cache"))
    template, sidecar = template_paths()
    template.parent.mkdir(parents=True)
    with sqlite3.connect(template) as con:  # schema-only by the template's own rule, but no Prefect schema
        con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        con.execute("INSERT INTO alembic_version VALUES ('ffffffffffff')")
    sidecar.write_text(json.dumps({"sha256": hashlib.sha256(template.read_bytes()).hexdigest(), "memo": None}))
    home = tmp_path / "home"
    started = time.monotonic()
    with pytest.raises(ServerError) as failed:
        ensure_server(home, timeout_s=90)
    # the server exits at its failed migration; that ends the wait (its unreaped zombie once looked alive until the timeout)
    assert time.monotonic() - started < 45, "the failed start-up was not noticed before the timeout"
    assert "exited (code 3) before answering: alembic.util.exc.CommandError: Can't locate revision" in str(failed.value)
    assert f"delete {template} and this home's prefect/prefect.db" in str(failed.value)
    with pytest.raises(ServerError) as again:  # the command's own attempt after its background start failed: the same advice
        ensure_server(home, timeout_s=90)
    assert f"delete {template} and this home's prefect/prefect.db" in str(again.value)
    template.unlink()
    (server_dir(home) / "prefect.db").unlink()
    try:
        ensure_server(home)
        assert read_state(home).seeded_from == ""  # type: ignore[union-attr]
        assert template.is_file()  # and a good template is kept for the next home
    finally:
        stop_server(home)


def test_a_failed_starts_cause_is_the_last_error_of_the_logs_tail_never_a_cut_line(tmp_path: Path) -> None:
    """Only the log's last LOG_TAIL_BYTES are read; the line the cut lands in is dropped, not read from its middle."""
    from voxledger.hosting.server import LOG_TAIL_BYTES, _last_error

    log = tmp_path / "server.log"
    old = "RuntimeError: an old start that failed weeks ago\n"
    cut = "INFO: a request body mentioned ValueError: in passing\n"  # no error line; from its middle it would be one
    into = cut.index("ValueError")
    need = LOG_TAIL_BYTES - (len(cut) - into)  # filler so that the tail starts exactly at "ValueError"
    line = "INFO: request served\n"
    filler = line * (need // len(line) - 1)
    filler += "INFO: " + "." * (need - len(filler) - 7) + "\n"
    log.write_text(old + "x" * LOG_TAIL_BYTES + "\n" + cut + filler)
    assert log.read_bytes()[-LOG_TAIL_BYTES:].startswith(b"ValueError: in passing")
    assert _last_error(log) == ""  # the old error is outside the tail; the cut line is not taken for one
    with log.open("a") as f:
        f.write("alembic.util.exc.CommandError: Can't locate revision identified by 'ffffffffffff'\nINFO: shutting down\n")
    assert _last_error(log) == "alembic.util.exc.CommandError: Can't locate revision identified by 'ffffffffffff'"
    short = tmp_path / "short.log"
    short.write_text("sqlite3.OperationalError: database is locked\nINFO: ok\n")
    assert _last_error(short) == "sqlite3.OperationalError: database is locked"  # a log shorter than the tail keeps its first line
    assert _last_error(tmp_path / "missing.log") == ""
