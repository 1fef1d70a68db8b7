"""``python -m voxledger.cli``."""

from voxledger.cli import main

main()
