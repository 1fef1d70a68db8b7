"""How ``reproduce`` re-runs and compares a receipt: through the contract of the stage that wrote it.

A receipt's stage is found by its kind in the stage table (``schemas/stages.py``; a module shared by
two rows tells them apart with ``stage_of``); that stage's module (``tasks/stages/<noun>.py``) holds
``rerun_arguments`` (its flow's arguments recovered from the receipt and its parents) and
``compare`` (the re-run judged against the original under the reproduction bands). A row with a
``not_rerun`` reason is refused with that reason. Nothing here switches on a stage's name.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from voxledger.schemas.base import ReceiptBase
from voxledger.schemas.errors import ReproductionError
from voxledger.schemas.pipeline import PipelineRunReceipt
from voxledger.schemas.reproduction import OutputComparison, ReproductionBands
from voxledger.schemas.stages import stage_row
from voxledger.stores.home import Home
from voxledger.tasks.stages.contract import need_corpus
from voxledger.tasks.stages.reproduce import Preparation


def contract_of(prep: Preparation) -> ModuleType:
    """The module of the stage that wrote the prepared receipt (ReproductionError: no row, or one not re-run)."""
    row = stage_row(prep.stage)
    if row is None:
        raise ReproductionError(f"receipt {prep.rid[:12]}: no stage {prep.stage} in the stage table ({prep.receipt.kind})")  # type: ignore[attr-defined]
    if row.not_rerun is not None:
        raise ReproductionError(f"receipt {prep.rid[:12]} ({prep.stage}) is not re-run: {row.not_rerun}")
    return importlib.import_module(row.module)


def stage_arguments(home: Home, prep: Preparation, corpus: Path | None) -> dict[str, Any]:
    """The stage flow's arguments besides ``home``, recovered from the receipt and its parents.

    Raises ReproductionError when the stage reads a corpus and ``corpus`` is not given or is not
    the corpus the original read (naming what differs).
    """
    if isinstance(prep.receipt, PipelineRunReceipt):
        need_corpus(corpus, prep)  # its audit, training, promotion and evaluation stages read it
        return {}
    arguments: dict[str, Any] = contract_of(prep).rerun_arguments(home, prep, corpus)
    return arguments


def compare(h: Home, s: Home, prep: Preparation, rerun: ReceiptBase, bands: ReproductionBands) -> list[OutputComparison]:
    """The re-run's outputs compared with the original's (``h``: the original home, ``s``: the scratch home)."""
    if rerun.kind != prep.receipt.kind:  # type: ignore[attr-defined]
        raise ReproductionError(
            f"receipt {prep.rid[:12]} is a {prep.receipt.kind} receipt but its re-run recorded a {rerun.kind} receipt"  # type: ignore[attr-defined]
        )
    comparisons: list[OutputComparison] = contract_of(prep).compare(h, s, prep.receipt, rerun, bands)
    return comparisons
