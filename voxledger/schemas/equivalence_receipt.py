"""The equivalence receipt: two runtimes' stage dumps compared under a plan."""

from __future__ import annotations

from typing import Literal

from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.equivalence import EquivalenceParameters, EquivalenceReport


class EquivalenceReceipt(ReceiptBase):
    """Per-stage results and the overall band; a RED report is recorded with status failed."""

    kind: Literal["equivalence"] = "equivalence"
    parameters: EquivalenceParameters
    report: EquivalenceReport
