"""Stage dumps and stage-by-stage comparison between two runtimes (real files, real numpy)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from voxledger.schemas.equivalence import BAND_ORDER, EquivalenceBands, EquivalencePlan, StageSpec
from voxledger.schemas.errors import EquivalenceError, PlanError
from voxledger.tasks.equivalence import (
    compare_dirs,
    compare_stage,
    discover_dumps,
    length_drift,
    load_dump,
    load_equivalence_plan,
)

BANDS = EquivalenceBands()
PLAN_FILE = Path(__file__).resolve().parents[2] / "plans" / "equivalence-default.yaml"


def mel_frames(n_frames: int = 120, seed: int = 0) -> np.ndarray:
    """Deterministic log-mel-like frames x 80 in [-4, 2] (max |value| = 4 by construction)."""
    rng = np.random.default_rng(seed)
    mel = rng.uniform(-3.5, 1.5, size=(n_frames, 80)).astype(np.float32)
    mel[0, 0] = -4.0
    return mel


def pcm_samples(n: int = 24_000, seed: int = 1) -> np.ndarray:
    """A deterministic 440 Hz tone at 24 kHz with a little noise, peak ~0.5."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 24_000
    return (0.5 * np.sin(2 * np.pi * 440 * t) + 0.01 * rng.standard_normal(n)).astype(np.float32)


# --- compare_stage: bands -------------------------------------------------------------------


def test_identical_arrays_are_green_with_rel_zero() -> None:
    mel = mel_frames()
    result = compare_stage("mel", "mel", mel, mel.copy(), BANDS)
    assert result.band == "GREEN" and result.rel == 0.0 and result.max_abs_err == 0.0
    assert result.n_compared == mel.size and result.ref_dtype == "float32"


@pytest.mark.parametrize(("relative_step", "band"), [(1e-3, "GREEN"), (5e-2, "YELLOW"), (0.5, "RED")])
def test_uniform_perturbation_lands_in_its_band(relative_step: float, band: str) -> None:
    mel = mel_frames()  # max |ref| = 4, so adding step * 4 everywhere gives rel = step
    result = compare_stage("mel", "mel", mel, mel + np.float32(relative_step * 4.0), BANDS)
    assert result.band == band
    assert result.rel == pytest.approx(relative_step, rel=1e-4)


def test_one_corrupted_element_is_red_and_named() -> None:
    mel = mel_frames()
    cand = mel.copy()
    cand[37, 12] += 3.0
    result = compare_stage("mel", "mel", mel, cand, BANDS)
    assert result.band == "RED"
    assert result.worst_index == (37, 12)
    assert result.max_abs_err == pytest.approx(3.0, rel=1e-6)
    assert result.rel == pytest.approx(0.75, rel=1e-6)


def test_rel_bounds_are_inclusive() -> None:
    ref = np.array([100.0, -100.0])  # errors of 1 and 10 are exact: rel is exactly 0.01 and 0.1
    assert compare_stage("pcm", "pcm", ref, ref + [0.0, 1.0], BANDS).band == "GREEN"
    assert compare_stage("pcm", "pcm", ref, ref + [0.0, 10.0], BANDS).band == "YELLOW"
    assert compare_stage("pcm", "pcm", ref, ref + [0.0, 10.001], BANDS).band == "RED"


def test_zero_reference_gives_finite_rel() -> None:
    silent = np.zeros(100, dtype=np.float32)
    assert compare_stage("pcm", "pcm", silent, silent.copy(), BANDS).rel == 0.0
    noisy = silent.copy()
    noisy[7] = 1e-6
    result = compare_stage("pcm", "pcm", silent, noisy, BANDS)
    assert result.rel == 1.0 and result.band == "RED" and result.worst_index == (7,)


# --- compare_stage: tokens and shapes ---------------------------------------------------------


