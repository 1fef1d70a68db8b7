"""Blind listening tests: per-rater packets, sealed blinding, verified aggregation.

``export_packets`` (tasks.listening.export) writes the packets and the ``packet_set`` receipt;
``aggregate_ratings`` (tasks.listening.aggregate) verifies submissions and records ``submission``
and ``aggregate`` receipts.
"""
