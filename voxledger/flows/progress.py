"""Progress lines from stages to whoever runs them, scoped by a context variable (no global state).

The CLI wraps a flow call in ``reporting(fn)``; tasks pass ``report`` to the stage functions.
Outside such a block, progress lines go nowhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_reporter: ContextVar[Callable[[str], None] | None] = ContextVar("voxledger_progress", default=None)


@contextmanager
def reporting(fn: Callable[[str], None] | None) -> Iterator[None]:
    """Send progress lines to ``fn`` for the duration of the block."""
    token = _reporter.set(fn)
    try:
        yield
    finally:
        _reporter.reset(token)


def report(message: str) -> None:
    """Send a progress line to the reporter of the enclosing ``reporting`` block, if any."""
    fn = _reporter.get()
    if fn is not None:
        fn(message)
