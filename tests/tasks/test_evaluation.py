"""Evaluation on real audio with the real extractors: plan freeze, generation, metrics, stats."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.corpus_factory import build_small_corpus
from tests.tasks.test_training import audited, base_plan, lora_plan
from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.evaluation import Candidate, EvaluationPlan, MetricSuite, Prompt, StatisticsSettings
from voxledger.stores.home import Home
from voxledger.tasks.evaluation.journal import Journal
from voxledger.tasks.evaluation.stats import clustered_interval, paired_delta
from voxledger.tasks.stages.evaluate import evaluate_plan_fn
from voxledger.tasks.stages.train import run_training


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, Path, str, str]:
    root = tmp_path_factory.mktemp("eval")
    corpus = build_small_corpus(root / "c")
    home = Home(root / "h")
    audit = audited(home, corpus)
    base = run_training(home, corpus, audit, base_plan(max_epochs=1), plan_name="t-base.yaml")
    base_sha = base.receipt.subject("best").sha256
    lora = run_training(home, corpus, audit, lora_plan(), plan_name="t-lora.yaml", base_sha=base_sha)
    return home, corpus, base_sha, lora.receipt.subject("best").sha256


def plan(**over: object) -> EvaluationPlan:
    prompts = tuple(Prompt(id=f"p{i}", category="short" if i < 2 else "long", text=t, recording=f"wavs/spk_t_{i}.wav")
                    for i, t in enumerate(["Kick the ball straight and follow through.", "Help the woman get back to her feet.",
                                           "A pot of tea helps to pass the evening."]))  # fmt: skip
    fields: dict[str, object] = dict(
        name="t-eval", prompts=prompts, seeds=(0, 1), baseline="base",
        candidates=(
            Candidate(name="base", backend="tiny", runtime="base", artifact="input:base", speaker="spk_a"),
            Candidate(name="adapter", backend="tiny", runtime="adapter", artifact="input:adapter", base="input:base", speaker="spk_t"),
            Candidate(name="broken", backend="tiny", runtime="base", artifact="input:base", speaker="nobody"),
            Candidate(name="recordings", backend="recordings", runtime="recordings"),
        ),
        speaker_references={f"p{i}:{s}": "wavs/spk_t_4.wav" for i in range(3) for s in (0, 1)},
        metrics=MetricSuite(mos=None),
    )  # fmt: skip
    fields.update(over)
    return EvaluationPlan(**fields)  # type: ignore[arg-type]


def test_evaluation_end_to_end(trained: tuple[Home, Path, str, str]) -> None:
    home, corpus, base_sha, adapter_sha = trained
    out = evaluate_plan_fn(home, plan(), plan_name="t-eval.yaml", corpus=corpus, bindings={"base": base_sha, "adapter": adapter_sha})
    r = out.receipt
    summaries = {s.candidate: s for s in r.result.summaries}
    assert r.parameters.n_generations == 4 * 3 * 2
    assert summaries["broken"].invalid_rate == 1.0  # unknown speaker: every row invalid, none retried
    # held-out espeak recordings: Whisper mostly gets them (0.22 measured), unlike a 1-epoch model's babble
    assert summaries["recordings"].overall["wer:whisper_en"].mean < 0.4
    assert summaries["base"].overall["wer:whisper_en"].mean > 0.8
    assert summaries["recordings"].overall["speaker_sim"].mean > 0.5
    assert set(summaries["adapter"].by_category) == {"short", "long"}
    comps = {(c.candidate, c.metric): c for c in r.result.comparisons}
    assert ("recordings", "wer:whisper_en") in comps and comps[("recordings", "wer:whisper_en")].n_pairs == 6
    # 3 prompts are fewer than the 5 the prompt-level t needs: reported as not estimable, never zero width
    rec = comps[("recordings", "wer:whisper_en")]
    assert rec.delta.low is None and rec.test.p_value is None and rec.test.units == 3 and "needs at least 5" in (rec.delta.note or "")
    assert any("broken/" in k for k in r.result.not_compared)
    with home.catalog.connect(read_only=True) as con:
        n_obs = con.execute("SELECT count(*) FROM observations WHERE receipt_sha256 = ?", [out.receipt_id]).fetchone()
        invalid = con.execute("SELECT count(*) FROM generations WHERE NOT valid AND error LIKE '%nobody%'").fetchone()
    assert n_obs == (r.parameters.n_observations,) and invalid == (6,)
    again = evaluate_plan_fn(home, plan(), plan_name="t-eval.yaml", corpus=corpus, bindings={"base": base_sha, "adapter": adapter_sha})
    assert again.cached and again.receipt_id == out.receipt_id


def test_interrupted_generation_resumes_from_the_journal(trained: tuple[Home, Path, str, str], tmp_path: Path) -> None:
    from voxledger.schemas.evaluation import ResolvedCandidate
    from voxledger.tasks.evaluation.generate import generate_all

    home, corpus, base_sha, _ = trained
    p = plan(candidates=(Candidate(name="base", backend="tiny", runtime="base", artifact="input:base", speaker="spk_a"),), baseline="base")
    resolved = {"base": ResolvedCandidate(name="base", runtime="base", artifact_sha256=base_sha, base_sha256=None)}
    journal = Journal(tmp_path / "g.jsonl")
    first = generate_all(home, p, resolved, corpus, journal)
    with open(journal.path, "ab") as f:
        f.write(b'{"candidate": "base", "torn')  # a crash mid-append
    again = generate_all(home, p, resolved, corpus, journal)
    assert [g.wall_s for g in again] == [g.wall_s for g in first]  # nothing was generated twice
    assert len(list(journal.rows())) == 6


def test_plan_errors_are_clear(trained: tuple[Home, Path, str, str]) -> None:
    home, corpus, base_sha, adapter_sha = trained
    with pytest.raises(EvaluationError, match="needs input 'adapter'"):
        evaluate_plan_fn(home, plan(), plan_name="t-eval.yaml", corpus=corpus, bindings={"base": base_sha})
    with pytest.raises(EvaluationError, match="unknown alias 'champion'"):
        p = plan(candidates=(Candidate(name="base", backend="tiny", runtime="base", artifact="alias:champion", speaker="spk_a"),))
        evaluate_plan_fn(home, p, plan_name="t-eval2.yaml", corpus=corpus)
    with pytest.raises(ValueError, match="speaker_references must assign"):
        plan(speaker_references={})


def test_prompt_clustered_interval_and_paired_delta() -> None:
    settings = StatisticsSettings()
    iv = clustered_interval([1.0, 1.2, 3.0, 3.2, 2.0, 2.2, 1.5, 1.7, 2.5, 2.7], [p for p in "aabbccddee"], settings)
    assert iv.mean == pytest.approx(2.1) and iv.low < iv.mean < iv.high and (iv.units, iv.n, iv.unit) == (5, 10, "prompt")  # type: ignore[operator]
    cand = {(f"p{i}", 0): 0.1 * i + 1.0 + 0.01 * (i % 3) for i in range(12)}
    base = {(f"p{i}", 0): 0.1 * i for i in range(12)}
    delta, test, n = paired_delta(cand, base, settings)
    assert delta.mean == pytest.approx(1.01) and n == 12 and test.p_value is not None and test.p_value < 0.01 and test.units == 12


def test_overlapped_measuring_gives_the_same_rows_and_raises_at_the_failing_item(
    trained: tuple[Home, Path, str, str], tmp_path: Path
) -> None:
    """The worker threads' half (ASR on two model replicas at once, text metrics, gate) and this thread's half
    (speaker, MOS) give what one generation at a time gives, in the same order; a failure in the workers' half
    stops the run at its item, whichever thread reached it first."""
    from voxledger.schemas.evaluation import ResolvedCandidate
    from voxledger.tasks.evaluation.extract import extract_all
    from voxledger.tasks.evaluation.generate import generate_all
    from voxledger.tasks.metrics.registry import ExtractorDef, MetricDef, register, unregister

    home, corpus, base_sha, adapter_sha = trained
    refs = {f"p{i}:0": "wavs/spk_t_4.wav" for i in range(3)}
    p = plan(metrics=MetricSuite(), seeds=(0,), speaker_references=refs)  # MOS on: both halves do work
    resolved = {
        "base": ResolvedCandidate(name="base", runtime="base", artifact_sha256=base_sha, base_sha256=None),
        "adapter": ResolvedCandidate(name="adapter", runtime="adapter", artifact_sha256=adapter_sha, base_sha256=base_sha),
        "broken": ResolvedCandidate(name="broken", runtime="base", artifact_sha256=base_sha, base_sha256=None),
        "recordings": ResolvedCandidate(name="recordings", runtime="recordings", artifact_sha256=None, base_sha256=None),
    }
    # three rows measure (one prompt: base, adapter, recordings; MOS costs ~1.6 s a short clip)
    gens = [g for g in generate_all(home, p, resolved, corpus, Journal(tmp_path / "g.jsonl")) if g.prompt_id == "p0"]
    assert [(g.candidate, g.valid) for g in gens] == [("base", True), ("adapter", True), ("broken", False), ("recordings", True)]
    threads: list[str] = []

    def thread_of(m: Any, key: str, spec: object) -> dict[str, float]:  # ungated: runs where ASR runs
        threads.append(threading.current_thread().name)
        return {"thread_probe": 1.0}

    register(
        ExtractorDef(
            "thread_probe",
            lambda suite: {"thread_probe": MetricSuite().validity},
            (MetricDef("thread_probe", "thread_probe", "neither"),),
            thread_of,
        )
    )
    try:
        one = extract_all(home, p, gens, corpus, Journal(tmp_path / "one.jsonl"), overlap=False)
        in_one, threads[:] = set(threads), []
        both = extract_all(home, p, gens, corpus, Journal(tmp_path / "both.jsonl"), overlap=True)
    finally:
        unregister("thread_probe")
    assert (
        in_one == {threading.current_thread().name} and len(set(threads)) == 2 and all(t.startswith("voxledger-measure") for t in threads)
    )
    assert both == one and any(o.metric == "predicted_mos_ovrl" for o in both) and any(o.metric == "wer:whisper_en" for o in both)
    assert len({(o.candidate, o.prompt_id, o.seed, o.metric) for o in both}) == len(both)  # each value once (extractors share spec keys)

    third = next((g.candidate, g.prompt_id, g.seed) for g in gens if g.candidate == "recordings")  # the third clip measured

    def flaky(m: Any, key: str, spec: object) -> dict[str, float]:
        if (m.generation.candidate, m.generation.prompt_id, m.generation.seed) == third:
            raise RuntimeError("extractor broke on the third clip")
        return {"flaky": 1.0}

    register(ExtractorDef("flaky", lambda suite: {"flaky": MetricSuite().validity}, (MetricDef("flaky", "flaky", "neither"),), flaky))
    try:
        journal = Journal(tmp_path / "flaky.jsonl")
        with pytest.raises(RuntimeError, match="third clip"):
            extract_all(home, p, gens, corpus, journal, overlap=True)
    finally:
        unregister("flaky")
    assert len(list(journal.rows())) == 2  # the two rows before it are kept for the resume


def test_generation_does_not_inherit_the_callers_thread_count(trained: tuple[Home, Path, str, str], tmp_path: Path) -> None:
    """The tiny model's audio depends on torch's thread count; generation sets its own, so what ran before cannot change it."""
    import torch

    from voxledger.schemas.evaluation import ResolvedCandidate
    from voxledger.tasks.evaluation.generate import generate_all
    from voxledger.tasks.stages.base_import import import_shipped_base

    home, corpus, _, _ = trained
    shipped = import_shipped_base(home, "tiny", flow="test").receipt.subject("base").sha256  # full size: its output depends on threads
    p = plan(candidates=(Candidate(name="base", backend="tiny", runtime="base", artifact="input:base", speaker="spk-b1"),), baseline="base")
    resolved = {"base": ResolvedCandidate(name="base", runtime="base", artifact_sha256=shipped, base_sha256=None)}
    before = torch.get_num_threads()
    audio = {}
    try:
        for n in (1, 3):
            torch.set_num_threads(n)
            audio[n] = [g.audio_sha256 for g in generate_all(home, p, resolved, corpus, Journal(tmp_path / f"g{n}.jsonl"))]
            assert torch.get_num_threads() == n  # and it gives the caller's setting back
    finally:
        torch.set_num_threads(before)
    assert audio[1] == audio[3] and all(audio[1])
