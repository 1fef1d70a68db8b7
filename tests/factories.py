"""Deterministic factories for receipts and files used across tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from voxledger.schemas.base import Artifact, InputRef, Producer
from voxledger.schemas.core import IngestParameters, IngestReceipt
from voxledger.stores.identity import environment

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def hexd(i: int) -> str:
    """A valid, distinct fake digest for index ``i`` (graph-shape tests only)."""
    return f"{i:064x}"


def ingest_receipt(i: int, *, inputs: tuple[InputRef, ...] = (), out: str | None = None) -> IngestReceipt:
    """A valid ingest receipt whose output digest is ``out`` (default hexd(i))."""
    return IngestReceipt(
        producer=Producer(flow="test", task="factory"),
        subjects=(Artifact(role="file", sha256=out or hexd(i), size_bytes=i, media_type="application/octet-stream"),),
        inputs=inputs,
        environment=environment(),
        started_at=T0 + timedelta(seconds=i),
        finished_at=T0 + timedelta(seconds=i + 1),
        parameters=IngestParameters(source="bytes", name=f"item-{i}", file_count=1, total_bytes=i),
    )


def record_synthetic(home: Any, *receipts: Any) -> list[str]:
    """Record factory receipts whose outputs are synthetic digests with no bytes behind them.

    ``Home.record`` refuses a receipt naming a missing output; catalog tests need receipts in
    bulk without payloads, so they take the receipt-store and catalog path directly.
    """
    written = [home.receipts.write(r) for r in receipts]
    home.catalog.ingest(written, home.blobs.get_bytes)
    return [rid for rid, _ in written]


def interrupt(proc: Any, after_s: float = 2.0) -> tuple[int, float, str]:
    """Ctrl-C a running command ``after_s`` from now: its exit code, the seconds it took to exit
    after the signal, and the rest of its stderr (a text pipe)."""
    import signal
    import time

    time.sleep(after_s)
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    code = proc.wait(timeout=60)
    return code, time.perf_counter() - sent, rest


def terminal_sigint() -> None:
    """``preexec_fn`` of a command a test Ctrl-Cs: SIGINT as at a terminal, even when the suite itself
    was started with it ignored (a background job, ``nohup``)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
