"""``eval``: evaluation seconds per second of audio by stage, and evaluate_plan against raw models.

The platform run is split by clocks around the real stage functions, measuring one generation at a
time so the clocks never overlap (the same generations are then measured again, overlapped and not,
for the speed-up the default gets on two cores); the raw run calls the
tiny backend, faster-whisper, SpeechBrain ECAPA and DNSMOS directly on the same clips, with no
store, journal, statistics or receipts, so the difference is what the platform adds.
"""

from __future__ import annotations

import importlib
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from voxledger.bench_sections.common import (
    BENCH_BACKEND,
    SAMPLE_RATE_HZ,
    Figure,
    audit_policy,
    backend_hooks,
    clock,
    in_child,
    stage_timers,
    train_plan,
)
from voxledger.schemas.errors import VoxledgerError

# (stage, module, attribute) that split the platform run's time. A stage nests only in itself
# (content_gate calls score_text); an inner call of the stage already being timed is not counted.
EVAL_STAGES = (
    ("generation", "voxledger.tasks.stages.evaluate", "generate_all"),
    *backend_hooks(BENCH_BACKEND, (("synthesis", "synthesize"),)),
    ("extraction", "voxledger.tasks.stages.evaluate", "extract_all"),
    ("asr", "voxledger.tasks.metrics.asr", "load_asr_model"),
    ("asr", "voxledger.tasks.metrics.asr", "AsrModel.transcribe"),
    ("speaker", "voxledger.tasks.metrics.speaker", "load_speaker_encoder"),
    ("speaker", "voxledger.tasks.metrics.speaker", "SpeakerEncoder.embed"),
    ("mos", "voxledger.tasks.metrics.mos", "predict_mos"),
    ("validity_gate", "voxledger.tasks.metrics.validity", "audio_stats"),
    ("validity_gate", "voxledger.tasks.metrics.content_gate", "content_gate"),
    ("validity_gate", "voxledger.tasks.metrics.textmetrics", "score_text"),
)
STAGE_NAMES = {
    "generation": "generation (tiny backend + recordings)",
    "asr": "ASR (Whisper tiny.en, with load)",
    "speaker": "speaker (ECAPA, with load)",
    "mos": "MOS (DNSMOS)",
    "validity_gate": "validity + WER + content gate",
}


def _eval_inputs(work: Path, quick: bool) -> tuple[str, Path, dict[str, Any], str]:
    """A demo corpus, a briefly trained base model, and a plan: base vs recordings on target-voice prompts."""
    from voxledger.schemas.evaluation import Candidate, EvaluationPlan, Prompt
    from voxledger.stores.home import Home
    from voxledger.tasks.corpus.demo import build_demo_corpus
    from voxledger.tasks.stages.audit import audit_corpus_fn
    from voxledger.tasks.stages.train import run_training

    corpus = build_demo_corpus(work / "eval-corpus", size="tiny" if quick else "small").out_dir
    home = Home(work / "eval-home")
    audit = audit_corpus_fn(home, corpus, audit_policy(), policy_name="bench-audit.yaml").receipt_id
    base_plan = train_plan(quick, name="bench-eval-base", model={}, frames_per_batch=3000, max_epochs=1, steps_per_epoch=2, threads=1)
    base = run_training(home, corpus, audit, base_plan, plan_name="bench-eval-base.yaml").receipt.subject("best").sha256
    rows = [json.loads(line) for line in (corpus / "manifest.jsonl").read_text().splitlines()]
    target = [r for r in rows if r["speaker"] == "spk-t1"]
    ref = next(r["audio"] for r in target if r["split"] == "target_train")
    prompts = tuple(
        Prompt(id=r["id"], category="short" if len(r["text"].split()) < 8 else "long", text=r["text"], recording=r["audio"])
        for r in target
        if r["split"] == "test"
    )
    plan = EvaluationPlan(
        name="bench-eval",
        prompts=prompts,
        seeds=(0,),
        baseline="base",
        speaker_references={f"{p.id}:0": ref for p in prompts},
        candidates=(
            Candidate(
                name="base",
                backend=BENCH_BACKEND,
                runtime="base",
                artifact="input:base",
                speaker="spk-b1",
                settings={"durations": "espeak"},  # an untrained duration predictor babbles for minutes
            ),
            Candidate(name="recordings", backend="recordings", runtime="recordings"),
        ),
    )
    return str(home.root), corpus, plan.model_dump(mode="json"), base


