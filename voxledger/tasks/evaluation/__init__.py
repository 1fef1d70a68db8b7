"""Frozen-plan evaluation: generation, extraction, statistics."""
