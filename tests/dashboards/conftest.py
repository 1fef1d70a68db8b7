"""Dashboard tests reuse the flow tests' session-scoped pipeline run (one run for the session)."""

from tests.flows.conftest import corpus, first_run  # noqa: F401