def test_token_divergence_is_located() -> None:
    ref = np.arange(50, dtype=np.int32)
    cand = ref.copy()
    cand[23], cand[40] = 999, 998
    result = compare_stage("tokens", "tokens", ref, cand, BANDS)
    assert result.band == "RED" and result.tokens_equal is False
    assert (result.first_divergence, result.ref_token, result.cand_token) == (23, 23, 999)
    assert result.n_token_mismatches == 2
    same = compare_stage("tokens", "tokens", ref, ref.copy(), BANDS)
    assert same.band == "GREEN" and same.tokens_equal and same.first_divergence is None


def test_token_stream_ending_early_diverges_at_its_end() -> None:
    ref = np.arange(30, dtype=np.int32)
    result = compare_stage("tokens", "tokens", ref, ref[:25], BANDS)
    assert result.band == "RED" and result.first_divergence == 25
    assert (result.ref_token, result.cand_token) == (25, None)
    assert (result.ref_len, result.cand_len, result.n_compared) == (30, 25, 25)


def test_shape_mismatch_names_stage_and_both_shapes() -> None:
    with pytest.raises(EquivalenceError, match=r"'mel'.*\(120, 80\).*\(118, 80\).*allow_length"):
        compare_stage("mel", "mel", mel_frames(), mel_frames()[:118], BANDS)
    with pytest.raises(EquivalenceError, match=r"'logits'.*\(4, 6\).*\(4, 5\)"):
        compare_stage("logits", "logits", np.ones((4, 6)), np.ones((4, 5)), BANDS)


def test_allowed_length_mismatch_compares_the_common_prefix() -> None:
    pcm = pcm_samples()
    result = compare_stage("pcm", "pcm", pcm, pcm[:-480], BANDS, allow_length_mismatch=True)
    assert result.band == "GREEN" and result.rel == 0.0
    assert (result.ref_len, result.cand_len, result.n_compared) == (24_000, 23_520, 23_520)
    with pytest.raises(EquivalenceError, match="mel and pcm only"):
        compare_stage("tokens", "tokens", [1, 2], [1, 2], BANDS, allow_length_mismatch=True)


def test_nan_in_candidate_is_refused_with_count_and_index() -> None:
    cand = mel_frames()
    cand[3, 4] = np.nan
    cand[5, 0] = np.inf
    with pytest.raises(EquivalenceError, match=r"'mel' cand: 1 NaN and 1 Inf .* index \(3, 4\)"):
        compare_stage("mel", "mel", mel_frames(), cand, BANDS)


# --- length drift ------------------------------------------------------------------------------


def test_length_drift_grows_along_a_drifting_signal() -> None:
    pcm = pcm_samples()
    cand = pcm * (1 + np.linspace(0, 0.08, pcm.size)).astype(np.float32)
    drift = length_drift(pcm, cand, 8)
    assert len(drift) == 8 and all(a < b for a, b in itertools.pairwise(drift))
    result = compare_stage("pcm", "pcm", pcm, cand, BANDS, drift_windows=8)
    assert result.drift_rel == pytest.approx(drift) and max(drift) == pytest.approx(result.rel)
    assert result.band == "YELLOW" and drift[0] < BANDS.green_max_rel


def test_length_drift_uses_the_whole_stage_scale() -> None:
    ref = np.concatenate([np.full(100, 0.01), np.full(100, 1.0)])
    drift = length_drift(ref, ref + 1e-3, 2)  # a quiet window must not inflate to rel 0.1
    assert drift == pytest.approx([1e-3, 1e-3], rel=1e-6)


def test_length_drift_rejects_bad_window_counts() -> None:
    with pytest.raises(EquivalenceError, match="n_windows=11"):
        length_drift(np.ones(10), np.ones(10), 11)
    assert compare_stage("pcm", "pcm", np.ones(3), np.ones(3), BANDS, drift_windows=8).drift_rel == (
        0.0,
        0.0,
        0.0,
    )


# --- reading dumps -------------------------------------------------------------------------------


