"""The ``reproduction`` receipt: a recorded receipt re-run in a scratch home and compared with it.

Verdicts (docs/provenance.md, "Reproduction"): ``exact`` when every compared output is identical
and the environment matches the recorded one; ``within_bands`` when every output is identical or
inside its stage's band (including identical outputs under a different environment: bit-identity
is claimed only for the recorded environment); ``differs`` when any output falls outside its band.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256
from voxledger.schemas.equivalence import EquivalenceBands
from voxledger.schemas.stages import reproducible_kinds

Verdict = Literal["exact", "within_bands", "differs"]
"""exact: bit for bit under the recorded environment; within_bands: inside the stated bands; differs: outside."""

REPRODUCIBLE_KINDS: tuple[str, ...] = reproducible_kinds()
"""Receipt kinds ``voxledger reproduce`` re-runs: those of the stage table's stages with a comparison, and a
pipeline run (by re-running each stage receipt it chains)."""


class ReproductionBands(Frozen):
    """The tolerances a re-run is judged by when its outputs are not identical (docs/provenance.md gives their source)."""

    cv_loss_rel_tol: float = Field(
        default=0.001, gt=0, description="training: largest |rerun - original| / original CV loss allowed in any epoch"
    )
    cv_loss_rel_tol_by_precision: dict[str, float] = Field(
        default_factory=lambda: {"bf16": 4e-3, "tf32": 1e-3},
        description=(
            "training: cv_loss_rel_tol for a run whose effective precision is named here (the unit round-off of its compute "
            "dtype, bf16 2^-8 = 3.9e-3, never below cv_loss_rel_tol); other precisions use cv_loss_rel_tol"
        ),
    )
    probe: EquivalenceBands = Field(
        default=EquivalenceBands(),
        description="training: rel of the re-run model's stages (durations, mel, pcm) on the probe prompt; RED differs",
    )
    probe_text: str = "The birch canoe slid on the smooth planks."
    probe_seed: int = 0
    prompt_agreement_min: float = Field(
        default=1.0, ge=0, le=1, description="evaluation: share of rows whose validity and content-gate outcome must agree"
    )
    timing_fields: tuple[str, ...] = Field(
        default=("wall_s", "rtf", "peak_rss_mb"), description="evaluation: measured times left out of the compared documents"
    )


class EnvironmentDifference(Frozen):
    """One way this machine or build differs from what the original recorded (None: not recorded / absent)."""

    field: str
    recorded: str | None
    here: str | None


class OutputComparison(Frozen):
    """One compared output (a subject by role) or claim (a metric, the findings, the decision)."""

    name: str
    original_sha256: Sha256 | None = None
    rerun_sha256: Sha256 | None = None
    verdict: Verdict
    reason: str


class ReproductionParameters(Frozen):
    """What was re-run, where it differed from the original's setting, and the bands used."""

    original: Sha256
    original_kind: str
    rerun: Sha256 | None = Field(
        description="id of the re-run's receipt (its document is this receipt's `rerun_receipt` subject); "
        "None for a pipeline run, whose stages are re-run one by one (each its own reproduction, an input of this one), "
        "and for a re-run that failed before recording a receipt (comparison `rerun` says how)"
    )
    stage: str
    code_drift_allowed: bool
    environment_differences: tuple[EnvironmentDifference, ...]
    torch_threads: int | None = Field(description="intra-op threads forced for the re-run (`--threads`), None when not forced")
    bands: ReproductionBands
    objects_seeded: int = Field(ge=0, description="stored objects the scratch home was given from the original home")
    objects_unavailable: int = Field(ge=0, description="objects older receipts name that were missing or damaged and not given")
    stages_not_rerun: tuple[str, ...] = Field(
        default=(),
        description="pipeline run: each stage receipt it chains that was not re-run, with why (`stage: reason`); "
        "its outputs are not covered by the verdict",
    )
    stat_cache_trusted: int | None = Field(
        default=None,
        ge=0,
        exclude_if=lambda v: v is None,
        description="files (corpus audio, stored objects) whose digest was taken from a stat cache instead of reading them, "
        "in the original home and the scratch home alike; 0 with `--deep`; None in receipts from before it was recorded",
    )
    deep: bool = Field(
        default=False,
        exclude_if=lambda v: v is False,
        description="`--deep`: no stat cache was trusted, every file the reproduction checked or read was hashed",
    )


class ReproductionResult(Frozen):
    """The verdict, and each output's comparison with its reason."""

    verdict: Verdict
    reason: str
    comparisons: tuple[OutputComparison, ...]
    rerun_wall_s: float = Field(ge=0)


class ReproductionReceipt(ReceiptBase):
    """A receipt re-run and compared; inputs: the original (``original``); subject: the re-run's receipt document."""

    kind: Literal["reproduction"] = "reproduction"
    parameters: ReproductionParameters
    result: ReproductionResult
