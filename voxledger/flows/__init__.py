"""Prefect flows: one file per flow, each stage's task defined once and reused by ``pipeline``.

Importing this package changes nothing; the processes that run flows are ``voxledger.hosting``'s.
"""