def test_raw_f32_round_trip_with_tofile(tmp_path: Path) -> None:
    mel = mel_frames()
    mel.astype("<f4").tofile(tmp_path / "mel.f32")
    loaded = load_dump(tmp_path / "mel.f32", kind="mel", cols=80)
    assert loaded.dtype == np.float32 and loaded.shape == (120, 80)
    np.testing.assert_array_equal(loaded, mel)
    tokens = np.array([6561, 12, -1, 2**31 - 1], dtype="<i4")
    tokens.tofile(tmp_path / "tokens.i32")
    np.testing.assert_array_equal(load_dump(tmp_path / "tokens.i32", kind="tokens"), tokens)


def test_npy_and_npz_dumps_are_read_and_squeezed(tmp_path: Path) -> None:
    pcm = pcm_samples(1000)
    np.save(tmp_path / "pcm.npy", pcm[None, :])  # (1, L) as torch emits tts_speech
    assert load_dump(tmp_path / "pcm.npy", kind="pcm").shape == (1000,)
    np.savez(tmp_path / "stages.npz", mel=mel_frames(10), tokens=np.arange(5, dtype=np.int64))
    assert load_dump(tmp_path / "stages.npz", kind="mel", cols=80, stage="mel").shape == (10, 80)
    tokens = load_dump(tmp_path / "stages.npz", kind="tokens")  # member defaults to the kind
    assert tokens.dtype == np.int64 and tokens.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(EquivalenceError, match=r"no array named 'pcm'.*\['mel', 'tokens'\]"):
        load_dump(tmp_path / "stages.npz", kind="pcm", stage="pcm")


def _bad_dump(tmp_path: Path, case: str) -> tuple[Path, str, int | None]:
    """Write one kind of broken dump; return (path, kind, cols)."""
    if case == "truncated":
        path = tmp_path / "pcm.f32"
        path.write_bytes(np.ones(10, "<f4").tobytes()[:-1])
        return path, "pcm", None
    if case == "partial_row":
        path = tmp_path / "mel.f32"
        np.ones(80 * 3 + 7, "<f4").tofile(path)
        return path, "mel", 80
    if case == "int_as_mel":
        path = tmp_path / "mel.i32"
        np.ones(160, "<i4").tofile(path)
        return path, "mel", 80
    if case == "npy_int_as_pcm":
        path = tmp_path / "pcm.npy"
        np.save(path, np.ones(10, dtype=np.int16))
        return path, "pcm", None
    if case == "npy_float_as_tokens":
        path = tmp_path / "tokens.npy"
        np.save(path, np.ones(10, dtype=np.float32))
        return path, "tokens", None
    if case == "nan":
        path = tmp_path / "mel.f32"
        mel = mel_frames(4)
        mel[2, 79], mel[3, 0] = np.nan, np.nan
        mel.tofile(path)
        return path, "mel", 80
    if case == "inf":
        path = tmp_path / "pcm.npy"
        np.save(path, np.array([0.0, np.inf, -np.inf], dtype=np.float32))
        return path, "pcm", None
    if case == "empty":
        path = tmp_path / "pcm.f32"
        path.write_bytes(b"")
        return path, "pcm", None
    if case == "missing":
        return tmp_path / "pcm.f32", "pcm", None
    if case == "corrupt_npy":
        path = tmp_path / "mel.npy"
        path.write_bytes(b"\x93NUMPY garbage")
        return path, "mel", 80
    if case == "transposed_mel":
        path = tmp_path / "mel.npy"
        np.save(path, mel_frames(30).T)
        return path, "mel", 80
    raise ValueError(case)


