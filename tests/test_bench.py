"""``voxledger bench`` stage sections: smoke runs through the real entry point, and the pieces.

Speed is never asserted here (it belongs to the benchmark's output): a smoke run checks that
every figure is present, finite, and positive where it is a rate, a size or a time.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import soundfile as sf
from click.testing import CliRunner

from voxledger.cli import main

BIN = Path(sys.executable).parent / "voxledger"
# overheads are differences of two timed runs: noise can make them negative, so only finite
DIFFERENCES = ("extra wall", "overhead", "- direct call", "the rest", "- the same command warm", "until it says")


def bench_json(home: Path, sections: str, timeout_s: int = 300) -> list[dict[str, Any]]:
    """Run the installed ``voxledger`` command; the figures it printed as JSON."""
    proc = subprocess.run([str(BIN), "--home", str(home), "bench", "--quick", "--only", sections, "--json"],
                          capture_output=True, text=True, timeout=timeout_s, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("[") :])  # type: ignore[no-any-return]


def check_figures(figures: list[dict[str, Any]], expected: dict[str, str]) -> None:
    """Each expected name prefix names exactly one figure with that unit; values are sane."""
    for prefix, unit in expected.items():
        found = [f for f in figures if f["name"].startswith(prefix)]
        assert len(found) == 1, f"{prefix!r}: {[f['name'] for f in figures]}"
        assert found[0]["unit"] == unit, found[0]
    for f in figures:
        assert math.isfinite(f["value"]), f
        if not any(word in f["name"] for word in DIFFERENCES):
            assert f["value"] > 0, f


AUDIT = {"audit 300 x 1 s clips, first pass": "utterances/s", "audit first pass: peak RSS": "MB",
         "audit 300 clips, cached pass": "utterances/s", "audit cached pass: peak RSS": "MB",
         "audit process RSS after imports": "MB", "audit cached / first pass time": "x",
         "audit ASR agreement, greedy": "s/clip", "audit ASR agreement, beam 5": "s/clip",
         "audit ASR agreement greedy / beam 5 time": "x",
         "audit re-run after one transcript fix, 4 spoken clips, ASR agreement on: a fresh home": "s",
         "audit re-run after one transcript fix, 4 spoken clips, ASR agreement on: the same home": "s",
         "audit re-run: memo / fresh home time": "x"}  # fmt: skip


def test_quick_audit_and_an_empty_home(tmp_path: Path) -> None:
    figures = bench_json(tmp_path / "empty-home", "audit,demo")
    audit = [f for f in figures if f["name"].startswith("audit")]
    check_figures(audit, AUDIT)
    assert len(audit) == len(AUDIT) == 12
    (demo,) = [f for f in figures if f not in audit]
    assert "none yet" in demo["name"] and demo["value"] == 0 and demo["unit"] == "runs"
    assert not (tmp_path / "empty-home").exists()  # reading a home never creates one


def _record_run(home: Any, walls: dict[str, float], cached: bool) -> str:
    from voxledger.schemas.pipeline import PipelineParameters, PipelineRunReceipt, StageRecord
    from voxledger.tasks.receipting import build_receipt

    stages = tuple(StageRecord(stage=s, receipt_id=None, cached=cached, wall_s=w, status="succeeded") for s, w in walls.items())  # type: ignore[arg-type]
    receipt = build_receipt(PipelineRunReceipt, flow="pipeline", task="pipeline", started_at=datetime.now(UTC),
                            parameters=PipelineParameters(plan_sha256="a" * 64, corpus_name="c", stage_plans={}), stages=stages)  # fmt: skip
    return home.record(receipt)


def test_demo_section_reads_the_latest_pipeline_run(tmp_path: Path) -> None:
    from voxledger.stores.home import Home

    home = Home(tmp_path / "h")
    _record_run(home, {"audit": 2.0, "train_base": 30.0, "evaluate": 8.0}, cached=False)
    latest = _record_run(home, {"audit": 0.5, "train_base": 0.25, "evaluate": 0.25}, cached=True)
    result = CliRunner().invoke(main, ["--home", str(home.root), "bench", "--only", "demo", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    got = {f["name"]: f["value"] for f in json.loads(result.output)}
    tag = latest[:12]
    assert got[f"pipeline runs in {home.root}"] == 2
    assert got[f"latest run {tag}: audit (cached, succeeded)"] == 0.5
    assert got[f"latest run {tag}: train_base (cached, succeeded)"] == 0.25
    assert got[f"latest run {tag}: all stages"] == 1.0
    (ratio,) = [v for k, v in got.items() if k.startswith("latest (3 of 3 stages cached) / first run")]
    assert ratio == pytest.approx(1.0 / 40.0)
    assert [v for k, v in got.items() if k.startswith("first run ")] == [40.0]
    assert len(got) == 7


def test_unknown_section_is_refused() -> None:
    result = CliRunner().invoke(main, ["bench", "--only", "audit,nope"])
    assert result.exit_code != 0
    assert "unknown section(s) nope" in result.output and "prefect" in result.output


def test_noise_corpus_is_valid_distinct_and_passes_the_audit(tmp_path: Path) -> None:
    from voxledger.bench_sections import audit_policy, build_noise_corpus
    from voxledger.stores.home import Home
    from voxledger.tasks.stages.audit import audit_corpus_fn

    corpus = build_noise_corpus(tmp_path / "c", 120)
    rows = [json.loads(line) for line in (corpus / "manifest.jsonl").read_text().splitlines()]
    assert len(rows) == 120 and len({r["text"] for r in rows}) == 120
    info = sf.info(str(corpus / rows[7]["audio"]))
    assert (info.samplerate, info.channels, info.frames, info.subtype) == (16000, 1, 16000, "PCM_16")
    assert {r["split"] for r in rows} == {"train", "dev", "target_train", "target_dev", "test"}
    out = audit_corpus_fn(Home(tmp_path / "h"), corpus, audit_policy(), policy_name="bench-audit.yaml")
    assert out.receipt.result.verdict == "pass" and out.receipt.result.counts_by_code == {}


def test_stage_timers_time_real_calls_and_restore_them() -> None:
    import time

    from voxledger.bench_sections import stage_timers
    from voxledger.tasks.metrics import textmetrics

    original = textmetrics.score_text
    with stage_timers((("text", "time", "sleep"), ("text", "voxledger.tasks.metrics.textmetrics", "score_text"))) as totals:
        time.sleep(0.05)
        assert textmetrics.score_text("a cat", "a cat").wer == 0.0  # the real function still runs
    assert totals["text"] >= 0.05
    assert textmetrics.score_text is original and time.sleep.__name__ == "sleep"


TRAIN = {"train_adapter: peak RSS": "MB", "bare training loop: peak RSS": "MB",
         "receipts + checkpoints / step time": "%", "checkpoint every 2 steps vs per epoch only": "%",
         "train_adapter vs bare loop: extra wall": "%", "train_adapter vs bare loop: total wall": "x",
         "train_adapter: step time": "ms/step", "bare loop: step time": "ms/step", "train_adapter vs bare loop: step time": "x",
         "bare loop, transformers' plain sdpa attention: step time": "ms/step",
         "plain sdpa vs float32 attention product under autocast": "x",
         "demo corpus (tiny": "s", "demo corpus, 2 helpers vs 1 (identical bytes)": "x"}  # fmt: skip
PREFECT = {"prefect: first flow": "s", "prefect: empty flow": "ms", "prefect: flow of 20 trivial tasks": "ms/task",
           "direct call": "us/call", "prefect task / direct call": "x"}  # fmt: skip


@pytest.mark.slow
def test_quick_train_and_prefect(tmp_path: Path) -> None:
    figures = bench_json(tmp_path / "home", "train,prefect", timeout_s=600)
    assert len(figures) == 15 + 5 + 12
    check_figures(figures[:15], TRAIN)
    assert [(f["name"].startswith("train tiny full"), f["unit"]) for f in figures[:2]] == [(True, "utterances/s"), (True, "frames/s")]
    check_figures(figures[15:20], PREFECT)
    check_figures(figures[20:], CLI_AUDIT)
    assert not any("NOT ALL SERVED" in f["name"] for f in figures), "the warm runner did not serve the cached commands"


CLI_AUDIT = {"cli audit, first command": "s", "the same in a second new home": "s", "first command: migrated database / copied template": "x",
             "first command in a new home (copied template) - the same command warm": "s",
             "first command: seconds until it says it is starting": "s",
             "cli audit, cached, flow in the home's warm runner": "s",
             "cli audit, cached, flow in the command's own process": "s", "audit function called directly": "s",
             "cli audit cached (runner) - direct call": "s", "cli audit cached (own process) - direct call": "s",
             "importing Prefect": "s", "cli audit cached, Prefect's temporary server": "s"}  # fmt: skip


@pytest.mark.slow
def test_quick_cli_reads_beside_the_interpreter_floor(tmp_path: Path) -> None:
    figures = bench_json(tmp_path / "home", "cli")
    names = [f["name"] for f in figures]
    assert names[0] == "python -c pass (floor)" and names[-1] == "slowest read command / floor", names
    reads = figures[1:-1]
    assert {n.split(" (median")[0] for n in names[1:-1]} == {
        "voxledger --help", "voxledger query", "voxledger lineage --up", "voxledger receipt show",
        "voxledger provenance downstream", "voxledger alias history", "voxledger base list"}  # fmt: skip
    assert all(f["unit"] == "s" and 0 < f["value"] < 60 and f["goal"].startswith("< 1: ") for f in reads)
    assert figures[-1]["value"] == pytest.approx(max(f["value"] for f in reads) / figures[0]["value"])


def test_stats_round_two_scenarios_run_through_the_gate() -> None:
    from voxledger.bench_sections.stats_robust import bench_robust

    figures = bench_robust(10)  # a smoke run: the measured table is docs/statistics.md (1000 per row)
    names = [f.name for f in figures]
    prefixes = ("catastrophic 5%", "catastrophic 10%", "equal failures 5%", "equal failures 10%", "round-off constant delta",
                "identical challenger", "bounded: gate pass rate", "bounded: MUSHRA", "bounded: ACR", "3-challenger round",
                "18-way family", "listening 6 pairs", "cluster_bootstrap_t, 20 x 1", "power, demo WER rule")  # fmt: skip
    assert all(any(n.startswith(p) for n in names) for p in prefixes), names
    assert len(figures) == 65 and all(math.isfinite(f.value) and 0 <= f.value <= 100 for f in figures)
    by = {f.name: f.value for f in figures}
    assert by["round-off constant delta: estimable"] == 0 and by["identical challenger: passes any paired rule"] == 0
    assert by["bounded: gate pass rate 0.9, 20 prompts, Wilson: intervals outside the range"] == 0


def test_catalog_write_paths_time_the_same_rows(tmp_path: Path) -> None:
    """The catalog section's write figure: both paths write the same 79 rows a round (it checks the rows
    are equal before it returns) and both times are real."""
    from voxledger.bench import _insert_paths

    by_statement, by_row, n_rows = _insert_paths(tmp_path, rounds=4)
    assert n_rows == 79 and math.isfinite(by_statement) and math.isfinite(by_row) and min(by_statement, by_row) > 0


def test_quick_install_compile_times_both_ways_and_writes_the_same_bytecode(tmp_path: Path) -> None:
    figures = bench_json(tmp_path / "home", "install")
    assert [f["unit"] for f in figures] == ["s", "s", "x", "files"]
    assert all(f["value"] > 0 for f in figures[:3])
    assert figures[2]["value"] == pytest.approx(figures[0]["value"] / figures[1]["value"], rel=0.01)
    assert figures[3]["value"] == 0 and figures[3]["goal"] == "0: ok", figures[3]  # identical .pyc files either way


FEATURES = {"bind a training stage's features, 5 clips without alignment files: aligning every clip": "s",
            "bind a training stage's features, 5 clips without alignment files: from the home's memo": "s",
            "features binding: memo pass speed-up": "x", "features binding: aligning, per clip": "ms/clip",
            "features binding: from the memo, per clip": "ms/clip"}  # fmt: skip


def test_the_features_section_aligns_then_reads_the_memo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The section's measured pass, twice in this process (the section spawns one process each):
    the first aligns every clip and files it, the second reads every clip back, same digest."""
    from voxledger.bench_sections.features import bind_child
    from voxledger.schemas.training import DEFAULT_BACKEND
    from voxledger.tasks.backends.tiny import data
    from voxledger.tasks.corpus.demo import build_voice_corpus

    corpus, clips = build_voice_corpus(tmp_path / "voice", size="tiny")
    monkeypatch.setattr(data, "_DURATIONS", {})
    first = bind_child(str(tmp_path / "h"), str(corpus), DEFAULT_BACKEND)
    monkeypatch.setattr(data, "_DURATIONS", {})  # as in a new process
    memo = bind_child(str(tmp_path / "h"), str(corpus), DEFAULT_BACKEND)
    assert (first["misses"], first["hits"], memo["misses"], memo["hits"]) == (clips, 0, 0, clips)
    assert memo["features"] == first["features"] and first["clips"] == clips == 5


