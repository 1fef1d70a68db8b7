"""A long-lived local Prefect server per voxledger home, started on demand and reused.

Prefect's default without a configured API is a temporary server started inside every process
(16-17 s each time, and left running when that process is killed). voxledger instead keeps one
``prefect server start`` per home, bound to 127.0.0.1, its SQLite database and logs under
``<home>/prefect``. The first command that needs it starts it (in its own session, so a killed
command never takes it down half-way, and never leaves a second one); later commands find it
through ``<home>/prefect/server.json`` and a health check, and replace it when it is gone or
unhealthy. It stops itself after ``idle_timeout_s`` without database activity, or on
``voxledger server stop``. Run history therefore persists in the home, beside the receipts.

A new home's server would spend about half its start creating and migrating an empty SQLite
database. The first fresh start of each Prefect version therefore keeps a copy of the database as
it stands once the server answers (schema and Prefect's block types only: a copy holding any other
row is refused) in the user's cache, with its SHA-256; later new homes start from that copy when
its bytes still match. A home that already has a database is never touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from voxledger.schemas.errors import VoxledgerError
from voxledger.stores import prefect_template as template_db
from voxledger.tasks.processes import group_alive
from voxledger.tasks.processes import pid_alive as _alive

STARTUP_TIMEOUT_S = 120.0
IDLE_TIMEOUT_S = 3600.0


class ServerError(VoxledgerError):
    """The local Prefect server could not be started, reached or stopped."""


@dataclass(frozen=True)
class ServerState:
    """What ``server.json`` records: the supervisor's pid (its process group), port and URL."""

    pid: int
    port: int
    api_url: str
    started_at: float
    home: str = ""  # the resolved home it serves: a copied home (cp -a) holds the original's file, not its server
    seeded_from: str = ""  # SHA-256 of the cached database template this home's database started from; "" when migrated afresh


def server_dir(home_root: Path) -> Path:
    """Where a home's Prefect server keeps its database, logs and state."""
    return home_root / "prefect"


def server_env(home_root: Path) -> dict[str, str]:
    """Environment of the server process: offline, quiet, state under the home."""
    env = dict(os.environ)
    env.pop("PREFECT_API_URL", None)
    env.update(
        {
            "PREFECT_HOME": str(server_dir(home_root)),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_UI_ENABLED": "false",
            "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
            "PREFECT_LOGGING_LEVEL": "WARNING",
        }
    )
    return env


def read_state(home_root: Path) -> ServerState | None:
    """The recorded server of this very home, or None (absent or unreadable state file, or one
    written for another home: a copy of it)."""
    try:
        doc = json.loads((server_dir(home_root) / "server.json").read_text())
        state = ServerState(
            int(doc["pid"]),
            int(doc["port"]),
            str(doc["api_url"]),
            float(doc["started_at"]),
            str(doc.get("home", "")),
            str(doc.get("seeded_from", "")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    # a state file copied along with its home names the original's server: never reuse or stop that one
    return state if state.home == str(home_root.resolve()) else None


def _write_state(home_root: Path, state: ServerState) -> None:
    path = server_dir(home_root) / "server.json"
    tmp = path.with_name(f".server.json.{os.getpid()}")
    tmp.write_text(json.dumps(state.__dict__))
    os.replace(tmp, path)


def healthy(api_url: str, timeout_s: float = 2.0) -> bool:
    """True when the API answers its health endpoint."""
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=timeout_s) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_server(home_root: Path, *, idle_timeout_s: float = IDLE_TIMEOUT_S, timeout_s: float = STARTUP_TIMEOUT_S) -> str:
    """The API URL of this home's server, starting (or replacing) it when needed.

    Raises ServerError when the home is not writable or the server does not come up in time.
    """
    sdir = server_dir(home_root)
    try:
        sdir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(sdir / "server.lock"))
        lock.acquire(timeout=timeout_s)
    except (OSError, Timeout) as exc:
        raise ServerError(f"cannot use {sdir} for the Prefect server ({exc}); set PREFECT_API_URL or VOXLEDGER_PREFECT=ephemeral") from exc
    try:
        state = read_state(home_root)
        if state is not None and _alive(state.pid):
            if _wait_healthy(state.api_url, state.pid, 30.0):
                return state.api_url
            _kill_group(state.pid)
        return _start(home_root, idle_timeout_s, timeout_s)
    finally:
        lock.release()


def home_server_in_use(home_root: Path) -> bool:
    """Whether flows of this process will run against the home's own server: ``VOXLEDGER_PREFECT`` is
    ``home``, no ``PREFECT_API_URL`` in the environment, the home writable. Read without importing Prefect."""
    from voxledger.settings import load_settings

    if load_settings().prefect != "home" or os.environ.get("PREFECT_API_URL"):
        return False
    probe = home_root if home_root.exists() else home_root.parent
    return os.access(probe, os.W_OK)


