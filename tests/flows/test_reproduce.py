"""``voxledger reproduce``: same machine gives ``exact``; another thread count, tampered inputs, code
drift and a planted nondeterminism are each caught and said. Runs on a copy of the session's
pipeline home (``first_run``), so the shared home is never written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.stores.test_scrub import _rot, _settle
from voxledger.cli import main
from voxledger.dashboards.report import build_dashboard
from voxledger.flows.reproduce import reproduce
from voxledger.schemas.audit import AuditReceipt
from voxledger.schemas.base import CodeIdentity
from voxledger.schemas.errors import ReproductionError
from voxledger.schemas.reproduction import ReproductionReceipt
from voxledger.stores.hashing import hash_files
from voxledger.stores.home import Home
from voxledger.stores.trees import load_manifest

pytestmark = pytest.mark.prefect

STAGES = ("audit", "train_base", "train_adapter", "promote", "evaluate", "package")
PACKAGE_OUTPUTS = {
    "package",
    "reload",
    "merged_export",
    "equivalence:reference_dumps",
    "equivalence:candidate_dumps",
    "equivalence:inventory",
    "equivalence:stage:mel",
    "equivalence:stage:pcm",
}


@pytest.fixture(scope="module")
def copy(first_run: tuple[Path, Path, dict, float], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:  # type: ignore[type-arg]
    """A copy of the session's pipeline home (receipts, store, catalog) and the run's summary."""
    home, _plans, summary, _ = first_run
    dest = tmp_path_factory.mktemp("repro") / "h"
    shutil.copytree(home, dest, ignore=shutil.ignore_patterns("prefect", "*.lock", "pipeline.holder"))
    return dest, summary


def _receipts(home: Path) -> set[str]:
    return set(Home(home).receipts.ids())


def _run(home: Path, rid: str, corpus: Path, **kwargs: Any) -> ReproductionReceipt:
    out = reproduce(str(home), rid, str(corpus), **kwargs)
    return out.receipt


def test_pipeline_reproduces_each_stage_exactly_on_the_same_machine(copy: tuple[Path, dict], corpus: Path) -> None:  # type: ignore[type-arg]
    """The pipeline run is reproduced stage by stage (audit, both trainings, promotion, evaluation,
    package), each from the original's inputs in its own scratch home; the packet export is named
    as not re-run (blinded with a fresh secret by design)."""
    home, summary = copy
    before = _receipts(home)
    r = _run(home, summary["pipeline_receipt"], corpus)
    stages = {c.name.removeprefix("stage:"): c for c in r.result.comparisons}
    assert tuple(stages) == STAGES, list(stages)
    assert r.result.verdict == "exact", (r.result.reason, [c for c in r.result.comparisons if c.verdict != "exact"])
    assert r.parameters.stage == "pipeline" and r.parameters.rerun is None and r.parameters.environment_differences == ()
    assert [n.split(":")[0] for n in r.parameters.stages_not_rerun] == ["export_packets"], r.parameters.stages_not_rerun
    assert "fresh secret" in r.parameters.stages_not_rerun[0] and "export_packets" in r.result.reason
    assert r.parameters.deep is False and r.parameters.stat_cache_trusted is not None  # what the stat caches vouched for is recorded
    # the original home gained one reproduction per stage and the run's own (the re-runs live in scratch homes)
    h = Home(home)
    added = _receipts(home) - before
    assert len(added) == len(STAGES) + 1 and {h.receipts.read(a).kind for a in added} == {"reproduction"}  # type: ignore[attr-defined]
    walls: dict[str, float] = {}
    for stage in STAGES:
        rid = summary[stage]["receipt_id"]
        one = h.receipts.read(r.input(f"reproduction:{stage}").sha256, ReproductionReceipt)
        assert stages[stage].original_sha256 == rid and stages[stage].rerun_sha256 == one.parameters.rerun
        assert one.parameters.original == rid and one.input("original").sha256 == rid and one.parameters.stage == stage
        assert one.result.verdict == "exact", (stage, one.result.reason, [c for c in one.result.comparisons if c.verdict != "exact"])
        assert {c.verdict for c in one.result.comparisons} == {"exact"} and one.result.comparisons
        assert one.parameters.environment_differences == ()
        walls[stage] = one.result.rerun_wall_s
        assert one.parameters.stat_cache_trusted is not None and one.parameters.stat_cache_trusted <= r.parameters.stat_cache_trusted
    package = h.receipts.read(r.input("reproduction:package").sha256, ReproductionReceipt)
    assert {c.name for c in package.result.comparisons} == PACKAGE_OUTPUTS
    print("reproduce wall s:", {k: round(v, 1) for k, v in walls.items()}, "pipeline", r.result.rerun_wall_s)


def test_equivalence_reproduces_exactly_and_is_judged_by_its_recorded_bands(copy: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    """The package's merged-export check re-run from its recorded dumps (no corpus needed); then, plain
    comparison: a stage that moves inside its recorded band, and one that leaves it."""
    from voxledger.schemas.equivalence_receipt import EquivalenceReceipt
    from voxledger.schemas.package import PackageReceipt
    from voxledger.tasks.reproduction.packaging import compare_equivalence

    home, summary = copy
    h = Home(home)
    eq_rid = h.receipts.read(summary["package"]["receipt_id"], PackageReceipt).result.equivalence_receipt
    assert eq_rid is not None
    r = reproduce(str(home), eq_rid).receipt
    assert r.result.verdict == "exact", r.result.reason
    assert r.parameters.stage == "equivalence" and r.parameters.environment_differences == ()
    assert {c.name: c.verdict for c in r.result.comparisons} == {
        n.removeprefix("equivalence:"): "exact" for n in PACKAGE_OUTPUTS if n.startswith("equivalence:")
    }
    assert json.loads(h.blobs.get_bytes(r.subject("rerun_receipt").sha256))["kind"] == "equivalence"

    original = h.receipts.read(eq_rid, EquivalenceReceipt)
    green = original.report.bands.green_max_rel
    pcm = next(s for s in original.report.stages if s.stage == "pcm")

    def moved(rel: float, band: str) -> list[Any]:
        stages = tuple(s.model_copy(update={"rel": rel, "band": band}) if s.stage == "pcm" else s for s in original.report.stages)
        rerun = original.model_copy(update={"report": original.report.model_copy(update={"stages": stages})})
        return [c for c in compare_equivalence(original, rerun) if c.verdict != "exact"]

    inside = moved(green / 2 if pcm.rel != green / 2 else green / 4, "GREEN")
    assert [(c.name, c.verdict) for c in inside] == [("stage:pcm", "within_bands")], inside
    assert "band GREEN kept" in inside[0].reason and f"GREEN <= {green:g}" in inside[0].reason
    outside = moved(green * 2, "YELLOW")
    assert [(c.name, c.verdict) for c in outside] == [("stage:pcm", "differs")], outside
    assert "band GREEN -> YELLOW" in outside[0].reason


def test_planted_change_in_the_merged_export_differs_exactly_where_it_acts(
    copy: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[type-arg]
    """A planted fault in the merged export (its mel projection scaled by 1 + 3e-2 before writing, as a
    merge kernel that rounds differently might): the merged tree, the merged runtime's probe dumps and
    the stages compared from them differ (mel GREEN -> YELLOW, pcm GREEN -> RED: the re-run's package
    fails its check, recorded, then judged); the package tar, the fresh-process reload, the adapter's
    dumps and the plan inventory stay exact."""
    import torch

    from voxledger.tasks.backends.tiny.backend import TinyBackend

    real = TinyBackend.export_merged

    def planted(self: TinyBackend, loaded: Any, out_dir: Path) -> None:
        with torch.no_grad():
            loaded.model.mel_out.weight.mul_(1.0 + 3e-2)
        real(self, loaded, out_dir)

    monkeypatch.setattr(TinyBackend, "export_merged", planted)
    home, summary = copy
    r = reproduce(str(home), summary["package"]["receipt_id"]).receipt
    verdicts = {c.name: c.verdict for c in r.result.comparisons}
    assert r.result.verdict == "differs", r.result.reason
    assert set(verdicts) == PACKAGE_OUTPUTS, verdicts
    changed = {"merged_export", "equivalence:candidate_dumps", "equivalence:stage:mel", "equivalence:stage:pcm"}
    assert {n for n, v in verdicts.items() if v == "differs"} == changed, r.result.comparisons
    assert {n for n, v in verdicts.items() if v == "exact"} == PACKAGE_OUTPUTS - changed
    assert "band GREEN -> " in next(c.reason for c in r.result.comparisons if c.name == "equivalence:stage:pcm")


def test_another_thread_count_is_never_exact(copy: tuple[Path, dict], corpus: Path) -> None:  # type: ignore[type-arg]
    """The plans train with 1 thread; the re-run is forced to 2 (a machine with more cores)."""
    home, summary = copy
    for stage in ("train_adapter", "evaluate"):
        r = _run(home, summary[stage]["receipt_id"], corpus, threads=2)
        assert r.result.verdict in ("within_bands", "differs"), (stage, r.result.reason)
        assert r.parameters.torch_threads == 2
        if stage == "train_adapter":  # the training plan records its thread count
            assert [(d.field, d.recorded, d.here) for d in r.parameters.environment_differences] == [("torch_threads", "1", "2")]
        else:  # an evaluation records none: the forced count is still named
            assert [(d.field, d.recorded, d.here) for d in r.parameters.environment_differences] == [("torch_threads", None, "2")]
        assert "torch_threads" in r.result.reason
        assert all(c.reason for c in r.result.comparisons)


def test_tampered_input_is_refused_naming_it(copy: tuple[Path, dict], corpus: Path, tmp_path: Path) -> None:  # type: ignore[type-arg]
    home, summary = copy
    local = tmp_path / "h"
    shutil.copytree(home, local)
    h = Home(local)
    run = h.receipts.read(summary["train_base"]["receipt_id"])
    features = run.input("features").sha256
    obj = h.blobs.path_of(features)
    obj.chmod(0o644)
    obj.write_bytes(b"not the features manifest")
    with pytest.raises(ReproductionError, match=f"input 'features' {features} has 1 object"):
        _run(local, summary["train_base"]["receipt_id"], corpus)
    # a package: one file of the checkpoint it packages, changed in place, is refused by name (no corpus needed)
    package = h.receipts.read(summary["package"]["receipt_id"])
    tree = package.input("adapter_checkpoint").sha256
    entry = load_manifest(h.blobs, tree).entries[0].sha256
    damaged = h.blobs.path_of(entry)
    damaged.chmod(0o644)
    damaged.write_bytes(b"not the adapter")
    with pytest.raises(ReproductionError, match=f"{tree} has 1 object\\(s\\) damaged .*e.g. {entry}"):
        reproduce(str(local), summary["package"]["receipt_id"])
    # a changed corpus file is refused by name before any work
    changed = tmp_path / "c"
    shutil.copytree(corpus, changed)
    wav = sorted((changed / "wavs").glob("spk_a_*.wav"))[0]
    data = bytearray(wav.read_bytes())
    data[-1] ^= 1
    wav.write_bytes(bytes(data))
    with pytest.raises(ReproductionError, match=f"audio file wavs/{wav.name}"):
        _run(home, summary["train_adapter"]["receipt_id"], changed)
    # the same change under an unchanged stat (the stat cache vouching for the old bytes) is refused with --deep
    wav.write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 1]))
    _settle()
    hash_files([wav], cache=Home(home).stat_cache)
    _rot(Home(home), wav)
    with pytest.raises(ReproductionError, match=f"audio file wavs/{wav.name}"):
        _run(home, summary["train_adapter"]["receipt_id"], changed, deep=True)


def test_code_drift_is_refused_unless_allowed_and_then_recorded(copy: tuple[Path, dict], corpus: Path, tmp_path: Path) -> None:  # type: ignore[type-arg]
    """An audit receipt written by other code (its recorded code identity differs from this checkout's)."""
    home, summary = copy
    local = tmp_path / "h"
    shutil.copytree(home, local)
    h = Home(local)
    audit = h.receipts.read(summary["audit"]["receipt_id"], AuditReceipt)
    other = CodeIdentity(source_sha256="0" * 64, git_commit="0" * 40, git_dirty=False)
    older = audit.model_copy(update={"environment": audit.environment.model_copy(update={"code": other})})
    rid = h.record(older)
    with pytest.raises(ReproductionError, match="--allow-code-drift"):
        _run(local, rid, corpus)
    r = _run(local, rid, corpus, allow_code_drift=True)
    assert r.parameters.code_drift_allowed is True
    assert [d.field for d in r.parameters.environment_differences] == ["code"]
    assert r.result.verdict == "within_bands"  # identical outputs, but from other code: never `exact`
    assert {c.verdict for c in r.result.comparisons} == {"exact"}


def test_planted_nondeterminism_differs_exactly_where_it_acts(
    copy: tuple[Path, dict], corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[type-arg]
    """VOXLEDGER_TEST_UNSEEDED_INIT draws a fresh model's initial weights from an unseeded generator:
    the base training's outputs differ; the adapter training (which starts from the stored base)
    and the audit do not draw from it and stay exact."""
    home, summary = copy
    monkeypatch.setenv("VOXLEDGER_TEST_UNSEEDED_INIT", "1")
    base = _run(home, summary["train_base"]["receipt_id"], corpus)
    assert base.result.verdict == "differs", base.result.reason
    verdicts = {c.name: c.verdict for c in base.result.comparisons}
    assert verdicts["best"] == verdicts["last"] == "differs" and verdicts["cv_loss_curve"] != "exact", base.result.comparisons
    assert set(verdicts) == {"best", "last", "cv_loss_curve"}
    for stage in ("train_adapter", "audit"):
        r = _run(home, summary[stage]["receipt_id"], corpus)
        assert r.result.verdict == "exact", (stage, r.result.reason)


def test_cli_bad_receipt_is_one_line_and_a_verdict_prints(copy: tuple[Path, dict], corpus: Path) -> None:  # type: ignore[type-arg]
    home, summary = copy
    res = CliRunner().invoke(main, ["--home", str(home), "reproduce", "zz"])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1 and "zz" in res.output, res.output
    packets = summary["export_packets"]["receipt_id"]
    res = CliRunner().invoke(main, ["--home", str(home), "reproduce", packets[:12], "--corpus", str(corpus)])
    assert (
        res.exit_code != 0
        and "is a packet_set receipt, not audit or base_import or training_run or promotion or evaluation or package" in res.output
    ), res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
    res = CliRunner().invoke(main, ["--home", str(home), "reproduce", summary["train_base"]["receipt_id"][:12]])
    assert res.exit_code != 0 and "--corpus" in res.output and "Traceback" not in res.output, res.output
    res = CliRunner().invoke(main, ["--home", str(home), "reproduce", summary["audit"]["receipt_id"][:12], "--corpus", str(corpus)])
    assert res.exit_code == 0, res.output
    assert "verdict: exact" in res.output
    # provenance and the dashboard list the recorded verdicts
    res = CliRunner().invoke(main, ["--home", str(home), "provenance", "reproductions", summary["audit"]["receipt_id"][:12], "--json"])
    rows = json.loads(res.output)
    assert res.exit_code == 0 and rows and {r["verdict"] for r in rows} == {"exact"} and {r["stage"] for r in rows} == {"audit"}
    page = build_dashboard(Home(home).catalog, home.parent / "dash.html").read_text()
    section = page.split('id="reproductions"')[1]
    rows = section.split("</table>")[0]
    assert 'class="reproductions"' in section and "<td>exact</td>" in rows and "<td>audit</td>" in rows, rows
    assert f"title='{summary['audit']['receipt_id']}'" in rows
    assert os.environ.get("VOXLEDGER_REPRODUCE_THREADS") is None


def test_package_verify_reproduce_re_derives_the_evaluation_claims(copy: tuple[Path, dict], corpus: Path) -> None:  # type: ignore[type-arg]
    home, summary = copy
    package = Home(home).receipts.read(summary["package"]["receipt_id"]).subject("package").sha256
    res = CliRunner().invoke(main, ["--home", str(home), "package", "verify", package, "--reproduce", "--corpus", str(corpus), "--json"])
    assert res.exit_code == 0, res.output
    claims = json.loads(res.output)["claims"]
    trust = json.loads(res.output)["stat_cache"]
    assert trust["deep"] is False and trust["trusted_files"] >= 0
    assert {c["evaluation"] for c in claims} == {summary["evaluate"]["receipt_id"]}
    assert claims and all(c["holds"] for c in claims)
    assert {c["claim"] for c in claims} >= {"prompt_agreement", "metric:adapter:wer:whisper_en"}


def test_evaluation_band_names_exactly_the_candidate_that_moved(copy: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    """Plain comparison, no re-run: the adapter's clips and one of its metrics changed, nothing else."""
    from voxledger.schemas.evaluation import EvaluationReceipt
    from voxledger.schemas.reproduction import ReproductionBands
    from voxledger.tasks.reproduction.compare import compare_evaluation, overall

    home, summary = copy
    h = Home(home)
    original = h.receipts.read(summary["evaluate"]["receipt_id"], EvaluationReceipt)
    moved = [s.model_copy(update={"sha256": "f" * 64}) if s.role == "audio:adapter" else s for s in original.subjects]
    summaries = []
    for s in original.result.summaries:
        if s.candidate == "adapter":
            wer = s.overall["wer:whisper_en"]
            s = s.model_copy(update={"overall": {**s.overall, "wer:whisper_en": wer.model_copy(update={"mean": wer.mean + 0.5})}})
        summaries.append(s)
    rerun = original.model_copy(
        update={"subjects": tuple(moved), "result": original.result.model_copy(update={"summaries": tuple(summaries)})}
    )
    got = {c.name: c for c in compare_evaluation(original, rerun, h.blobs.get_bytes, ReproductionBands())}
    assert {n for n, c in got.items() if c.verdict != "exact"} == {"audio:adapter#0", "audio:adapter#1", "metric:adapter:wer:whisper_en"}
    assert "candidate adapter's metrics leave the original's intervals" in got["audio:adapter#0"].reason
    assert "no interval" in got["metric:adapter:wer:whisper_en"].reason  # 2 prompts: the original recorded no interval
    assert overall(list(got.values()), environment_differs=False)[0] == "differs"
    assert overall([got["audio:base#0"]], environment_differs=True)[0] == "within_bands"
    assert overall([got["audio:base#0"]], environment_differs=False)[0] == "exact"


def test_a_rerun_that_fails_before_recording_differs_and_is_recorded(copy: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[type-arg]
    """The comparison raises here (as it does for dumps of unequal shapes) before its receipt is written:
    the reproduction is still recorded, `differs`, with the failure as its reason and no re-run receipt."""
    from voxledger.schemas.errors import EquivalenceError
    from voxledger.schemas.package import PackageReceipt
    from voxledger.tasks.stages import equivalence as stage

    def planted(*_: Any, **__: Any) -> Any:
        raise EquivalenceError("stage 'mel' (mel): ref shape (242, 80) != cand shape (257, 80)")

    monkeypatch.setattr(stage, "compare_dirs", planted)
    home, summary = copy
    eq_rid = Home(home).receipts.read(summary["package"]["receipt_id"], PackageReceipt).result.equivalence_receipt
    assert eq_rid is not None
    before = _receipts(home)
    r = reproduce(str(home), eq_rid).receipt
    assert r.result.verdict == "differs" and r.parameters.rerun is None and not r.subjects
    assert [(c.name, c.verdict) for c in r.result.comparisons] == [("rerun", "differs")]
    assert "failed before recording a receipt: stage 'mel' (mel): ref shape (242, 80) != cand shape" in r.result.comparisons[0].reason
    assert len(_receipts(home) - before) == 1
