"""Progress lines from stages: to the Prefect run's log (kept in its run history) and to whoever
runs them, scoped by a context variable (no global state).

The CLI wraps a flow call in ``reporting(fn)``; tasks pass ``report`` to the stage functions.
Inside a Prefect flow or task run every line also goes to that run's logger at INFO, so a run
started by a worker or a schedule shows its progress in Prefect; outside a run, and outside a
``reporting`` block, a line goes nowhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_reporter: ContextVar[Callable[[str], None] | None] = ContextVar("voxledger_progress", default=None)

RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


@contextmanager
def reporting(fn: Callable[[str], None] | None) -> Iterator[None]:
    """Send progress lines to ``fn`` for the duration of the block.

    Prefect's run loggers are raised to INFO meanwhile (the CLI keeps Prefect's level at WARNING
    for its console, whose handlers stay quiet), so the lines reach the run history.
    """
    token = _reporter.set(fn)
    loggers = [logging.getLogger(name) for name in RUN_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(min(lg.getEffectiveLevel(), logging.INFO))
    try:
        yield
    finally:
        _reporter.reset(token)
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def report(message: str) -> None:
    """Send a progress line to the enclosing run's log and to the enclosing ``reporting`` block."""
    fn = _reporter.get()
    if fn is not None:
        fn(message)
    _run_log(message)


def _run_log(message: str) -> None:
    from prefect.context import FlowRunContext, TaskRunContext

    if TaskRunContext.get() is None and FlowRunContext.get() is None:
        return
    from prefect.logging import get_run_logger

    get_run_logger().info(message)