def running(home_root: Path) -> bool:
    """Whether this home's server process is alive (read from ``server.json``; nothing is asked of it)."""
    state = read_state(home_root)
    return state is not None and _alive(state.pid)


def start_in_background(home_root: Path) -> threading.Thread | None:
    """Start (or find) the home's server on a daemon thread, so a command does other work while the
    server imports Prefect (``demo run`` builds its corpus meanwhile); the flow's own `ensure_server`
    then finds it answering. A failure here is left for that call to report. None when the home's
    server is not what this process's flows use."""
    if not home_server_in_use(home_root):
        return None

    def start() -> None:
        try:
            ensure_server(home_root)
        except Exception:  # noqa: BLE001, S110 (the flow's own ensure_server raises it with its message)
            pass

    thread = threading.Thread(target=start, name="voxledger-server-start", daemon=True)
    thread.start()
    return thread


def _wait_healthy(api_url: str, pid: int, timeout_s: float, child: subprocess.Popen[bytes] | None = None) -> bool:
    """True once the server answers; False at the deadline or as soon as it has exited. ``child``:
    the server is this process's own child, which stays a zombie (and looks alive to a signal 0)
    until it is reaped, so its exit is read with ``poll()``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if healthy(api_url):
            return True
        if (child.poll() is not None) if child is not None else not _alive(pid):
            return False
        time.sleep(0.25)
    return False


LOG_TAIL_BYTES = 65536


def _last_error(log: Path) -> str:
    """The last ``SomeError: message`` line of the server's log (what a failed start-up raised), or ""."""
    try:
        with log.open("rb") as f:
            start = max(0, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES)  # a long-lived home's log is never read whole
            f.seek(start)
            lines = f.read().decode("utf-8", errors="replace").splitlines()
        if start:
            lines = lines[1:]  # the tail starts mid-line: "lueError: ..." is not an error name
    except OSError:
        return ""
    found = [line.strip() for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b.*:", line)]
    return found[-1][:300] if found else ""


MEMO_FILE = "memo_store.toml"  # Prefect's record that its block types are registered (skips re-registering them)


def template_paths() -> tuple[Path, Path]:
    """The cached database template of the installed Prefect version and its sidecar (digest, memo).
    Raises OSError when no absolute cache directory can be named (callers then go without)."""
    from importlib.metadata import version

    from voxledger.settings import load_settings

    root = load_settings().cache_dir
    if root is None:
        xdg = os.environ.get("XDG_CACHE_HOME")
        try:
            root = (Path(xdg) if xdg else Path.home() / ".cache") / "voxledger"
        except RuntimeError as exc:  # no HOME and no passwd entry for this uid
            raise OSError(f"no cache directory ({exc}); set VOXLEDGER_CACHE_DIR") from exc
    if not root.is_absolute():  # no home directory to resolve: never a cache relative to the working directory
        raise OSError(f"no absolute cache directory ({root}); set VOXLEDGER_CACHE_DIR")
    folder, name = root / "prefect-db", f"prefect-{version('prefect')}"
    return folder / f"{name}.db", folder / f"{name}.json"


def _template_hint() -> str:
    """How to start a home without the cached template (named) if a server will not come up on it."""
    try:
        template, _ = template_paths()
    except OSError:
        return "set VOXLEDGER_CACHE_DIR to an empty folder"
    return f"delete {template} and this home's prefect/prefect.db, then run the command again; it migrates afresh"


def _unused_copy(sdir: Path, seeded: str) -> bool:
    """Whether the home's database was copied from the template (``seeded``) and still holds no run
    history (Prefect rewrites its header on opening, so its bytes are not compared): only then is
    deleting it, with the template, the fix a failed start is told; a database with history is not."""
    if not seeded:
        return False
    try:
        return template_db.schema_only(sdir / "prefect.db")
    except (OSError, template_db.Error):
        return False


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _seed_from_template(sdir: Path) -> str:
    """Copy the cached template into a home with no database yet; its digest, or "" when none was used
    (no template, a sidecar that does not match its bytes, or a database already there)."""
    db = sdir / "prefect.db"
    if any(f.exists() for f in (db, db.with_name("prefect.db-wal"))):
        return ""
    tmp = sdir / f".prefect.db.{os.getpid()}"
    try:
        template, sidecar = template_paths()
        meta = json.loads(sidecar.read_text())
        tmp.write_bytes(template.read_bytes())
        digest = _sha256(tmp)
        if digest != meta["sha256"] or not template_db.schema_only(tmp):
            return ""
        if isinstance(meta.get("memo"), str) and not (sdir / MEMO_FILE).exists():
            (sdir / MEMO_FILE).write_text(meta["memo"])
        os.link(tmp, db)  # never replaces a database that appeared meanwhile
    except (OSError, ValueError, KeyError, TypeError, template_db.Error):
        return ""
    finally:
        tmp.unlink(missing_ok=True)
    return digest


def _save_template(sdir: Path) -> None:
    """Keep a copy of a freshly migrated home database as the template for new homes. Best effort:
    only speed depends on it. A database holding any run history (``template_db.schema_only``) is never kept."""
    try:
        template, sidecar = template_paths()
        template.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    tmp = template.with_name(f".{template.name}.{uuid.uuid4().hex}")  # VACUUM INTO needs a path nobody else uses
    side_tmp = sidecar.with_name(f".{sidecar.name}.{uuid.uuid4().hex}")
    try:
        template_db.copy_database(sdir / "prefect.db", tmp)
        if not template_db.schema_only(tmp):
            return
        memo = sdir / MEMO_FILE
        meta = {"sha256": _sha256(tmp), "memo": memo.read_text() if memo.exists() else None}
        os.replace(tmp, template)
        side_tmp.write_text(json.dumps(meta))
        os.replace(side_tmp, sidecar)
    except (OSError, template_db.Error):
        return
    finally:
        for leftover in (tmp, side_tmp):
            leftover.unlink(missing_ok=True)


def _start(home_root: Path, idle_timeout_s: float, timeout_s: float) -> str:
    sdir = server_dir(home_root)
    # a database of the user's own (PREFECT_*DATABASE_CONNECTION_URL) is left to Prefect
    fresh = not (sdir / "prefect.db").exists() and not any(
        k.endswith("DATABASE_CONNECTION_URL") for k in os.environ if k.startswith("PREFECT_")
    )
    previous = read_state(home_root)
    # a database copied from the template keeps that lineage across restarts (server.json's seeded_from)
    seeded = _seed_from_template(sdir) if fresh else (previous.seeded_from if previous is not None else "")
    port = _free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    log = open(sdir / "server.log", "ab")  # noqa: SIM115 (handed to the child)
    cmd = [sys.executable, "-m", "voxledger.hosting.server", str(home_root), str(port), str(idle_timeout_s)]
    proc = subprocess.Popen(cmd, env=server_env(home_root), stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    _write_state(home_root, ServerState(proc.pid, port, api_url, time.time(), str(home_root.resolve()), seeded))
    if not _wait_healthy(api_url, proc.pid, timeout_s, child=proc):
        code = proc.poll()
        _kill_group(proc.pid)
        cause = _last_error(sdir / "server.log")
        raise ServerError(
            (
                f"the Prefect server for {home_root} exited (code {code}) before answering"
                if code is not None
                else f"the Prefect server for {home_root} did not answer within {timeout_s:.0f} s"
            )
            + (f": {cause}" if cause else "")
            + f"; see {sdir / 'server.log'}"
            + (f" (its database was copied from the cached template: {_template_hint()})" if _unused_copy(sdir, seeded) else "")
        )
    if fresh and not seeded:
        _save_template(sdir)
    return api_url


def _kill_group(pid: int, grace_s: float = 10.0) -> None:
    """SIGTERM the server's process group, SIGKILL what is left after ``grace_s``; returns once no
    process of the group is alive (the supervisor, Prefect, and anything Prefect started)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and group_alive(pid):
            time.sleep(0.1)
            _reap(pid)
        _reap(pid)
        if not group_alive(pid):
            return


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def stop_server(home_root: Path) -> bool:
    """Stop this home's server (its whole process group); True when one was running."""
    state = read_state(home_root)
    (server_dir(home_root) / "server.json").unlink(missing_ok=True)
    if state is None or not _alive(state.pid):
        return False
    _kill_group(state.pid)
    return True


def _supervise(home_root: Path, port: int, idle_timeout_s: float) -> int:
    """Run ``prefect server start`` as a child; stop it after ``idle_timeout_s`` of database silence."""
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui", "--analytics-off"]
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    db = server_dir(home_root) / "prefect.db"
    stop = {"now": False}

    def on_term(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    last = time.time()
    while child.poll() is None and not stop["now"]:
        time.sleep(1.0)
        for f in (db, db.with_name("prefect.db-wal")):
            if f.exists():
                last = max(last, f.stat().st_mtime)
        state = read_state(home_root)
        if time.time() - last > idle_timeout_s or state is None or state.pid != os.getpid():
            break
    ended = child.poll()  # on its own (a failed start-up): its code is the supervisor's
    if ended is None:
        child.terminate()
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
    return ended or 0


if __name__ == "__main__":
    sys.exit(_supervise(Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
