"""Reading and writing receipts: validated on write and on read, stored as canonical JSON blobs.

A receipt's id is the sha256 of its RFC 8785 bytes. Besides the blob, a marker file
``receipts/ab/<id>`` lists it as a receipt, so the catalog can be rebuilt from the store alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import ValidationError

from voxledger import schemas as _schemas_pkg
from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.canonical import canonical_bytes, is_sha256_hex
from voxledger.schemas.errors import ReceiptError, validation_lines
from voxledger.stores.blobs import LocalBlobStore

if TYPE_CHECKING:
    import jsonschema

R = TypeVar("R", bound=ReceiptBase)

SCHEMA_DIR = Path(_schemas_pkg.__file__).parent / "json"


@cache
def _kinds() -> frozenset[str]:
    """Every receipt kind: one generated JSON Schema file each (``receipt schemas --write``; a test
    checks the files against ``schemas.registry``)."""
    suffix = ".v1.schema.json"
    return frozenset(p.name.removesuffix(suffix) for p in SCHEMA_DIR.glob(f"*{suffix}"))


@cache
def _schema(kind: str) -> dict[str, Any]:
    path = SCHEMA_DIR / f"{kind}.v1.schema.json"
    if not path.is_file():
        raise ReceiptError(f"no JSON Schema file {path} for receipt kind {kind!r}; run `voxledger receipt schemas --write`")
    schema: dict[str, Any] = json.loads(path.read_text())
    return schema


@cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    import jsonschema  # here, not at import: a command that only hands its flow off never validates

    return jsonschema.Draft202012Validator(_schema(kind))


@cache
def _model(kind: str) -> type[ReceiptBase]:
    """The model class of ``kind``, named by its schema file: only its own module is imported (a read
    command showing one receipt does not build every receipt model)."""
    import importlib

    module, _, name = str(_schema(kind).get("x-voxledger-model", "")).partition(":")
    model = getattr(importlib.import_module(module), name, None) if module.startswith("voxledger.schemas.") else None
    if not (isinstance(model, type) and issubclass(model, ReceiptBase)):
        raise ReceiptError(f"the JSON Schema file of receipt kind {kind!r} names no receipt model; run `voxledger receipt schemas --write`")
    return model


def validate_document(doc: Any, *, source: str = "receipt") -> ReceiptBase:
    """Validate a receipt document against its JSON Schema and model; list every problem at once."""
    if not isinstance(doc, dict):
        raise ReceiptError(f"{source}: a receipt is a JSON object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if kind not in _kinds():
        raise ReceiptError(f"{source}: unknown receipt kind {_cut(repr(kind), 80)}; valid kinds: {sorted(_kinds())}")
    try:
        problems = [
            f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {_cut(e.message)}"
            for e in sorted(_validator(kind).iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
        ]
    except RecursionError as exc:
        raise ReceiptError(f"{source}: nested too deeply to validate; no receipt kind nests like that") from exc
    if len(problems) > 50:
        problems = [*problems[:50], f"... and {len(problems) - 50} more"]
    if problems:
        raise ReceiptError(f"{source}: {len(problems)} schema problem(s) in {kind} receipt:\n  " + "\n  ".join(problems))
    try:
        model: ReceiptBase = _model(kind).model_validate(doc)
    except ValidationError as exc:
        lines = validation_lines(exc, sep="/", root="<root>", limit=50)
        raise ReceiptError(f"{source}: {len(lines)} problem(s) in {kind} receipt:\n  " + "\n  ".join(lines)) from exc
    return model


def _cut(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def receipt_document(receipt: ReceiptBase) -> dict[str, Any]:
    """The JSON document of a receipt (what is hashed and stored)."""
    return receipt.model_dump(mode="json")


class ReceiptStore:
    """Receipts inside a blob store, plus the markers that list them."""

    def __init__(self, blobs: LocalBlobStore) -> None:
        self.blobs = blobs
        self.markers = blobs.root / "receipts"
        self.markers.mkdir(parents=True, exist_ok=True)

    def write(self, receipt: ReceiptBase) -> tuple[str, dict[str, Any]]:
        """Validate and store a receipt; return (id, document). Idempotent."""
        doc = receipt_document(receipt)
        validate_document(doc, source=f"new {doc.get('kind')} receipt")
        raw = canonical_bytes(doc)
        rid = self.blobs.put_bytes(raw)
        doc = json.loads(raw)  # index exactly what a rebuild will read back (1.0 and 1 are one JSON number)
        marker = self.markers / rid[:2] / rid
        marker.parent.mkdir(exist_ok=True)
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o444)
            os.close(fd)
        except FileExistsError:
            pass
        return rid, doc

    def has(self, rid: str) -> bool:
        """Whether the store lists this receipt (its marker exists)."""
        return (self.markers / rid[:2] / rid).is_file()

    def read_json(self, rid: str) -> dict[str, Any]:
        """A receipt's document as stored, its bytes verified against its id but not validated against
        its schema (for readers that need only its ids, as lineage checks do); ReceiptError otherwise."""
        if not is_sha256_hex(rid):
            raise ReceiptError(f"{rid!r} is not a receipt id (64 hex characters)")
        try:
            doc = json.loads(self.blobs.get_bytes(rid))
        except (RecursionError, ValueError) as exc:
            raise ReceiptError(f"receipt {rid} is not a JSON receipt document ({type(exc).__name__})") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("subjects"), list) or not isinstance(doc.get("inputs"), list):
            raise ReceiptError(f"receipt {rid} is not a receipt document (no subjects and inputs)")
        return doc

    def read_document(self, rid: str) -> dict[str, Any]:
        """Read a receipt's document, verified against its id and validated."""
        if not is_sha256_hex(rid):
            raise ReceiptError(f"{rid!r} is not a receipt id (64 hex characters)")
        try:
            doc = json.loads(self.blobs.get_bytes(rid))
        except (RecursionError, ValueError) as exc:  # the bytes hash right, yet are not a receipt: never written by voxledger
            raise ReceiptError(
                f"receipt {rid} is not a JSON receipt document ({type(exc).__name__}); `voxledger lineage {rid[:12]}` shows who names it"
            ) from exc
        validate_document(doc, source=f"receipt {rid}")
        return doc  # type: ignore[no-any-return]

    @overload
    def read(self, rid: str) -> ReceiptBase: ...
    @overload
    def read(self, rid: str, kind: type[R]) -> R: ...

    def read(self, rid: str, kind: type[ReceiptBase] | None = None) -> ReceiptBase:
        """Read and parse a receipt into its model; with ``kind``, refuse any other kind.

        Raises ReceiptError naming the id, the kind found and the kind expected.
        """
        receipt = validate_document(self.read_document(rid), source=f"receipt {rid}")
        if kind is not None and not isinstance(receipt, kind):
            want = kind.model_fields["kind"].default
            raise ReceiptError(f"receipt {rid} is a {receipt.kind} receipt, not {want!r}; give the id of a {want} receipt")  # type: ignore[attr-defined]
        return receipt

    def set_aside(self, rid: str) -> None:
        """Move the marker of a receipt whose object is missing or damaged to ``quarantine/receipts``
        (beside the quarantined object), so a rebuild and ``store verify`` stop listing a receipt this
        home can no longer read; lineage naming it still shows it as missing."""
        marker = self.markers / rid[:2] / rid
        if not marker.exists():
            return
        aside = self.blobs.root / "quarantine" / "receipts"
        aside.mkdir(parents=True, exist_ok=True)
        os.replace(marker, aside / rid)

    def ids(self) -> Iterator[str]:
        """Every receipt id listed in the store, sorted (deterministic rebuilds)."""
        found = [m.name for sub in self.markers.iterdir() if sub.is_dir() for m in sub.iterdir()]
        yield from sorted(found)