BAD_CASES = {
    "truncated": r"39 bytes is not a multiple of 4.*truncated",
    "partial_row": r"247 values is not a whole number of rows of 80 \(7 left over\)",
    "int_as_mel": r"\.i32 file holds int32 values but a mel stage needs float32",
    "npy_int_as_pcm": r"dtype int16 but a pcm stage needs floating point",
    "npy_float_as_tokens": r"dtype float32 but a tokens stage needs integer ids",
    "nan": r"2 NaN and 0 Inf values among 320; first at index \(2, 79\)",
    "inf": r"0 NaN and 2 Inf values among 3; first at index \(1,\)",
    "empty": r"the file is empty \(0 bytes\)",
    "missing": r"does not exist",
    "corrupt_npy": r"not a readable \.npy file",
    "transposed_mel": r"shape \(80, 30\).*expected cols=80 .*transpose",
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_dump_gives_a_message_naming_stage_and_file(tmp_path: Path, case: str) -> None:
    path, kind, cols = _bad_dump(tmp_path, case)
    with pytest.raises(EquivalenceError) as caught:
        load_dump(path, kind=kind, cols=cols)
    message = str(caught.value)
    assert f"stage {path.stem!r}" in message and str(path) in message
    assert caught.match(BAD_CASES[case])


def test_every_bad_case_is_covered() -> None:
    assert len(BAD_CASES) == 11


# --- directories ---------------------------------------------------------------------------------


def _write_runtime(directory: Path, *, mel_scale: float = 1.0, corrupt_token: bool = False) -> None:
    directory.mkdir()
    tokens = np.arange(100, dtype="<i4") % 6561
    if corrupt_token:
        tokens[60] = 4242
    tokens.tofile(directory / "tokens.i32")
    (mel_frames() * np.float32(mel_scale)).astype("<f4").tofile(directory / "mel.f32")
    np.save(directory / "pcm.npy", pcm_samples())


def test_compare_dirs_pairs_stages_and_reports_the_worst(tmp_path: Path) -> None:
    _write_runtime(tmp_path / "ref")
    _write_runtime(tmp_path / "cand", mel_scale=1.03)
    (tmp_path / "cand" / "README.txt").write_text("dumped by the C++ port")
    np.save(tmp_path / "cand" / "encoder_out.npy", np.ones(3, dtype=np.float32))
    report = compare_dirs(tmp_path / "ref", tmp_path / "cand", load_equivalence_plan(PLAN_FILE))
    assert [s.stage for s in report.stages] == ["tokens", "mel", "pcm"]
    assert [s.band for s in report.stages] == ["GREEN", "YELLOW", "GREEN"]
    assert report.band == "YELLOW" and report.passed
    assert report.stages[1].rel == pytest.approx(0.03, rel=1e-5)
    assert len(report.stages[1].drift_rel) == 8
    assert [s.stage for s in report.skipped] == ["logits"]
    assert report.unplanned == ("cand:encoder_out.npy",)
    assert report.ignored_files == ("cand:README.txt",)


def test_compare_dirs_fails_on_token_divergence(tmp_path: Path) -> None:
    _write_runtime(tmp_path / "ref")
    _write_runtime(tmp_path / "cand", corrupt_token=True)
    report = compare_dirs(tmp_path / "ref", tmp_path / "cand", EquivalencePlan())
    assert report.band == "RED" and not report.passed
    assert report.stages[0].first_divergence == 60


def test_compare_dirs_collects_every_problem(tmp_path: Path) -> None:
    _write_runtime(tmp_path / "ref")
    _write_runtime(tmp_path / "cand")
    (tmp_path / "cand" / "tokens.i32").unlink()
    np.save(tmp_path / "cand" / "mel.npy", mel_frames())  # second form of the mel stage
    np.save(tmp_path / "cand" / "pcm.npy", pcm_samples(23_000))
    with pytest.raises(EquivalenceError) as caught:
        compare_dirs(tmp_path / "ref", tmp_path / "cand", EquivalencePlan())
    message = str(caught.value)
    assert message.startswith("3 stage(s) cannot be compared")
    assert "'tokens' is required but missing: no tokens.i32, tokens.npy" in message
    assert "'mel': cand has it in 2 places" in message
    assert "'pcm' (pcm): ref shape (24000,) != cand shape (23000,)" in message


def test_compare_dirs_refuses_same_or_missing_directory(tmp_path: Path) -> None:
    _write_runtime(tmp_path / "ref")
    with pytest.raises(EquivalenceError, match="same directory"):
        compare_dirs(tmp_path / "ref", tmp_path / "ref", EquivalencePlan())
    with pytest.raises(EquivalenceError, match="nowhere does not exist"):
        compare_dirs(tmp_path / "ref", tmp_path / "nowhere", EquivalencePlan())


def test_length_tolerant_plan_and_npz_dumps(tmp_path: Path) -> None:
    (tmp_path / "ref").mkdir()
    (tmp_path / "cand").mkdir()
    pcm = pcm_samples()
    np.savez(tmp_path / "ref" / "dump.npz", pcm=pcm, extra=pcm)
    pcm[:-960].tofile(tmp_path / "cand" / "pcm.f32")
    plan = EquivalencePlan(stages=(StageSpec(name="pcm", kind="pcm", allow_length_mismatch=True),))
    report = compare_dirs(tmp_path / "ref", tmp_path / "cand", plan)
    assert report.band == "GREEN" and report.stages[0].cand_len == 23_040
    assert report.unplanned == ("ref:dump.npz[extra]",)
    assert set(discover_dumps(tmp_path / "ref").stages) == {"pcm", "extra"}


def test_default_plan_file_matches_the_schema_defaults() -> None:
    assert PLAN_FILE.read_text().startswith("# voxledger equivalence compare REF CAND --plan plans/equivalence-default.yaml")
    assert load_equivalence_plan(PLAN_FILE) == EquivalencePlan()


def test_invalid_plan_file_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("bands: {green_max_rel: 0.5, yellow_max_rel: 0.1}\ndrift_windows: -1\n")
    with pytest.raises(PlanError, match=r"plan\.yaml is invalid:\n.*bands.*green_max_rel") as caught:
        load_equivalence_plan(path)
    assert "drift_windows" in str(caught.value)


# --- properties ----------------------------------------------------------------------------------

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=60, deadline=None)
@given(
    ref=hnp.arrays(np.float64, st.integers(1, 40), elements=finite).filter(lambda a: np.abs(a).max() > 1e-3),
    noise=st.integers(0, 2**32 - 1),
    size=st.floats(1e-4, 1.0),
    scale=st.floats(1e-6, 1e6),
)
def test_rel_is_invariant_to_scaling_both_sides(ref: np.ndarray, noise: int, size: float, scale: float) -> None:
    # |steps| >= size/2 of the peak keeps float64 cancellation far below the 1e-9 tolerance.
    rng = np.random.default_rng(noise)
    steps = rng.uniform(0.5, 1.0, ref.shape) * rng.choice([-1.0, 1.0], ref.shape)
    cand = ref + size * float(np.abs(ref).max()) * steps
    base = compare_stage("x", "logits", ref, cand, BANDS)
    scaled = compare_stage("x", "logits", ref * scale, cand * scale, BANDS)
    assert math.isclose(scaled.rel, base.rel, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    ref=hnp.arrays(np.float64, st.integers(1, 40), elements=finite).filter(lambda a: np.abs(a).max() > 1e-3),
    index=st.integers(0, 39),
    sizes=st.lists(st.floats(0.0, 2.0), min_size=2, max_size=6),
)
def test_band_is_monotone_in_perturbation_size(ref: np.ndarray, index: int, sizes: list[float]) -> None:
    peak = float(np.abs(ref).max())
    bands = []
    for size in sorted(sizes):
        cand = ref.copy()
        cand[index % ref.size] += size * peak
        bands.append(BAND_ORDER[compare_stage("x", "pcm", ref, cand, BANDS).band])
    assert bands == sorted(bands)
