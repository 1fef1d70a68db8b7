"""Flow tests share the session's Prefect server (``tests/conftest.py``)."""