def _import_eval_models() -> None:
    """Import every model library before a clock starts, so both sides time loads, not imports."""
    from voxledger.tasks.backends.base import backend_location

    for module in (
        "faster_whisper",
        "speechbrain.inference.speaker",
        "speechmos.dnsmos",
        backend_location(BENCH_BACKEND)[0],
        "voxledger.tasks.metrics.asr",
        "voxledger.tasks.metrics.speaker",
        "voxledger.tasks.metrics.mos",
    ):
        importlib.import_module(module)


def _eval_platform_child(home: str, corpus: str, plan_doc: dict[str, Any], base_sha: str) -> dict[str, Any]:
    import torch

    from voxledger.schemas.evaluation import EvaluationPlan, Generation
    from voxledger.stores.home import Home
    from voxledger.tasks.evaluation import extract
    from voxledger.tasks.evaluation.journal import Journal
    from voxledger.tasks.stages.evaluate import evaluate_plan_fn

    _import_eval_models()
    torch.set_num_threads(2)
    h, plan = Home(home), EvaluationPlan.model_validate(plan_doc)
    default = extract.overlap_default
    extract.overlap_default = lambda: False  # one generation at a time, so the stage clocks never overlap
    try:
        with stage_timers(EVAL_STAGES) as stages:
            t0 = time.perf_counter()
            out = evaluate_plan_fn(h, plan, plan_name="bench-eval.yaml", corpus=Path(corpus), bindings={"base": base_sha})
            wall = time.perf_counter() - t0
    finally:
        extract.overlap_default = default
    gens = json.loads(h.blobs.get_bytes(out.receipt.subject("generations").sha256))
    extraction: dict[str, float] = {}
    no_mos = plan.model_copy(update={"metrics": plan.metrics.model_copy(update={"mos": None})})  # as promotion's gate plans
    for suite, measured in (("", plan), ("no_mos_", no_mos)):
        for overlap in (False, True):  # the same generations measured again, into scratch journals
            with tempfile.TemporaryDirectory() as scratch:
                t1 = time.perf_counter()
                extract.extract_all(
                    h,
                    measured,
                    [Generation.model_validate(g) for g in gens],
                    Path(corpus),
                    Journal(Path(scratch) / "o.jsonl"),
                    overlap=overlap,
                )
                extraction[suite + ("overlapped" if overlap else "one_at_a_time")] = time.perf_counter() - t1
    clips = [
        {
            "candidate": g["candidate"],
            "prompt_id": g["prompt_id"],
            "seed": g["seed"],
            "audio_sha256": g["audio_sha256"],
            "duration_s": g["duration_s"],
        }
        for g in gens
        if g["valid"]
    ]
    return {"wall_s": wall, "stages": dict(stages), "clips": clips, "cached": out.cached, "extraction": extraction}


def _raw_asr(spec: Any) -> Callable[[np.ndarray], str]:
    from faster_whisper import WhisperModel

    from voxledger.tasks.metrics.asr import default_model_dir

    model = WhisperModel(str(default_model_dir()), device=spec.device, compute_type=spec.compute_type, cpu_threads=1, local_files_only=True)
    opts = {
        "language": spec.language,
        "task": "transcribe",
        "beam_size": spec.beam_size,
        "temperature": [spec.temperature],
        "vad_filter": spec.vad_filter,
        "condition_on_previous_text": spec.condition_on_previous_text,
        "without_timestamps": spec.without_timestamps,
        "no_speech_threshold": spec.no_speech_threshold,
        "log_prob_threshold": spec.log_prob_threshold,
        "compression_ratio_threshold": spec.compression_ratio_threshold,
    }
    return lambda wav: " ".join(s.text.strip() for s in model.transcribe(wav, **opts)[0]).strip()


ASR_BATCH = 4  # the best of 4, 8 and 16 on the 2-core Xeon (1.11x, 0.97x, 0.97x at one thread)


