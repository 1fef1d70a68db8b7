"""A process-wide progress reporter: the CLI installs one (a rich progress bar), flows call it."""

from __future__ import annotations

from collections.abc import Callable

_reporter: Callable[[str], None] | None = None


def set_reporter(fn: Callable[[str], None] | None) -> None:
    """Install (or remove) the function that receives progress lines."""
    global _reporter
    _reporter = fn


def report(message: str) -> None:
    """Send a progress line to the installed reporter, if any."""
    if _reporter is not None:
        _reporter(message)
