"""Prefect flows: one file per flow, each stage's task defined once and reused by ``pipeline``.

Importing this package changes nothing; entry points call ``flows.runtime.prefect_session``.
"""
