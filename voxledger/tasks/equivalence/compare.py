"""Compare one model's stage dumps from two runtimes, stage by stage.

Float stages are scored in float64 by ``rel = max|ref - cand| / scale`` with ``scale = max|ref|``,
falling back to ``max|cand|`` when ``ref`` is zero everywhere (see ``voxledger.schemas.equivalence``
for why), so ``rel`` is finite and invariant to scaling both sides. Token streams are compared
exactly. ``length_drift`` reports ``rel`` per consecutive window against the same global scale, so
its largest value equals the stage's ``rel`` and growth along a long utterance is visible.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydantic

from voxledger.schemas.equivalence import (
    FLOAT_KINDS,
    LENGTH_TOLERANT_KINDS,
    EquivalenceBands,
    EquivalencePlan,
    EquivalenceReport,
    SkippedStage,
    StageKind,
    StageResult,
    StageSpec,
)
from voxledger.schemas.errors import EquivalenceError, PlanError, validation_lines
from voxledger.schemas.limits import excerpt, load_yaml
from voxledger.tasks.equivalence.dumps import (
    DumpIndex,
    DumpSource,
    conform_array,
    discover_dumps,
    load_dump,
)


def compare_stage(
    name: str,
    kind: StageKind,
    ref: np.ndarray,
    cand: np.ndarray,
    bands: EquivalenceBands,
    *,
    allow_length_mismatch: bool = False,
    drift_windows: int = 0,
) -> StageResult:
    """Compare the reference and candidate arrays of one stage.

    Tokens must be 1-D integer arrays; streams of different lengths are a divergence (RED) at the
    shorter length, not an error. Float stages must have equal shapes unless
    ``allow_length_mismatch`` (mel and pcm only) is set: then the common prefix along the first
    axis is compared and both lengths are reported. ``drift_windows > 0`` adds per-window ``rel``
    (capped at the compared length).

    Raises: ``EquivalenceError`` naming the stage for NaN/Inf, wrong dtypes, empty arrays, or a
    shape mismatch (naming both shapes).
    """
    if allow_length_mismatch and kind not in LENGTH_TOLERANT_KINDS:
        raise EquivalenceError(f"stage {name!r}: allow_length_mismatch applies to mel and pcm only, not {kind}")
    ref_in, cand_in = np.asarray(ref), np.asarray(cand)
    ref = conform_array(ref_in, kind=kind, cols=None, where=f"stage {name!r} ref")
    cand = conform_array(cand_in, kind=kind, cols=None, where=f"stage {name!r} cand")
    common = {
        "stage": name,
        "kind": kind,
        "ref_shape": tuple(int(n) for n in ref.shape),
        "cand_shape": tuple(int(n) for n in cand.shape),
        "ref_dtype": str(ref_in.dtype),
        "cand_dtype": str(cand_in.dtype),
        "ref_len": int(ref.shape[0]),
        "cand_len": int(cand.shape[0]),
    }
    if kind == "tokens":
        return StageResult.model_validate({**common, **_token_fields(ref, cand)})
    ref, cand = _aligned(name, kind, ref, cand, allow_length_mismatch)
    fields = _float_fields(name, ref, cand, bands)
    if drift_windows > 0:
        fields["drift_rel"] = tuple(length_drift(ref, cand, min(drift_windows, ref.shape[0])))
    return StageResult.model_validate({**common, **fields})


def length_drift(ref: np.ndarray, cand: np.ndarray, n_windows: int) -> list[float]:
    """``rel`` of each of ``n_windows`` consecutive windows along the first axis.

    Every window is divided by the whole stage's scale (not its own), so quiet windows do not
    inflate and ``max(result)`` equals the stage's ``rel``. Arrays must share one shape
    (trim to the common prefix first); windows differ in length by at most one row.
    """
    ref64, cand64 = np.asarray(ref, dtype=np.float64), np.asarray(cand, dtype=np.float64)
    if ref64.shape != cand64.shape or ref64.ndim == 0:
        raise EquivalenceError(f"length_drift needs equal shapes with a first axis; got {ref64.shape} and {cand64.shape}")
    if not 1 <= n_windows <= ref64.shape[0]:
        raise EquivalenceError(f"length_drift: n_windows={n_windows} must be between 1 and the length {ref64.shape[0]}")
    scale = _scale(ref64, cand64)
    err = np.abs(ref64 - cand64).reshape(ref64.shape[0], -1).max(axis=1)
    return [float(w.max()) / scale for w in np.array_split(err, n_windows)]


def compare_dirs(ref_dir: Path | str, cand_dir: Path | str, plan: EquivalencePlan) -> EquivalenceReport:
    """Compare every planned stage found in two dump directories, pairing files by stage name.

    Stage ``mel`` is ``mel.f32``, ``mel.npy`` or an array ``mel`` inside any ``.npz`` of the
    directory. Problems in several stages are collected and raised together.

    Raises: ``EquivalenceError`` when the directories are missing or the same, a required stage
    is absent from either side, a stage exists in two forms, any stage cannot be compared, or no
    planned stage was found at all.
    """
    ref_dir, cand_dir = Path(ref_dir), Path(cand_dir)
    ref_index, cand_index = discover_dumps(ref_dir), discover_dumps(cand_dir)
    if ref_dir.resolve() == cand_dir.resolve():
        raise EquivalenceError(
            f"ref and cand are the same directory ({ref_dir}); comparing a runtime's dumps with "
            f"themselves proves nothing: pass the candidate runtime's directory"
        )
    results: list[StageResult] = []
    skipped: list[SkippedStage] = []
    problems: list[str] = []
    for spec in plan.stages:
        try:
            outcome = _compare_planned(spec, ref_index, cand_index, plan)
        except EquivalenceError as exc:
            problems.append(str(exc))
            continue
        if isinstance(outcome, SkippedStage):
            skipped.append(outcome)
        else:
            results.append(outcome)
    if problems:
        listing = "\n".join(f"- {problem}" for problem in problems)
        raise EquivalenceError(f"{len(problems)} stage(s) cannot be compared:\n{listing}")
    if not results:
        raise EquivalenceError(
            f"none of the planned stages {[s.name for s in plan.stages]} is in {ref_dir} and "
            f"{cand_dir}; dump at least one stage as <stage>.f32/.i32/.npy"
        )
    planned = {spec.name for spec in plan.stages}
    unplanned = [
        f"{side}:{source.path.name}" + (f"[{source.member}]" if source.member else "")
        for side, index in (("ref", ref_index), ("cand", cand_index))
        for stage, sources in index.stages.items()
        if stage not in planned
        for source in sources
    ]
    ignored = [f"ref:{n}" for n in ref_index.other] + [f"cand:{n}" for n in cand_index.other]
    return EquivalenceReport.from_stages(results, plan.bands, skipped=skipped, unplanned=unplanned, ignored_files=ignored)


def load_equivalence_plan(path: Path | str) -> EquivalencePlan:
    """Read and validate a plan YAML file; ``PlanError`` names the file and every problem."""
    path = Path(path)
    from voxledger.tasks.plans import read_plan_text

    try:
        data = load_yaml(read_plan_text(path, "equivalence plan"), f"equivalence plan {path}", PlanError)
    except OSError as exc:
        raise PlanError(f"equivalence plan {path}: cannot read: {excerpt(str(exc), 200)}") from exc
    if not isinstance(data, dict):
        raise PlanError(f"equivalence plan {path}: expected a mapping at the top level")
    try:
        return EquivalencePlan.model_validate(data)
    except pydantic.ValidationError as exc:
        lines = validation_lines(exc, root="<plan>")
        raise PlanError(f"equivalence plan {path} is invalid:\n" + "\n".join(lines)) from exc


def _compare_planned(spec: StageSpec, ref_index: DumpIndex, cand_index: DumpIndex, plan: EquivalencePlan) -> StageResult | SkippedStage:
    ref_sources = ref_index.stages.get(spec.name, [])
    cand_sources = cand_index.stages.get(spec.name, [])
    for side, sources in (("ref", ref_sources), ("cand", cand_sources)):
        if len(sources) > 1:
            raise EquivalenceError(
                f"stage {spec.name!r}: {side} has it in {len(sources)} places ({', '.join(s.label for s in sources)}); keep exactly one"
            )
    absent = [side for side, s in (("ref", ref_sources), ("cand", cand_sources)) if not s]
    if absent:
        raw = ".i32" if spec.kind == "tokens" else ".f32"
        reason = f"no {spec.name}{raw}, {spec.name}.npy or .npz array in {' and '.join(absent)}"
        if spec.required:
            raise EquivalenceError(f"stage {spec.name!r} is required but missing: {reason}")
        return SkippedStage(stage=spec.name, reason=reason)
    ref = _load(spec, ref_sources[0])
    cand = _load(spec, cand_sources[0])
    return compare_stage(
        spec.name,
        spec.kind,
        ref,
        cand,
        plan.bands,
        allow_length_mismatch=spec.allow_length_mismatch,
        drift_windows=plan.drift_windows if spec.kind in FLOAT_KINDS else 0,
    )


def _load(spec: StageSpec, source: DumpSource) -> np.ndarray:
    return load_dump(source.path, kind=spec.kind, cols=spec.cols, stage=spec.name, member=source.member)


def _token_fields(ref: np.ndarray, cand: np.ndarray) -> dict[str, object]:
    n = min(ref.shape[0], cand.shape[0])
    differs = ref[:n] != cand[:n]
    n_mismatches = int(differs.sum())
    first: int | None = None
    if n_mismatches:
        first = int(np.argmax(differs))
    elif ref.shape[0] != cand.shape[0]:
        first = n
    equal = first is None
    return {
        "n_compared": n,
        "band": "GREEN" if equal else "RED",
        "tokens_equal": equal,
        "first_divergence": first,
        "ref_token": int(ref[first]) if first is not None and first < ref.shape[0] else None,
        "cand_token": int(cand[first]) if first is not None and first < cand.shape[0] else None,
        "n_token_mismatches": n_mismatches,
    }


def _aligned(name: str, kind: StageKind, ref: np.ndarray, cand: np.ndarray, allow_length_mismatch: bool) -> tuple[np.ndarray, np.ndarray]:
    if ref.shape == cand.shape:
        return ref, cand
    if allow_length_mismatch and ref.shape[1:] == cand.shape[1:]:
        n = min(ref.shape[0], cand.shape[0])
        return ref[:n], cand[:n]
    if kind in LENGTH_TOLERANT_KINDS and ref.shape[1:] == cand.shape[1:]:
        fix = "set allow_length_mismatch: true for this stage to compare the common prefix"
    else:
        fix = "dump both runtimes from the same inputs with the same layout"
    raise EquivalenceError(f"stage {name!r} ({kind}): ref shape {ref.shape} != cand shape {cand.shape}; {fix}")


def _scale(ref64: np.ndarray, cand64: np.ndarray) -> float:
    ref_max = float(np.abs(ref64).max())
    if ref_max > 0:
        return ref_max
    cand_max = float(np.abs(cand64).max())
    # Silent reference: measure the candidate against itself (rel 1 if it is not silent too).
    return cand_max if cand_max > 0 else 1.0


def _float_fields(name: str, ref: np.ndarray, cand: np.ndarray, bands: EquivalenceBands) -> dict[str, object]:
    ref64, cand64 = ref.astype(np.float64), cand.astype(np.float64)
    err = np.abs(ref64 - cand64)
    flat_worst = int(np.argmax(err))
    max_abs = float(err.flat[flat_worst])
    if not np.isfinite(max_abs):
        raise EquivalenceError(f"stage {name!r}: the difference overflows float64 (values near 1e308); these dumps are not model outputs")
    rel = max_abs / _scale(ref64, cand64)
    return {
        "n_compared": int(err.size),
        "band": bands.band_for(rel),
        "max_abs_err": max_abs,
        "rel": rel,
        "mean_abs_err": float(err.mean()),
        "ref_max_abs": float(np.abs(ref64).max()),
        "worst_index": tuple(int(i) for i in np.unravel_index(flat_worst, err.shape)),
    }