@pytest.mark.slow
def test_quick_features_section(tmp_path: Path) -> None:
    check_figures(bench_json(tmp_path / "home", "features"), FEATURES)


@pytest.mark.slow
def test_quick_pipeline_rerun_section(tmp_path: Path) -> None:
    figures = bench_json(tmp_path / "home", "pipeline-rerun", timeout_s=900)
    check_figures(figures, {
        "pipeline run, 45-clip voice, init's plans cut to a smoke run: first run": "s",
        "pipeline run, 45-clip voice, init's plans cut to a smoke run: every stage cached, the home's warm runner": "s",
        "pipeline run, 45-clip voice, init's plans cut to a smoke run: every stage cached, flow in the command's own": "s",
        "cached pipeline run: runner / own process time": "x", "python -c pass": "s"})  # fmt: skip
    assert len(figures) == 5 and not any("NOT SERVING" in f["name"] for f in figures)


def test_a_bare_goal_gets_its_verdict_from_the_value() -> None:
    from voxledger.bench_sections.common import Figure

    cases = [("<= 5", 6.2, "<= 5: SHORT"), ("<= 5", 5.0, "<= 5: ok"), ("< 1", 1.0, "< 1: SHORT"), (">= 1.5", 2.0, ">= 1.5: ok"),
             ("> 10", 9.0, "> 10: SHORT"), ("3-7", 7.0, "3-7: ok"), ("3-7", 2.9, "3-7: SHORT"), ("< 1: ok", 0.2, "< 1: ok"),
             ("0: DIFFER", 3.0, "0: DIFFER"), ("", 1.0, "")]  # fmt: skip
    assert [Figure("x", value, "s", goal).goal for goal, value, _ in cases] == [want for _, _, want in cases]


@pytest.mark.slow
def test_asr_models_rows_compare_the_two_packaged_models_on_the_same_clips() -> None:
    """`bench --only eval`'s ASR rows: s per audio s for tiny.en and base on the same English clips, batched against
    sequential, base on Mandarin told and detecting the language (2 clips each: a smoke run)."""
    from voxledger.bench_sections.asr_models import bench_asr_models

    names = [f.name for f in bench_asr_models(2)]
    for key in ("tiny.en/en", "base/en", "base/zh"):
        assert any(n.startswith(f"ASR {key} ") and "one clip at a time" in n for n in names), names
        assert any(n.startswith(f"ASR {key} ") and "batched (4) / sequential wall" in n for n in names), names
    assert any(n.startswith("ASR base/detect ") and "languages detected" in n for n in names)
    assert names[-1] == "ASR base / tiny.en wall on the same 2 English clips"
