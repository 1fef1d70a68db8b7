"""Flow ``packets``: export blind per-rater listening packets and record the packet set."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from pydantic import ValidationError

from voxledger.flows.common import STAGE_TASK, flow_name, open_home
from voxledger.flows.factory import stage_flow
from voxledger.schemas.errors import PacketError, validation_lines
from voxledger.schemas.listening import ListeningProtocol, StimulusSet
from voxledger.schemas.listening_receipts import PacketSetReceipt
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome
from voxledger.tasks.stages.packets import export_packets as export_packets_fn
from voxledger.tasks.stages.packets import export_packets_for_evaluation


def _stimuli(path: Path) -> StimulusSet:
    try:
        return StimulusSet.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        lines = validation_lines(exc, limit=10)
        raise PacketError(f"stimuli file {path}: {exc.error_count()} problem(s):\n  " + "\n  ".join(lines)) from exc


@task(name="export_packets", **STAGE_TASK)
def export_packets(
    home: HomeRef, plan: PlanRef, out_dir: str, evaluation_rid: str | None = None, stimuli_file: str | None = None
) -> StageOutcome[PacketSetReceipt]:
    """Packets from an evaluation's audio (``evaluation_rid``) or from a stimulus-set file."""
    h, protocol, name = open_home(home), plan.validated(ListeningProtocol), plan.source_name
    if evaluation_rid is not None:
        out = export_packets_for_evaluation(h, evaluation_rid, protocol, name, Path(out_dir), flow=flow_name())
        receipt = h.receipts.read(out["receipt_id"], PacketSetReceipt)
        return StageOutcome(out["receipt_id"], receipt, bool(out["cached"]), verified=out.get("verified"))
    if stimuli_file is None:
        raise PacketError("give an evaluation receipt or a stimuli file to export packets from")
    o = export_packets_fn(h, protocol, _stimuli(Path(stimuli_file)), Path(out_dir), protocol_name=name, flow=flow_name())
    return StageOutcome(o.receipt_id, o.receipt, o.cached, verified=o.verified)


packets = stage_flow(
    "packets",
    export_packets,
    module=__name__,
    plan_model=ListeningProtocol,
    doc="Export one packet per rater under ``out_dir`` (new or empty), under a protocol (a reference or file).",
)
