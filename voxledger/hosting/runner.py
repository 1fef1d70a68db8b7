"""A resident flow runner per home: Prefect and the flow's modules imported once, each command's
flow run in a fresh fork of it.

A stage command pays ~3 s to import Prefect and the stack before its flow starts; the flow itself
(cached) takes about as long as calling the stage function directly. The runner removes that
import: the first flow command of a home (run in-process as before) also starts a runner in the
background, which imports Prefect, ``hosting.runtime`` and that command's flow module, then waits on
a Linux abstract socket. A later command with the same interpreter, ``sys.path``, environment and
voxledger code connects, sends the flow's name and arguments with its stdin/stdout/stderr, and the
runner forks a child that runs the flow exactly as the command would have (the same
``runtime.run_here``, working directory, umask and environment), sends progress lines and the
result (or the exception) back, and exits. The command then prints as usual; the flow run is still a Prefect flow run.

Guarantees (``tests/hosting/test_runner.py`` tests all but the thread check):
- A runner serves only its own user, and a command talks only to its own user's runner
  (``SO_PEERCRED`` both ways: a name squatted by another user is refused). A different
  interpreter, path, environment or code (any ``voxledger`` source file changed) reaches a
  different runner (the socket name is a digest of all of it), and a runner exits when its code
  changes.
- The runner forks only while it has a single thread (checked in ``/proc/self/task``), so no lock
  held by a thread is copied into a child.
- Ctrl-C on the command reaches the flow (forwarded as SIGINT): the run records what it records
  in-process and the command exits 130. A command killed outright (SIGKILL, a closed terminal)
  takes its flow with it: the child kills its own process group when the command's end of the
  socket closes before the answer is on its way.
- A runner lives while its home's Prefect server does (``voxledger server stop`` ends it) and at
  most ``IDLE_TIMEOUT_S`` without a request.

``VOXLEDGER_RUNNER=false`` turns it off; only the ``voxledger`` program itself uses it (a command
invoked in-process, as by click's test runner, runs its flow in-process). Linux only.

Longer than 500 lines on purpose: the runner's server and its client speak one framed protocol over
one socket, and keeping both ends in one module keeps the framing, the version check and the
fallbacks in step.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PRELOAD = (
    "prefect.flow_engine",
    "prefect.task_engine",
    "prefect.client.orchestration",
    "prefect.events",
    "prefect.logging.configuration",
    "prefect.utilities.visualization",  # graphviz: imported by Prefect's flow engine at a flow's first call
    "fastapi.encoders",  # Prefect serialises a flow's parameters with it
    "pydantic.v1",
    "duckdb",
    "jsonschema",
    "voxledger.flows.common",
    "voxledger.flows.progress",
    "voxledger.hosting.runtime",
    "voxledger.hosting.server",
    "voxledger.schemas.registry",  # every receipt schema
    "voxledger.stores.home",
    "voxledger.tasks.corpus.sources",
    "voxledger.tasks.plans",
    "voxledger.tasks.stage",
)
"""What the runner imports once: Prefect's engine, client, events and logging (most of a flow
command's start-up) and voxledger's flow plumbing. Never a module that loads numpy, torch or
scipy: their BLAS and OpenMP libraries start threads at import, and a fork copies no thread. Each
child imports its flow's own module (as the direct call of a stage function does)."""

IDLE_TIMEOUT_S = 1800.0
START_TIMEOUT_S = 60.0
SERVER_GRACE_S = 300.0
"""How long a new runner waits for its home's Prefect server to appear (the command that started
the runner is starting it) before giving up."""

_VOLATILE_ENV = ("_", "PWD", "OLDPWD", "SHLVL", "COLUMNS", "LINES", "PS1", "LS_COLORS")
_HEADER = struct.Struct("!Q")


class _Refused(Exception):
    """The runner would not take this request (it said why); the command runs the flow itself."""


# --- what a runner is keyed on -------------------------------------------------------------------


