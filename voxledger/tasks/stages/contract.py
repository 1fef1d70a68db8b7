"""What every stage module under ``tasks/stages/`` holds: the stage's whole contract, in one place.

A stage is one row of the stage table (``schemas/stages.py``), one module here and one short flow
file made by ``flows/common.stage_flow``. The module names, at module level:

- ``run``: the stage's work as a plain function (no Prefect): the flow's task calls it;
- ``inputs(ctx)``: its arguments in a pipeline run besides ``home`` and ``plan``, from the stages
  before it (a ``StageContext``), or None when it does not run for this pipeline;
- ``verdict(outcome)``: raises when the recorded receipt says the pipeline must stop (a failed
  audit, no promotion); ``never_stops`` for a stage whose receipt never stops it;
- ``rerun_arguments(home, prep, corpus)``: the flow's arguments to re-run one of its receipts,
  recovered from that receipt and its parents (``voxledger reproduce``); raises ReproductionError
  naming why when a receipt cannot be re-run;
- ``compare(home, scratch, original, rerun, bands)``: the re-run judged against the original
  under the reproduction bands, one ``OutputComparison`` per output;
- ``summary(receipt)``: one line saying what the receipt found (``demo report``).

A module shared by two rows (training: a base and an adapter) names a row's inputs by the row's
``inputs`` attribute and tells its receipts apart with ``stage_of(receipt)``. ``CONTRACT`` lists the
names; a test checks every module of the table holds each one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from voxledger.schemas.pipeline import PipelinePlan
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome

if TYPE_CHECKING:
    from voxledger.tasks.stages.reproduce import Preparation

CONTRACT = ("run", "inputs", "verdict", "rerun_arguments", "compare", "summary")
"""The names every stage module defines (``inputs`` may be renamed per row: the row's ``inputs``)."""


@dataclass
class StageContext:
    """What a stage's pipeline inputs are computed from: the run's fixed arguments and earlier outcomes."""

    home: HomeRef
    corpus: str
    plan: PipelinePlan
    plans: dict[str, PlanRef]
    packets_dir: str | None
    outcomes: dict[str, StageOutcome[Any]] = field(default_factory=dict)

    def rid(self, stage: str) -> str:
        """The receipt id an earlier stage recorded."""
        return self.outcomes[stage].receipt_id

    def best(self, stage: str) -> str | None:
        """The best checkpoint of an earlier training stage, None when that stage did not run."""
        out = self.outcomes.get(stage)
        return out.receipt.subject("best").sha256 if out is not None else None

    def base(self) -> str | None:
        """The base tree adapters bind to: the base training's best checkpoint, else the imported shipped base."""
        trained = self.best("train_base")
        if trained is not None:
            return trained
        out = self.outcomes.get("import_base")
        return out.receipt.subject("base").sha256 if out is not None else None

    def winner(self) -> tuple[str, str]:
        """(promotion receipt id, tree digest of the promoted checkpoint)."""
        promo = self.outcomes["promote"]
        result = promo.receipt.result
        tree = next(c.tree_sha256 for c in result.challengers if c.name == result.promoted)
        return promo.receipt_id, tree


def never_stops(outcome: StageOutcome[Any]) -> None:
    """The verdict of a stage whose receipt never stops the pipeline (its failures raise while it runs)."""


def corpus_only(ctx: StageContext) -> dict[str, Any]:
    """Inputs: the corpus (a stage that reads nothing earlier stages made)."""
    return {"corpus": ctx.corpus}


def not_in_pipeline(ctx: StageContext) -> None:
    """Inputs of a stage run only on its own (never by the pipeline)."""
    return None


def need_corpus(corpus: Any, prep: Preparation) -> Any:
    """The corpus folder given with ``--corpus``; ReproductionError when the stage read one and none was given."""
    from voxledger.schemas.errors import ReproductionError

    if corpus is None:
        raise ReproductionError(
            f"receipt {prep.rid[:12]} ({prep.stage}) read a corpus, and receipts record corpora by digest, never by path: "
            "give the corpus folder with --corpus (it is checked against the recorded digests)"
        )
    return corpus
