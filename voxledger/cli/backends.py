"""Command groups that backends add (``voxledger cosyvoice3 preflight``), read from the backend registry.

A backend lists its group in ``COMMAND_GROUPS`` (``tasks/backends/base.py``); nothing here names one.
"""

from __future__ import annotations

from voxledger.tasks.backends.base import command_groups

COMMANDS = tuple(command_groups())