def code_signature() -> str:
    """Digest of every voxledger source file's path, size and modification time (~2 ms)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        try:
            st = path.stat()
        except OSError:
            continue
        h.update(f"{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def fingerprint(home_root: Path, env: dict[str, str], path: list[str], code: str) -> str:
    """The name a runner for this home, environment, interpreter and code listens on."""
    doc = {
        "home": str(home_root.resolve()),
        "uid": os.getuid(),
        "python": sys.executable,
        "version": sys.version,
        "path": path,
        "env": sorted((k, v) for k, v in env.items() if k not in _VOLATILE_ENV),
        "code": code,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:40]


def _address(name: str) -> str:
    return f"\0voxledger-runner-{name}"


# --- the command's side --------------------------------------------------------------------------


def usable(home_root: Path) -> bool:
    """Whether this process may hand its flows to a runner: Linux, the runner not turned off, the
    home's own Prefect server in use, the home writable. (Only the ``voxledger`` program asks.)"""
    if not sys.platform.startswith("linux"):
        return False
    from voxledger.hosting.server import home_server_in_use
    from voxledger.settings import load_settings

    return load_settings().runner and home_server_in_use(home_root)


def delegate(home_root: Path, target: str, args: tuple[Any, ...], kwargs: dict[str, Any], show: Callable[[str], None]) -> tuple[bool, Any]:
    """Run ``target`` (``module:attribute``, a flow) in this home's runner.

    Returns (True, result) when a runner ran it (its exception is raised here), (False, None) when
    no runner could take it: then a runner is started for next time and the caller runs the flow.
    """
    code = code_signature()
    name = fingerprint(home_root, dict(os.environ), list(sys.path), code)
    try:
        return True, _ask(name, home_root, target, args, kwargs, show)
    except _Refused:
        _spawn(home_root, name, code)
        return False, None


