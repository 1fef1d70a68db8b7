"""Process-wide runtime settings for running flows from the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_prefect() -> Iterator[None]:
    """Run flows without the per-flow heartbeat join (>= 1.1 s each) that env vars cannot turn off."""
    import voxledger.flows  # noqa: F401  (sets offline defaults before prefect is imported)
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield
