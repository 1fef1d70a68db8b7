"""Prefect flows chaining the stages. Importing this package sets offline-safe defaults.

Prefect runs against a temporary local server when no API URL is set; these defaults stop its
outbound telemetry and give the temporary server time to start on a loaded 2-core machine.
"""

import os

for _name, _value in {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "PREFECT_SERVER_UI_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
    "HF_HUB_OFFLINE": "1",
}.items():
    os.environ.setdefault(_name, _value)
