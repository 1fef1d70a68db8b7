"""An append-only, fsynced JSONL journal so an interrupted evaluation resumes without losing rows."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from voxledger.schemas.canonical import canonical_bytes


class Journal:
    """Rows keyed by a tuple; a torn last line (crash mid-write) is ignored on read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every complete row, in write order."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break  # torn write from a crash: the row is redone
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    break

    def append(self, row: Any) -> None:
        """Append one row durably."""
        data = canonical_bytes(row) + b"\n"
        with open(self.path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
