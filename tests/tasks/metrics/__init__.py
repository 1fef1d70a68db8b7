"""Tests of the metric extractors (package so its conftest has a unique module name)."""
