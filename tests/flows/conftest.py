"""One Prefect test harness (a temporary local server) for every flow test in the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def prefect_server() -> Iterator[None]:
    import voxledger.flows  # noqa: F401  (offline defaults before prefect loads)
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield
