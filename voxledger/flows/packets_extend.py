"""Flow ``extend_packets``: add raters to an exported packet set, its packets unchanged (``voxledger packets extend``)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, flow_name
from voxledger.schemas.listening_receipts import PacketSetReceipt
from voxledger.stores.home import HomeRef
from voxledger.tasks.stage import StageOutcome


@task(name="extend_packet_set", **STAGE_TASK)
def extend_packet_set(home: HomeRef, packet_set: str, raters: int, out_dir: str) -> StageOutcome[PacketSetReceipt]:
    """Write the added raters' packets under ``out_dir`` and record the extended packet set."""
    from voxledger.tasks.listening.extend import extend_packets as extend

    h = home.open()
    h.require_writable()
    o = extend(h, packet_set, raters, Path(out_dir), flow=flow_name())
    return StageOutcome(o.receipt_id, o.receipt, o.cached, verified=o.verified)


@flow(name="extend_packets")
def extend_packets(home: HomeRef | str, packet_set: str, raters: int, out_dir: str) -> StageOutcome[PacketSetReceipt]:
    """Add ``raters`` packets to ``packet_set`` (a packet_set receipt id) under ``out_dir``; the parent's packets stay as they are."""
    return extend_packet_set(HomeRef.of(home), packet_set, raters, out_dir)
