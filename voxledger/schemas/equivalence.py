"""Numerical equivalence between runtimes of one model: bands, stage results, plans, reports.

A *stage* is one intermediate dumped by two runtimes from the same inputs (token ids, mel frames,
pcm samples, logits): the *reference* (usually the PyTorch adapter) and a *candidate* (merged
weights, a reloaded export, vLLM, a C++/GGML port). Float stages are scored by

    rel = max|ref - cand| / max|ref|

and banded GREEN (``rel <= green_max_rel``: pass), YELLOW (``rel <= yellow_max_rel``: investigate)
or RED (fail). When ``ref`` is zero everywhere the scale falls back to ``max|cand|``: a silent
reference against a non-silent candidate gives ``rel = 1`` (all of the candidate is error), two
silent dumps give ``rel = 0``. ``rel`` is therefore always finite and invariant to scaling both
dumps by the same positive factor. Token stages are compared exactly: equal streams are GREEN,
any divergence (a different id, or one stream ending earlier) is RED.

Pure data, no I/O: readers and comparisons live in ``voxledger.tasks.equivalence``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Band = Literal["GREEN", "YELLOW", "RED"]
StageKind = Literal["tokens", "mel", "pcm", "logits"]

BAND_ORDER: dict[str, int] = {"GREEN": 0, "YELLOW": 1, "RED": 2}
FLOAT_KINDS: frozenset[str] = frozenset({"mel", "pcm", "logits"})
# Only time-axis signals may legitimately differ in length (e.g. a port that drops the last frame).
LENGTH_TOLERANT_KINDS: frozenset[str] = frozenset({"mel", "pcm"})


def worst_band(bands: Iterable[Band]) -> Band:
    """The worst of ``bands`` (RED > YELLOW > GREEN); GREEN for an empty iterable."""
    worst: Band = "GREEN"
    for band in bands:
        if BAND_ORDER[band] > BAND_ORDER[worst]:
            worst = band
    return worst


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EquivalenceBands(_Frozen):
    """Thresholds on ``rel``; both bounds are inclusive (``rel == green_max_rel`` is GREEN)."""

    green_max_rel: float = Field(default=1e-2, gt=0, allow_inf_nan=False)
    yellow_max_rel: float = Field(default=1e-1, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _ordered(self) -> EquivalenceBands:
        if not self.green_max_rel < self.yellow_max_rel:
            raise ValueError(
                f"green_max_rel ({self.green_max_rel}) must be below yellow_max_rel "
                f"({self.yellow_max_rel}); lower green_max_rel or raise yellow_max_rel"
            )
        return self

    def band_for(self, rel: float) -> Band:
        """Band of a relative error; NaN is RED (it never reaches here from the comparators)."""
        if rel <= self.green_max_rel:
            return "GREEN"
        if rel <= self.yellow_max_rel:
            return "YELLOW"
        return "RED"


class StageSpec(_Frozen):
    """One stage a plan expects: its file stem ``name``, its ``kind`` and how to read it.

    ``cols`` is the row width of a raw ``.f32`` dump (80 for frames x 80 mel); it is required for
    mel, optional for logits and forbidden for tokens and pcm (always 1-D). ``required`` stages
    missing from either directory fail the comparison; optional ones are reported as skipped.
    ``allow_length_mismatch`` (mel and pcm only) compares the common prefix along the time axis.
    """

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")
    kind: StageKind
    cols: int | None = Field(default=None, gt=0)
    required: bool = True
    allow_length_mismatch: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> StageSpec:
        problems: list[str] = []
        if self.allow_length_mismatch and self.kind not in LENGTH_TOLERANT_KINDS:
            problems.append(f"stage {self.name!r}: allow_length_mismatch applies to mel and pcm only, not {self.kind}; remove it")
        if self.cols is not None and self.kind in ("tokens", "pcm"):
            problems.append(f"stage {self.name!r}: {self.kind} dumps are 1-D; remove cols")
        if self.cols is None and self.kind == "mel":
            problems.append(f"stage {self.name!r}: mel needs cols (mel bins per frame, e.g. 80)")
        if problems:
            raise ValueError("; ".join(problems))
        return self


DEFAULT_STAGES: tuple[StageSpec, ...] = (
    StageSpec(name="tokens", kind="tokens"),
    StageSpec(name="mel", kind="mel", cols=80),
    StageSpec(name="pcm", kind="pcm"),
    StageSpec(name="logits", kind="logits", required=False),
)


class EquivalencePlan(_Frozen):
    """What to compare and how to judge it; ``EquivalencePlan()`` is the default plan.

    ``drift_windows`` splits each float stage into that many consecutive windows along its first
    axis and reports ``rel`` per window (0 turns drift reporting off).
    """

    schema_version: Literal[1] = 1
    bands: EquivalenceBands = EquivalenceBands()
    stages: tuple[StageSpec, ...] = Field(default=DEFAULT_STAGES, min_length=1)
    drift_windows: int = Field(default=8, ge=0, le=10_000)

    @model_validator(mode="after")
    def _unique_names(self) -> EquivalencePlan:
        names = [spec.name for spec in self.stages]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"stage names must be unique; repeated: {duplicates}")
        return self


class StageResult(_Frozen):
    """The comparison of one stage.

    Float stages (mel, pcm, logits) fill ``max_abs_err``, ``rel``, ``mean_abs_err``,
    ``ref_max_abs`` and ``worst_index`` (index of the largest error, in the compared region);
    token fields stay ``None``. Token stages fill ``tokens_equal``, ``first_divergence`` (index of
    the first differing id, or the shorter length when one stream is a prefix of the other),
    ``ref_token``/``cand_token`` (the ids there, ``None`` past a stream's end) and
    ``n_token_mismatches`` (differing ids within the common length); float fields stay ``None``.
    ``ref_len``/``cand_len`` are the sizes along the first axis; ``n_compared`` counts the
    elements compared. ``drift_rel`` is ``rel`` per consecutive window (float stages only).
    """

    stage: str
    kind: StageKind
    ref_shape: tuple[int, ...]
    cand_shape: tuple[int, ...]
    ref_dtype: str
    cand_dtype: str
    ref_len: int = Field(ge=0)
    cand_len: int = Field(ge=0)
    n_compared: int = Field(ge=0)
    band: Band
    max_abs_err: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    rel: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    mean_abs_err: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    ref_max_abs: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    worst_index: tuple[int, ...] | None = None
    tokens_equal: bool | None = None
    first_divergence: int | None = Field(default=None, ge=0)
    ref_token: int | None = None
    cand_token: int | None = None
    n_token_mismatches: int | None = Field(default=None, ge=0)
    drift_rel: tuple[float, ...] = ()

    @model_validator(mode="after")
    def _fields_match_kind(self) -> StageResult:
        float_fields = {
            "max_abs_err": self.max_abs_err,
            "rel": self.rel,
            "mean_abs_err": self.mean_abs_err,
            "ref_max_abs": self.ref_max_abs,
            "worst_index": self.worst_index,
        }
        token_fields = {
            "tokens_equal": self.tokens_equal,
            "n_token_mismatches": self.n_token_mismatches,
        }
        problems: list[str] = []
        if self.kind == "tokens":
            problems += [f"{k} must be None for tokens" for k, v in float_fields.items() if v is not None]
            problems += [f"{k} is required for tokens" for k, v in token_fields.items() if v is None]
            if self.drift_rel:
                problems.append("drift_rel must be empty for tokens")
            if self.tokens_equal is not None and self.band != ("GREEN" if self.tokens_equal else "RED"):
                problems.append(f"band {self.band} contradicts tokens_equal={self.tokens_equal}")
            if self.tokens_equal is False and self.first_divergence is None:
                problems.append("first_divergence is required when tokens differ")
        else:
            problems += [f"{k} is required for {self.kind}" for k, v in float_fields.items() if v is None]
            problems += [f"{k} must be None for {self.kind}" for k, v in token_fields.items() if v is not None]
        if problems:
            raise ValueError(f"stage {self.stage!r}: " + "; ".join(problems))
        return self


class SkippedStage(_Frozen):
    """An optional planned stage that was not compared, and why."""

    stage: str
    reason: str = Field(min_length=1)


class EquivalenceReport(_Frozen):
    """All compared stages; ``band`` is the worst stage band and ``passed`` means no RED.

    ``unplanned`` names dump files present but not in the plan, ``ignored_files`` names entries
    that are not dumps at all (``ref/notes.txt``), so nothing is dropped silently.
    """

    schema_version: Literal[1] = 1
    bands: EquivalenceBands
    stages: tuple[StageResult, ...] = Field(min_length=1)
    band: Band
    passed: bool
    skipped: tuple[SkippedStage, ...] = ()
    unplanned: tuple[str, ...] = ()
    ignored_files: tuple[str, ...] = ()

    @classmethod
    def from_stages(
        cls,
        stages: Iterable[StageResult],
        bands: EquivalenceBands,
        *,
        skipped: Iterable[SkippedStage] = (),
        unplanned: Iterable[str] = (),
        ignored_files: Iterable[str] = (),
    ) -> EquivalenceReport:
        """Build a report whose overall ``band`` and ``passed`` follow from ``stages``."""
        stages = tuple(stages)
        band = worst_band(stage.band for stage in stages)
        return cls(
            bands=bands,
            stages=stages,
            band=band,
            passed=band != "RED",
            skipped=tuple(skipped),
            unplanned=tuple(unplanned),
            ignored_files=tuple(ignored_files),
        )

    @model_validator(mode="after")
    def _consistent(self) -> EquivalenceReport:
        problems: list[str] = []
        names = [stage.stage for stage in self.stages]
        if len(set(names)) != len(names):
            problems.append(f"stage names repeat: {names}")
        expected = worst_band(stage.band for stage in self.stages)
        if self.band != expected:
            problems.append(f"band {self.band} is not the worst stage band {expected}")
        if self.passed != (self.band != "RED"):
            problems.append(f"passed={self.passed} contradicts band {self.band}")
        for stage in self.stages:
            if stage.rel is not None and stage.band != self.bands.band_for(stage.rel):
                problems.append(f"stage {stage.stage!r}: band {stage.band} does not match rel {stage.rel} under {self.bands}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class RuntimeDescriptor(_Frozen):
    """Settings of one runtime that can change its numbers."""

    name: str = Field(min_length=1)
    dtype: str = "float32"
    device: str = "cpu"
    tf32: bool = False


class EquivalenceParameters(_Frozen):
    """What was compared under which plan."""

    plan_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    reference: RuntimeDescriptor
    candidate: RuntimeDescriptor
    reference_tree_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    candidate_tree_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