def _raw_asr_batched(spec: Any, wavs: list[np.ndarray]) -> list[str]:
    """faster-whisper's batched pipeline over clips laid end to end (0.1 s apart), each clip its own
    ``clip_timestamps`` window: one encoder and decoder call per ``ASR_BATCH`` clips. Its decoding is
    the spec's except that the batched pipeline never applies the no-speech filter."""
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    from voxledger.tasks.metrics.asr import default_model_dir

    model = WhisperModel(str(default_model_dir()), device=spec.device, compute_type=spec.compute_type, cpu_threads=1, local_files_only=True)
    gap, windows, pos = np.zeros(SAMPLE_RATE_HZ // 10, dtype=np.float32), [], 0
    for w in wavs:
        windows.append({"start": pos / SAMPLE_RATE_HZ, "end": (pos + len(w)) / SAMPLE_RATE_HZ})
        pos += len(w) + len(gap)
    audio = np.concatenate([part for w in wavs for part in (w.astype(np.float32), gap)])
    segments, _ = BatchedInferencePipeline(model).transcribe(
        audio, clip_timestamps=windows, batch_size=ASR_BATCH, language=spec.language, beam_size=spec.beam_size,
        temperature=spec.temperature, without_timestamps=spec.without_timestamps, log_prob_threshold=spec.log_prob_threshold,
    )  # fmt: skip
    texts: list[list[str]] = [[] for _ in wavs]
    for seg in segments:
        texts[next(i for i, w in enumerate(windows) if w["start"] - 0.01 <= seg.start <= w["end"])].append(seg.text.strip())
    return [" ".join(t).strip() for t in texts]


def _raw_ecapa() -> Callable[[np.ndarray], np.ndarray]:
    import torch
    from speechbrain.inference.speaker import EncoderClassifier

    from voxledger.tasks.metrics.speaker import default_model_dir

    folder = str(default_model_dir())
    with tempfile.TemporaryDirectory() as tmp:
        clf: Any = EncoderClassifier.from_hparams(
            source=folder, savedir=tmp, overrides={"pretrained_path": folder}, run_opts={"device": "cpu"}
        )
    clf.eval()

    def embed(wav: np.ndarray) -> np.ndarray:
        torch.set_num_threads(1)  # as the platform's encoder does
        try:
            with torch.inference_mode():
                return clf.encode_batch(torch.from_numpy(np.array(wav, copy=True))[None, :]).reshape(-1).numpy()  # type: ignore[no-any-return]
        finally:
            torch.set_num_threads(2)

    return embed


def _tree_view(blobs: Any, tree_sha: str, dest: Path) -> Path:
    """A folder of links to a stored tree's blobs: the model files as the store holds them, nothing copied."""
    for e in json.loads(blobs.get_bytes(tree_sha))["entries"]:
        (dest / e["path"]).parent.mkdir(parents=True, exist_ok=True)
        (dest / e["path"]).symlink_to(blobs.path_of(e["sha256"]))
    return dest


def _eval_raw_child(home: str, corpus: str, plan_doc: dict[str, Any], base_sha: str, clips: list[dict[str, Any]]) -> dict[str, Any]:
    """The same model calls on the same clips, with nothing around them: no store, journal, statistics or receipts."""
    import soundfile as sf
    import torch
    from speechmos import dnsmos

    from voxledger.schemas.evaluation import EvaluationPlan
    from voxledger.stores.blobs import LocalBlobStore
    from voxledger.tasks.backends.base import get_backend
    from voxledger.tasks.metrics.content_gate import content_gate
    from voxledger.tasks.metrics.textmetrics import score_text
    from voxledger.tasks.metrics.validity import audio_stats

    _import_eval_models()
    torch.set_num_threads(2)
    plan, blobs = EvaluationPlan.model_validate(plan_doc), LocalBlobStore(Path(home) / "store")
    m, prompts = plan.metrics, {p.id: p for p in plan.prompts}
    t: dict[str, float] = defaultdict(float)
    refs: dict[str, np.ndarray] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as view, clock(t, "generation"), stage_timers(EVAL_STAGES[1:2]) as synthesis:
        cand, backend = next(c for c in plan.candidates if c.name == "base"), get_backend(BENCH_BACKEND)
        loaded = backend.load_for_inference(None, _tree_view(blobs, base_sha, Path(view)), "base")
        for p in plan.prompts:
            for seed in plan.seeds:
                backend.synthesize(loaded, p.text, cand.speaker or "", seed, dict(cand.settings))
            sf.read(str(Path(corpus) / (p.recording or "")), dtype="float32")
    with clock(t, "asr"):
        transcribe = _raw_asr(m.asr)
    with clock(t, "speaker"):
        embed = _raw_ecapa()
    wavs, sequential = [], []
    for c in clips:
        wav, _ = sf.read(str(blobs.path_of(c["audio_sha256"])), dtype="float32")
        p = prompts[c["prompt_id"]]
        with clock(t, "validity_gate"):
            audio_stats(wav, SAMPLE_RATE_HZ, m.validity, text=p.text)
        with clock(t, "asr"):
            hyp = transcribe(wav)
        wavs.append(wav)
        sequential.append(hyp)
        with clock(t, "validity_gate"):
            [score_text(p.text, hyp, spec) for spec in m.text]
            passed = content_gate(p.text, hyp, p.instruction, m.content_gate).passed
        if passed and m.speaker is not None:
            with clock(t, "speaker"):
                rel = plan.speaker_references[f"{p.id}:{c['seed']}"]
                refs[rel] = refs[rel] if rel in refs else embed(sf.read(str(Path(corpus) / rel), dtype="float32")[0])
                float(embed(wav) @ refs[rel])
        if passed and m.mos is not None:
            with clock(t, "mos"):
                dnsmos.run(wav, sr=SAMPLE_RATE_HZ, model_type=m.mos.model_type)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()  # outside the raw wall: the same clips once more, batched (load included, as for "asr")
    batched = _raw_asr_batched(m.asr, wavs)
    asr_batched = {"s": time.perf_counter() - t1, "differ": sum(a != b for a, b in zip(batched, sequential, strict=True))}
    return {"wall_s": wall, "stages": {**t, **synthesis}, "asr_batched": asr_batched}


def bench_eval(work: Path, quick: bool) -> list[Figure]:
    """Evaluation seconds per second of audio, split by stage, and evaluate_plan vs the raw models."""
    home, corpus, plan_doc, base = _eval_inputs(work, quick)
    plat = in_child(_eval_platform_child, home, str(corpus), plan_doc, base)
    raw = in_child(_eval_raw_child, home, str(corpus), plan_doc, base, plat["clips"])
    if plat["cached"]:
        raise VoxledgerError(f"the evaluation in {home} was served from cache; the benchmark needs a fresh home")
    audio_s, st, rs = sum(c["duration_s"] for c in plat["clips"]), defaultdict(float, plat["stages"]), defaultdict(float, raw["stages"])
    tiny_s = sum(c["duration_s"] for c in plat["clips"] if c["candidate"] != "recordings")
    models = ("synthesis", "asr", "speaker", "mos", "validity_gate")
    per_s = "s per s of audio"
    plat_outside = plat["wall_s"] - sum(st[k] for k in models)  # wall time outside the model calls
    raw_outside = raw["wall_s"] - sum(rs[k] for k in models)
    return [
        Figure(f"eval total ({len(plat['clips'])} clips, {audio_s:.0f} s of audio, 2 threads)", plat["wall_s"] / audio_s, per_s),
        *(Figure(f"eval: {what}", st[stage] / audio_s, per_s) for stage, what in STAGE_NAMES.items()),
        Figure("eval: audio decode + journal (rest of extraction)", (st["extraction"] - sum(st[k] for k in models[1:])) / audio_s, per_s),
        Figure("eval: statistics + receipts + catalog", (plat["wall_s"] - st["generation"] - st["extraction"]) / audio_s, per_s),
        Figure("tiny backend synthesis (real-time factor)", st["synthesis"] / max(tiny_s, 1e-9), "s per s of its audio"),
        Figure("raw: tiny backend synthesis (real-time factor)", rs["synthesis"] / max(tiny_s, 1e-9), "s per s of its audio"),
        Figure("raw models on the same clips", raw["wall_s"] / audio_s, per_s),
        *(Figure(f"raw: {what}", rs[stage] / audio_s, per_s) for stage, what in STAGE_NAMES.items()),
        Figure("evaluate_plan vs raw models: total wall", 100 * (plat["wall_s"] / raw["wall_s"] - 1), "%", "<= 10"),
        Figure(
            "evaluate_plan vs raw models: wall outside model calls / raw wall",
            100 * (plat_outside - raw_outside) / raw["wall_s"],
            "%",
            "<= 10",
        ),
        Figure(
            f"raw: ASR batched across clips (faster-whisper's pipeline, batch {ASR_BATCH}, with load)",
            raw["asr_batched"]["s"] / audio_s,
            per_s,
        ),
        Figure("raw: ASR batched / one clip at a time", raw["asr_batched"]["s"] / rs["asr"], "x"),
        Figure(
            "raw: ASR batched, transcripts that differ from one at a time (it has no no-speech filter)",
            raw["asr_batched"]["differ"],
            f"of {len(plat['clips'])}",
        ),
        Figure("extraction, overlapped (the default on 2+ cores)", plat["extraction"]["overlapped"] / audio_s, per_s),
        Figure("extraction, one generation at a time", plat["extraction"]["one_at_a_time"] / audio_s, per_s),
        Figure("extraction: overlapped / one at a time", plat["extraction"]["overlapped"] / plat["extraction"]["one_at_a_time"], "x"),
        Figure(
            "extraction without MOS (promotion's gates): overlapped / one at a time",
            plat["extraction"]["no_mos_overlapped"] / plat["extraction"]["no_mos_one_at_a_time"],
            "x",
        ),
        Figure("evaluate_plan: peak RSS (own process)", plat["peak_rss_mb"], "MB"),
        Figure("raw models: peak RSS (own process)", raw["peak_rss_mb"], "MB"),
    ]
