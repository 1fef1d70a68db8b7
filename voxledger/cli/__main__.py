"""``python -m voxledger.cli``."""

from voxledger.cli import program

program()
