"""Shared fixtures: an isolated voxledger home per test, quiet offline Prefect settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
os.environ.setdefault("PREFECT_SERVER_UI_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    # parallel workers (`make test` runs two): one thread each, so they do not fight over the cores
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``) a module's tests stay on one worker, so its
    module-scoped fixtures (trained models, corpora) are built once, and every test that uses the
    session's pipeline run (``first_run``) shares one worker, in collection order."""
    for item in items:
        uses_run = "first_run" in getattr(item, "fixturenames", ())
        item.add_marker(pytest.mark.xdist_group("first_run" if uses_run else item.nodeid.split("::")[0]))


@pytest.fixture(scope="session", autouse=True)
def prefect_api():  # type: ignore[no-untyped-def]
    """One Prefect server (a temporary local one) for the whole session, in this process and in
    every CLI subprocess a test starts (its URL is exported), so no test starts a server per home."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        os.environ["PREFECT_API_URL"] = str(PREFECT_API_URL.value())
        try:
            yield os.environ["PREFECT_API_URL"]
        finally:
            os.environ.pop("PREFECT_API_URL", None)


@pytest.fixture
def home(tmp_path: Path):
    """A fresh, empty voxledger home."""
    from voxledger.stores.home import Home

    return Home(tmp_path / "home")


@pytest.fixture(autouse=True)
def _no_lazy_speechbrain_placeholders():  # type: ignore[no-untyped-def]
    """Tests that load ECAPA directly leave SpeechBrain's lazy placeholders in sys.modules;
    hypothesis walks sys.modules and would trip over them (see drop_unloaded_lazy_modules)."""
    import sys

    yield
    if "speechbrain" in sys.modules:
        from voxledger.tasks.metrics.speaker import drop_unloaded_lazy_modules

        drop_unloaded_lazy_modules()
