"""Prefect settings for voxledger's entry points, applied by one explicit call (never on import).

``offline_defaults()`` stops Prefect's outbound telemetry and gives a temporary server time to
start on a loaded 2-core machine. ``prefect_session(home_root)`` is what the CLI wraps every
flow in: it picks the API (the user's ``PREFECT_API_URL``; else this home's long-lived local
server, see ``flows.server``; else, with ``VOXLEDGER_PREFECT=ephemeral`` or a read-only home,
Prefect's temporary in-process server), turns off the per-flow heartbeat join (>= 1.1 s each,
not settable from the environment) and keeps Prefect's own tracebacks off the console (they
stay in the run's logs on the server): the CLI prints one line per error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
        from voxledger.flows.server import ensure_server

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
