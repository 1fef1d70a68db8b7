"""Promotion of checkpoints through explicit gates; aliases move only through promotion receipts."""
