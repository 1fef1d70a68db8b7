"""Comparisons for re-run ``package`` and ``equivalence`` receipts (docs/provenance.md, "Reproduction").

A package has no band: packaging is built to be reproducible (``schemas/package.py``: equal inputs
give an equal package digest), so its tar and every member must be byte-identical, and a tar that
differs is broken down member by member. The checks packaging records are compared as claims: the
fresh-process reload by its outcome, the merged export by its tree and by the equivalence report
that judged it. An equivalence report is judged stage by stage under the bands its own plan
recorded (``EquivalenceReport.bands``): an identical stage result is ``exact``; another ``rel`` in
the same band is ``within_bands``; another band is ``differs``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from voxledger.schemas.equivalence import BAND_ORDER, EquivalenceReport, StageResult
from voxledger.schemas.equivalence_receipt import EquivalenceReceipt
from voxledger.schemas.package import MANIFEST_NAME, PackageReceipt, ReloadCheck
from voxledger.schemas.reproduction import OutputComparison, Verdict

PathOf = Callable[[str], Path]
"""Where a stored object lies (the original's in its home, the re-run's in the scratch home)."""


def _worst(verdicts: list[Verdict]) -> Verdict:
    order: dict[Verdict, int] = {"exact": 0, "within_bands": 1, "differs": 2}
    return max(verdicts, key=order.__getitem__, default="exact")


def _stage(prefix: str, a: StageResult | None, b: StageResult | None, report: EquivalenceReport) -> OutputComparison:
    """One stage's result: identical, or moved within the recorded band, or not."""
    stage = (a or b).stage  # type: ignore[union-attr]
    name = f"{prefix}stage:{stage}"
    if a is None or b is None:
        return OutputComparison(name=name, verdict="differs", reason=f"compared only in the {'re-run' if a is None else 'original'}")
    if a == b:
        rel = f", rel {a.rel:.3g}" if a.rel is not None else ""
        return OutputComparison(name=name, verdict="exact", reason=f"identical stage result (band {a.band}{rel})")
    bands = report.bands
    if a.kind == "tokens" or a.rel is None or b.rel is None:
        moved = f"tokens equal {a.tokens_equal} -> {b.tokens_equal}, first divergence {a.first_divergence} -> {b.first_divergence}"
    else:
        moved = f"rel {a.rel:.3g} -> {b.rel:.3g} (max |err| {a.max_abs_err:.3g} -> {b.max_abs_err:.3g})"
    scale = f"recorded bands GREEN <= {bands.green_max_rel:g}, YELLOW <= {bands.yellow_max_rel:g}"
    if a.band == b.band and a.ref_shape == b.ref_shape and a.cand_shape == b.cand_shape:
        return OutputComparison(name=name, verdict="within_bands", reason=f"{moved}; band {a.band} kept ({scale})")
    worse = "worse" if BAND_ORDER[b.band] > BAND_ORDER[a.band] else "another band"
    return OutputComparison(
        name=name,
        verdict="differs",
        reason=f"band {a.band} -> {b.band} ({worse}); {moved}; shapes {a.ref_shape}/{a.cand_shape} -> {b.ref_shape}/{b.cand_shape}; {scale}",
    )


def compare_equivalence(original: EquivalenceReceipt, rerun: EquivalenceReceipt, prefix: str = "") -> list[OutputComparison]:
    """Band: each stage's ``rel`` within the band the original's plan recorded for it; the dumps by digest."""
    ra, rb = original.report, rerun.report
    theirs = {s.stage: s for s in rb.stages}
    names = dict.fromkeys([*(s.stage for s in ra.stages), *theirs])
    mine = {s.stage: s for s in ra.stages}
    stages = [_stage(prefix, mine.get(n), theirs.get(n), ra) for n in names]
    stage_verdict = _worst([c.verdict for c in stages])
    out: list[OutputComparison] = []
    pa, pb = original.parameters, rerun.parameters
    for role, a, b in (
        ("reference_dumps", pa.reference_tree_sha256, pb.reference_tree_sha256),
        ("candidate_dumps", pa.candidate_tree_sha256, pb.candidate_tree_sha256),
    ):
        if a == b:
            out.append(
                OutputComparison(name=prefix + role, original_sha256=a, rerun_sha256=b, verdict="exact", reason="identical dump tree")
            )
        else:
            verdict: Verdict = "within_bands" if stage_verdict != "differs" else "differs"
            out.append(
                OutputComparison(
                    name=prefix + role,
                    original_sha256=a,
                    rerun_sha256=b,
                    verdict=verdict,
                    reason=f"dump bytes differ; the stages compared from them are {stage_verdict}",
                )
            )
    inventory = (ra.skipped, ra.unplanned, ra.ignored_files, ra.bands)
    if inventory == (rb.skipped, rb.unplanned, rb.ignored_files, rb.bands):
        out.append(
            OutputComparison(
                name=prefix + "inventory",
                verdict="exact",
                reason=f"same plan bands and the same {len(ra.skipped)} skipped, {len(ra.unplanned)} unplanned, {len(ra.ignored_files)} ignored",
            )
        )
    else:
        out.append(
            OutputComparison(
                name=prefix + "inventory",
                verdict="differs",
                reason=f"skipped {[s.stage for s in ra.skipped]} -> {[s.stage for s in rb.skipped]}, unplanned {list(ra.unplanned)} -> "
                f"{list(rb.unplanned)}, ignored {list(ra.ignored_files)} -> {list(rb.ignored_files)}",
            )
        )
    return [*out, *stages]