def _ask(name: str, home_root: Path, target: str, args: tuple[Any, ...], kwargs: dict[str, Any], show: Callable[[str], None]) -> Any:
    from voxledger.schemas.errors import VoxledgerError

    # Ctrl-C is always caught here and forwarded; the flow's process takes this command's own disposition
    # (a command started with SIGINT ignored, under nohup say, ignores it there too, unless its flow
    # installs a handler of its own, as the pipeline does: exactly as in the command's own process)
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    catch, previous = ignored and threading.current_thread() is threading.main_thread(), None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.connect(_address(name))
            _, owner, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
            cwd = os.getcwd()  # a working directory deleted under the command: run here, as before
        except OSError as exc:
            raise _Refused(str(exc)) from None
        if owner != os.getuid():  # a name squatted by another user: never hand it this environment or these files
            raise _Refused(f"the socket is held by uid {owner}")
        request = pickle.dumps(
            {
                "target": target,
                "args": args,
                "kwargs": kwargs,
                "home": str(home_root),
                "env": dict(os.environ),
                "cwd": cwd,
                "umask": _umask(),
                "argv": list(sys.argv),
                "sigint_ignored": ignored,
            }
        )
        fds = [fd if _open(fd) else os.open(os.devnull, os.O_RDWR) for fd in (0, 1, 2)]
        try:
            sock.sendmsg([_HEADER.pack(len(request))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", *fds))])
        except OSError as exc:
            raise _Refused(str(exc)) from None
        finally:
            for i, fd in enumerate(fds):
                if fd != i:
                    os.close(fd)
        sock.sendall(request)
        if catch:
            previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        child = 0
        sock.settimeout(START_TIMEOUT_S)  # a runner that never forks (stopped, swamped): run the flow here instead
        while True:
            try:
                message = _receive(sock)
            except TimeoutError:
                raise _Refused("the runner did not start the flow in time") from None
            except KeyboardInterrupt:
                if not child:
                    if ignored:
                        continue
                    raise
                os.kill(child, signal.SIGINT)  # the flow records the interruption and answers
                continue
            if message is None:
                if not child:
                    raise _Refused("the runner closed the connection")
                raise VoxledgerError(
                    f"the process running this command's flow (pid {child}) ended without an answer (killed, or out of memory?); "
                    "what it recorded is in the home: `voxledger query` shows the latest receipts; run the command again"
                )
            kind, value = message
            if kind == "refused":
                raise _Refused(str(value))
            if kind == "pid":
                child = int(value)
                sock.settimeout(None)
            elif kind == "progress":
                show(str(value))
            elif kind == "ok":
                return value
            elif kind == "raise":
                raise value
    finally:
        sock.close()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _receive(sock: socket.socket) -> tuple[str, Any] | None:
    head = _exactly(sock, _HEADER.size)
    if head is None:
        return None
    body = _exactly(sock, _HEADER.unpack(head)[0])
    if body is None:
        return None
    value: tuple[str, Any] = pickle.loads(body)
    return value


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


_SEND = threading.Lock()
"""One message at a time on the command's socket: progress lines may come from a flow's task threads."""


def _send(sock: socket.socket, kind: str, value: Any) -> None:
    body = pickle.dumps((kind, value))
    with _SEND:
        sock.sendall(_HEADER.pack(len(body)) + body)


LOG_LIMIT_BYTES = 1 << 20  # two lines a command: about 7,000 commands


def rotate_log(path: Path, limit: int = LOG_LIMIT_BYTES) -> Path:
    """``path``, first moved to ``<path>.1`` (replacing the one before) once it holds ``limit`` bytes
    or more, so a home keeps at most two logs' worth; a runner still writing to the moved file
    finishes there. Returns ``path``."""
    try:
        if path.stat().st_size >= limit:
            os.replace(path, path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass
    return path


def _spawn(home_root: Path, name: str, code: str) -> None:
    """Start a runner for this name in the background (it exits at once when one already holds it)."""
    from voxledger.hosting.server import server_dir

    try:
        sdir = server_dir(home_root)
        sdir.mkdir(parents=True, exist_ok=True)
        log = open(rotate_log(sdir / "runner.log"), "ab")  # noqa: SIM115 (handed to the child)
    except OSError:
        return
    cmd = [sys.executable, "-m", "voxledger.hosting.runner", str(home_root), name, code, json.dumps(sys.path)]
    try:
        subprocess.Popen(
            cmd, env=dict(os.environ), stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True
        )
    except OSError:
        pass
    finally:
        log.close()


# --- the runner's side ---------------------------------------------------------------------------


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _log(message: str, fd: int = 2) -> None:
    """A line in the runner's log (``<home>/prefect/runner.log``)."""
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} runner {os.getpid()}: {message}\n"
    try:
        os.write(fd, line.encode(errors="replace"))
    except OSError:
        pass


def _serve(home_root: Path, name: str, code: str) -> int:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(_address(name))  # the name is claimed before the slow imports: a second runner leaves now
    except OSError:
        return 0
    from voxledger.hosting.runtime import api_mode, offline_defaults

    offline_defaults()
    for module in PRELOAD:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001  (a runner that cannot import does not serve; the command runs the flow)
            _log(f"cannot import {module}: {exc!r}; not serving")
            return 0
        if _threads() != 1:
            _log(f"importing {module} started a thread; forking would copy its locks, not serving")
            return 0
    from prefect.logging.configuration import setup_logging

    setup_logging()
    from voxledger.hosting.server import read_state
    from voxledger.tasks.processes import pid_alive

    if api_mode() != "home":
        _log("the home's own Prefect server is not in use here; not serving")
        return 0
    if code_signature() != code or _threads() != 1:
        _log("the code changed while importing, or a thread started; not serving")
        return 0
    listener.listen(16)
    listener.settimeout(1.0)
    started = last = last_check = time.monotonic()
    children: set[int] = set()
    seen_server, checks = False, 1
    _log(f"serving {home_root}")
    while True:
        for pid in list(children):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    children.discard(pid)
            except ChildProcessError:
                children.discard(pid)
        now = time.monotonic()
        if now - last_check >= 1.0:
            last_check = now
            state = read_state(home_root)
            up = state is not None and pid_alive(state.pid)
            seen_server = seen_server or up
            if not up and not children and (seen_server or now - started > SERVER_GRACE_S):
                _log("the home's Prefect server is gone; exiting")
                return 0
            if now - started >= checks * 10.0:  # the source walk (~9 ms) every 10 s; a changed tree is never served anyway
                checks += 1
                if code_signature() != code:
                    _log("voxledger's code changed; exiting")
                    return 0
            if not children and now - last > IDLE_TIMEOUT_S:
                _log("idle; exiting")
                return 0
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        except OSError as exc:  # out of file descriptors, say: wait rather than spin
            _log(f"accept failed: {exc!r}")
            time.sleep(1.0)
            continue
        last = time.monotonic()
        pid = _take(conn, listener)
        if pid:
            children.add(pid)


def _take(conn: socket.socket, listener: socket.socket) -> int:
    """Read one request and fork its child; the child's pid (0 when refused)."""
    fds: list[int] = []
    try:
        conn.settimeout(10.0)
        peer_pid, peer_uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        if peer_uid != os.getuid():
            _log(f"refused pid {peer_pid}: uid {peer_uid} is not this runner's")
            return 0
        head, ancdata, _, _ = conn.recvmsg(_HEADER.size, socket.CMSG_SPACE(3 * struct.calcsize("i")))
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += list(struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4]))
        if len(head) != _HEADER.size or len(fds) != 3:
            return 0
        body = _exactly(conn, _HEADER.unpack(head)[0])
        if body is None:
            return 0
        request = pickle.loads(body)
        pid = os.fork()
        if pid == 0:
            listener.close()
            _child(conn, request, fds, peer_pid)  # never returns
        return pid
    except Exception as exc:  # noqa: BLE001  (a bad request never takes the runner down)
        _log(f"request dropped: {exc!r}")
        return 0
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        conn.close()


