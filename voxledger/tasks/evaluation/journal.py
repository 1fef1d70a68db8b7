"""An append-only, fsynced JSONL journal so an interrupted evaluation resumes without losing rows."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from voxledger.schemas.canonical import canonical_bytes


class Journal:
    """Rows keyed by a tuple. A torn last line (a crash mid-write) is cut off before the next
    append, so later rows never join it; a line that still does not parse is skipped on read (its
    row is redone), never a reason to ignore the rows after it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tail_checked = False
        path.parent.mkdir(parents=True, exist_ok=True)

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every complete row, in write order."""
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    continue  # torn write from a crash: the row is redone
                try:
                    yield json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                    continue  # a damaged row: redone, and the rows after it still count

    def append(self, row: Any) -> None:
        """Append one row durably (after cutting a torn tail left by a crash, once per journal)."""
        data = canonical_bytes(row) + b"\n"
        if not self._tail_checked:
            cut_torn_tail(self.path)
            self._tail_checked = True
        with open(self.path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def cut_torn_tail(path: Path) -> int:
    """Truncate ``path`` after its last newline; return how many bytes were cut (0: none torn)."""
    try:
        f = open(path, "r+b")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return 0
    with f:
        size = f.seek(0, os.SEEK_END)
        pos = size
        while pos > 0:
            step = min(1 << 16, pos)
            f.seek(pos - step)
            chunk = f.read(step)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                pos = pos - step + newline + 1
                break
            pos -= step
        if pos == size:
            return 0
        f.truncate(pos)
        f.flush()
        os.fsync(f.fileno())
        return size - pos
