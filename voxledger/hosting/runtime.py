"""Prefect settings for voxledger's entry points, applied by one explicit call (never on import),
and the one function that runs a flow in this process.

``offline_defaults()`` stops Prefect's outbound telemetry and gives a temporary server time to
start on a loaded 2-core machine. ``prefect_session(home_root)`` is what every flow runs in: it
picks the API (the user's ``PREFECT_API_URL``; else this home's long-lived local server, see
``hosting.server``; else, with ``VOXLEDGER_PREFECT=ephemeral`` or a read-only home, Prefect's
temporary in-process server), turns off the per-flow heartbeat join (>= 1.1 s each, not settable
from the environment) and keeps Prefect's own tracebacks off the console (they stay in the run's
logs on the server): the CLI prints one line per error. ``run_here`` runs a flow named by its
dotted path inside that session; the CLI calls it when no resident runner takes the flow, and the
runner's child calls it for each command it serves (``hosting.runner``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

OFFLINE_DEFAULTS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "PREFECT_SERVER_UI_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
    "HF_HUB_OFFLINE": "1",
}


def offline_defaults() -> None:
    """Set the offline-safe defaults in this process's environment (values already set win)."""
    for name, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(name, value)


def api_mode() -> str:
    """``external`` (an API URL is configured), ``ephemeral`` (VOXLEDGER_PREFECT=ephemeral) or ``home``."""
    from prefect.settings import PREFECT_API_URL

    from voxledger.settings import load_settings

    if PREFECT_API_URL.value():
        return "external"
    return load_settings().prefect


def _writable(path: Path) -> bool:
    probe = path if path.exists() else path.parent
    return os.access(probe, os.W_OK)


@contextmanager
def prefect_session(home_root: Path | None = None) -> Iterator[str]:
    """Run flows against the chosen API with quiet consoles; yields the mode used."""
    offline_defaults()
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        temporary_settings,
    )

    mode = api_mode()
    settings: dict[object, object] = {}

    if mode == "home" and home_root is not None and _writable(home_root):
        from voxledger.hosting.server import ensure_server

        settings[PREFECT_API_URL] = ensure_server(home_root)
    elif mode == "home":
        mode = "ephemeral"
    settings[PREFECT_FLOWS_HEARTBEAT_FREQUENCY] = None
    logging.getLogger("speechbrain").setLevel(logging.WARNING)  # its INFO lines would cross the progress line
    with temporary_settings(settings), _quiet_console():
        yield mode


@contextmanager
def _quiet_console() -> Iterator[None]:
    """Console handlers of Prefect's loggers show nothing below CRITICAL; API handlers still ship logs."""
    changed: list[tuple[logging.Handler, int]] = []
    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in list(logging.Logger.manager.loggerDict))]
    seen: set[int] = set()
    for logger in loggers:
        for handler in logger.handlers:
            if id(handler) not in seen and type(handler).__name__ == "PrefectConsoleHandler":
                seen.add(id(handler))
                changed.append((handler, handler.level))
                handler.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for handler, level in changed:
            handler.setLevel(level)


def run_here(home_root: Path, target: str, args: tuple[Any, ...], kwargs: dict[str, Any], show: Callable[[str], None]) -> Any:
    """Run the flow ``target`` (``"module:attribute"``) with ``args`` and ``kwargs`` in this process,
    in ``prefect_session(home_root)``, its progress lines sent to ``show``; return what it returns.

    The home's server is started (or found) on a thread first, so it comes up while Prefect and the
    flow's module import. Whatever the flow raises is raised here, once Prefect's queued events and
    logs are sent (briefly after Ctrl-C: the failed receipt is already recorded).
    """
    import importlib

    from voxledger.flows.progress import reporting
    from voxledger.hosting.server import running, server_dir, start_in_background
    from voxledger.schemas.errors import InterruptedRunError

    cold = not running(home_root)
    if start_in_background(home_root) is not None and cold:
        show(
            f"starting this home's Prefect server ({server_dir(home_root)}): the first command in a home waits for it once, later ones reuse it"
        )
    elif api_mode() == "ephemeral":
        show("starting Prefect's temporary server for this command (VOXLEDGER_PREFECT=ephemeral: each command starts its own)")
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    with prefect_session(home_root), reporting(show):
        drain_s = 5.0
        try:
            return fn(*args, **kwargs)
        except (KeyboardInterrupt, InterruptedRunError):
            drain_s = 0.5  # do not keep the user waiting on log shipping
            raise
        finally:
            show("finishing")
            drain_prefect_workers(drain_s)


def drain_prefect_workers(timeout_s: float = 5.0) -> None:
    """Send Prefect's queued events and logs while its console is still quiet, so its exit-time
    drain has nothing left to warn about after the command's own output."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (EventsWorker, APILogWorker):
        try:
            worker.drain_all(timeout=timeout_s, at_exit=False)
        except Exception:  # noqa: BLE001  (best effort: the atexit drain retries)
            pass
