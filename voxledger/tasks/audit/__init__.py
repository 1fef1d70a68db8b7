"""Corpus audit: leakage, duplicates, audio validity and transcript checks."""
