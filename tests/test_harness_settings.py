"""The harness's promise (tests/conftest.py): after a ``prefect`` test used the session's server, an
unmarked test in the same process sees the discard URL in the current and the global settings, and
its flow call fails at once instead of reaching a server. The no-API settings are built once and reused."""

from __future__ import annotations

import time

import pytest

from tests.conftest import NO_API_URL


@pytest.mark.prefect
def test_a_marked_test_sees_the_sessions_server(prefect_api: str) -> None:
    from prefect.settings import PREFECT_API_URL

    assert PREFECT_API_URL.value() == prefect_api != NO_API_URL


def test_the_next_unmarked_test_sees_no_api_and_its_flow_fails_at_once() -> None:
    import prefect.context
    from prefect import flow
    from prefect.settings import PREFECT_API_URL

    assert PREFECT_API_URL.value() == NO_API_URL
    assert prefect.context.GLOBAL_SETTINGS_CONTEXT.settings.api.url == NO_API_URL

    @flow
    def ping() -> int:
        return 1

    started = time.perf_counter()
    with pytest.raises(Exception):  # noqa: B017  (a connection error of whichever client layer raises it)
        ping()
    assert time.perf_counter() - started < 30


SEEN: list[object] = []


@pytest.mark.parametrize("n", [0, 1])
def test_the_no_api_settings_object_is_built_once_and_reused(n: int) -> None:
    import prefect.context

    SEEN.append(prefect.context.get_settings_context().settings)
    assert SEEN[-1].api.url == NO_API_URL  # type: ignore[attr-defined]
    assert SEEN[-1] is SEEN[0]  # the second test got the first one's object
