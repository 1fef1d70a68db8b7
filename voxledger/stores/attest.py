"""Provenance export as an in-toto Statement v1 with our receipt as the predicate."""

from __future__ import annotations

from typing import Any

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://voxledger.dev/provenance/receipt/v1"


def in_toto_statement(receipt_sha256: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Statement whose subjects are the receipt's outputs and whose predicate is the receipt."""
    subjects = [
        {"name": f"{a['role']}", "digest": {"sha256": a["sha256"]}, "annotations": {"mediaType": a["media_type"]}} for a in doc["subjects"]
    ]
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {"receipt_sha256": receipt_sha256, "receipt": doc},
    }