def _child(conn: socket.socket, request: dict[str, Any], fds: list[int], peer: int) -> None:
    """Become the command's flow process: its fds, directory, umask and environment; run; answer."""
    status = 0
    log_fd = os.dup(2)  # the runner's log, before the command's stderr takes fd 2
    try:
        os.setpgid(0, 0)  # its own group: a command that dies takes the flow and everything it started
        signal.signal(signal.SIGINT, signal.SIG_IGN if request.get("sigint_ignored") else signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _log(f"running {request['target']} for pid {peer}", log_fd)
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
        conn.settimeout(None)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = request["argv"]
        _send(conn, "pid", os.getpid())
        answered = threading.Event()
        threading.Thread(target=_watch, args=(conn, answered), daemon=True, name="voxledger-runner-watch").start()
        answer = _run(request, lambda message: _send(conn, "progress", message))
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            body = pickle.dumps(answer)
        except Exception as exc:  # noqa: BLE001  (an answer that cannot travel still ends the command cleanly)
            body = pickle.dumps(("raise", _Unsendable.of(answer[1], exc)))
        # logged and marked before it is sent: the command exits on receipt, and its closing socket
        # must not read as a killed command here
        _log(f"{request['target']} for pid {peer}: " + ("returned" if answer[0] == "ok" else f"raised {type(answer[1]).__name__}"), log_fd)
        answered.set()
        with _SEND:
            conn.sendall(_HEADER.pack(len(body)) + body)
    except BaseException as exc:  # noqa: BLE001
        _log(f"{request['target']} for pid {peer}: no answer sent ({exc!r})", log_fd)
        status = 1
    finally:
        os._exit(status)


def _run(request: dict[str, Any], progress: Callable[[str], None]) -> tuple[str, Any]:
    from voxledger.hosting.runtime import run_here

    try:
        return "ok", run_here(Path(request["home"]), request["target"], request["args"], request["kwargs"], progress)
    except BaseException as exc:  # noqa: BLE001  (raised again in the command's process)
        return "raise", exc


def _watch(conn: socket.socket, answered: threading.Event) -> None:
    """The command's end closed before its answer was on its way (it was killed): stop this flow and
    all it started."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    if not answered.is_set():
        os.killpg(os.getpgid(0), signal.SIGKILL)


class _Unsendable(Exception):
    """An answer (a result or an exception) that could not be pickled back to the command."""

    def __init__(self, message: str, original_type: str) -> None:
        super().__init__(message)
        self.original_type = original_type

    @classmethod
    def of(cls, value: object, why: BaseException) -> _Unsendable:
        return cls(f"{value} (could not be returned from the flow's process: {why!r})", type(value).__name__)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Unsendable, (str(self), self.original_type))


if __name__ == "__main__":
    sys.path[:] = json.loads(sys.argv[4])
    sys.exit(_serve(Path(sys.argv[1]), sys.argv[2], sys.argv[3]))