def _members(original: PackageReceipt, rerun: PackageReceipt, path_of: tuple[PathOf, PathOf]) -> list[OutputComparison]:
    """Every member of two package tars that differ, by path: which bytes changed, and in the manifest which fields."""
    import json

    from voxledger.tasks.packaging.archive import verify_package

    va = verify_package(path_of[0](original.result.package_sha256))
    vb = verify_package(path_of[1](rerun.result.package_sha256))
    out: list[OutputComparison] = []
    for path in dict.fromkeys([*va.contents, *vb.contents]):
        a, b = va.contents.get(path), vb.contents.get(path)
        name = f"member:{path}"
        if a == b:
            out.append(OutputComparison(name=name, verdict="exact", reason="identical bytes"))
        elif a is None or b is None:
            out.append(
                OutputComparison(name=name, verdict="differs", reason=f"only in the {'re-run' if a is None else 'original'}'s package")
            )
        elif path == MANIFEST_NAME:
            da, db = json.loads(a), json.loads(b)
            fields = sorted(k for k in {*da, *db} if da.get(k) != db.get(k))
            out.append(OutputComparison(name=name, verdict="differs", reason=f"manifest fields differ: {', '.join(fields)}"))
        else:
            out.append(OutputComparison(name=name, verdict="differs", reason=f"bytes differ ({len(a)} -> {len(b)} bytes)"))
    return out


def _reload(a: ReloadCheck, b: ReloadCheck) -> OutputComparison:
    """The fresh-process reload check by its outcome (its child's wall time measures the machine, not the result)."""
    fields = (
        "probe_text",
        "probe_seed",
        "speaker",
        "threads",
        "device",
        "n_samples",
        "bitwise_equal",
        "max_abs_err",
        "tolerance",
        "passed",
    )
    moved = [f"{f} {getattr(a, f)} -> {getattr(b, f)}" for f in fields if getattr(a, f) != getattr(b, f)]
    if not moved:
        return OutputComparison(name="reload", verdict="exact", reason=f"same outcome (bitwise equal {a.bitwise_equal}, passed {a.passed})")
    verdict: Verdict = "within_bands" if a.passed and b.passed else "differs"
    why = "still passed" if verdict == "within_bands" else "passed changed"
    return OutputComparison(name="reload", verdict=verdict, reason=f"{why}: {'; '.join(moved)} (tolerance {a.tolerance})")


def _merged(original: PackageReceipt, rerun: PackageReceipt) -> OutputComparison:
    """The merged export by tree digest; when its bytes differ, the band is the merged-vs-adapter check the original recorded."""
    ra, rb = original.result, rerun.result
    a, b = ra.merged_tree_sha256, rb.merged_tree_sha256
    if a == b:
        reason = "identical merged tree" if a else "no merged export in either (the reload check failed first)"
        return OutputComparison(name="merged_export", original_sha256=a, rerun_sha256=b, verdict="exact", reason=reason)
    held = a is not None and b is not None and ra.equivalence_band == rb.equivalence_band
    return OutputComparison(
        name="merged_export",
        original_sha256=a,
        rerun_sha256=b,
        verdict="within_bands" if held else "differs",
        reason=f"merged tree differs; the merged-vs-adapter check is {ra.equivalence_band} -> {rb.equivalence_band} "
        f"(per-stage rel {ra.stage_rel} -> {rb.stage_rel})",
    )


def compare_package(
    original: PackageReceipt,
    rerun: PackageReceipt,
    path_of: tuple[PathOf, PathOf],
    equivalence: tuple[EquivalenceReceipt, EquivalenceReceipt] | None,
) -> list[OutputComparison]:
    """Band: none for the package (tar and members byte for byte); the reload by outcome; the merged
    export by the merged-vs-adapter equivalence report (``compare_equivalence``, prefixed ``equivalence:``)."""
    a, b = original.result.package_sha256, rerun.result.package_sha256
    out: list[OutputComparison] = []
    if a == b:
        out.append(
            OutputComparison(
                name="package",
                original_sha256=a,
                rerun_sha256=b,
                verdict="exact",
                reason=f"identical tar ({original.result.n_members} members incl. manifest)",
            )
        )
    else:
        members = _members(original, rerun, path_of)
        changed = [c.name.removeprefix("member:") for c in members if c.verdict != "exact"]
        out.append(
            OutputComparison(
                name="package",
                original_sha256=a,
                rerun_sha256=b,
                verdict="differs",
                reason=f"tar differs (a package has no band: equal inputs give an equal digest); members that differ: {', '.join(changed) or 'none (tar framing)'}",
            )
        )
        out += members
    out += [_reload(original.result.reload, rerun.result.reload), _merged(original, rerun)]
    if equivalence is not None:
        out += compare_equivalence(*equivalence, prefix="equivalence:")
    elif original.result.equivalence_receipt or rerun.result.equivalence_receipt:
        out.append(
            OutputComparison(name="equivalence:report", verdict="differs", reason="the merged-export check ran in only one of the two")
        )
    return out
