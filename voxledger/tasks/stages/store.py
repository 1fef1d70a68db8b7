"""Put a file or a directory tree into the store and write an ingest receipt."""

from __future__ import annotations

from pathlib import Path

from voxledger.schemas.base import utc_now
from voxledger.schemas.core import IngestParameters, IngestReceipt
from voxledger.schemas.errors import UnsafePathError
from voxledger.stores.home import Home
from voxledger.stores.trees import TREE_MEDIA_TYPE, put_tree
from voxledger.tasks.receipting import artifact, build_receipt


def ingest_path(home: Home, path: Path, *, flow: str = "store_put", media_type: str | None = None) -> tuple[str, str]:
    """Store ``path`` (file or directory); return (receipt id, content digest)."""
    started = utc_now()
    if path.is_symlink() or not (path.is_file() or path.is_dir()):
        raise UnsafePathError(f"{path} is not a regular file or directory; give the real path")
    if path.is_dir():
        digest, manifest = put_tree(home.blobs, path, cache=home.stat_cache)
        total = sum(e.size_bytes for e in manifest.entries)
        params = IngestParameters(source="tree", name=path.resolve().name, file_count=len(manifest.entries), total_bytes=total)
        subject = artifact(home.blobs, "tree", digest, TREE_MEDIA_TYPE)
    else:
        digest = home.blobs.put_file(path)
        params = IngestParameters(source="file", name=path.name, file_count=1, total_bytes=path.stat().st_size)
        subject = artifact(home.blobs, "file", digest, media_type or "application/octet-stream")
    receipt = build_receipt(IngestReceipt, flow=flow, task="ingest_path", started_at=started, subjects=[subject], parameters=params)
    return home.record(receipt), digest
