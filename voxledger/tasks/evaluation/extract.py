"""Extractors: ASR (WER/CER per normaliser, anchors), content gate, validity, speaker, MOS.

The content gate runs first: rows failing it get no secondary quality metrics (speaker
similarity, predicted MOS) but still count in validity. Every observation carries the digest of
the extractor that produced it (its spec and the code), so comparisons can refuse mixed sources.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Generator
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from voxledger.schemas.canonical import canonical_digest
from voxledger.schemas.evaluation import EvaluationPlan, Generation, Observation, Prompt
from voxledger.stores.home import Home
from voxledger.stores.identity import code_identity
from voxledger.tasks.evaluation.generate import to_16k
from voxledger.tasks.evaluation.journal import Journal
from voxledger.tasks.metrics.builtin import gate
from voxledger.tasks.metrics.registry import EXTRACTORS, ExtractorDef, Measurement


def _registered(plan: EvaluationPlan) -> list[tuple[ExtractorDef, str, Any]]:
    """(extractor, key, spec) for every registered extractor the plan's suite switches on, in order."""
    return [(e, key, spec) for e in EXTRACTORS.values() for key, spec in e.specs(plan.metrics).items()]


def extractor_specs(plan: EvaluationPlan) -> dict[str, dict[str, Any]]:
    """Each extractor's spec as JSON (so the catalog can answer "which evaluations used X")."""
    return {key: spec.model_dump(mode="json") for _, key, spec in _registered(plan)}


def extractor_ids(plan: EvaluationPlan) -> dict[str, str]:
    """Identity of each extractor: sha256 of its spec, the specs it depends on, and the code digest."""
    code = code_identity().source_sha256
    return {key: canonical_digest({"spec": spec, **e.depends(plan.metrics), "code": code}) for e, key, spec in _registered(plan)}


class Extractors:
    """Loads each model once, on first use."""

    def __init__(self, plan: EvaluationPlan, corpus: Path, asr_workers: int = 1) -> None:
        self.plan = plan
        self.corpus = corpus
        self.asr_workers = asr_workers  # threads that may transcribe at once (one model replica each)
        self.ids = extractor_ids(plan)
        self._refs: dict[str, np.ndarray] = {}

    @cached_property
    def asr(self) -> Any:
        from voxledger.tasks.metrics.asr import load_asr_model

        return load_asr_model(self.plan.metrics.asr, workers=self.asr_workers)

    @cached_property
    def speaker(self) -> Any:
        from voxledger.tasks.metrics.speaker import load_speaker_encoder

        return load_speaker_encoder(self.plan.metrics.speaker)

    def reference_embedding(self, rel: str) -> np.ndarray:
        if rel not in self._refs:
            wav, sr = sf.read(str(self.corpus / rel), dtype="float32")
            self._refs[rel] = self.speaker.embed(to_16k(wav, sr))
        return self._refs[rel]

    def measurement(self, gen: Generation, prompt: Prompt, wav: np.ndarray) -> Measurement:
        return Measurement(
            wav=wav, sample_rate_hz=16000, text=prompt.text, prompt=prompt, generation=gen, suite=self.plan.metrics, models=self
        )

    def measure(self, m: Measurement, *, gated: bool) -> dict[tuple[str, str], list[Observation]]:
        """The ungated extractors' observations (validity, ASR and the text metrics, the content gate),
        or the gated ones' (speaker, MOS: empty unless the gate passed), per (extractor, spec key): extractors
        that read the same spec share its key."""
        out: dict[tuple[str, str], list[Observation]] = {}
        for e, key, spec in _registered(self.plan):
            if e.gated != gated or (gated and not gate(m).passed):
                continue
            out[(e.name, key)] = [
                Observation(
                    candidate=m.generation.candidate,
                    prompt_id=m.prompt.id,
                    category=m.prompt.category,
                    seed=m.generation.seed,
                    metric=metric,
                    value=float(value),
                    extractor_sha256=self.ids[key],
                )
                for metric, value in e.measure(m, key, spec).items()
            ]
        return out

    def ordered(self, by_key: dict[tuple[str, str], list[Observation]]) -> list[Observation]:
        """Observations in the registry's order, whichever thread measured them."""
        return [o for e, key, _ in _registered(self.plan) for o in by_key.get((e.name, key), [])]

    def observe(self, gen: Generation, prompt: Prompt, wav: np.ndarray) -> list[Observation]:
        """Every registered extractor's metrics for one generation; gated ones only past the content gate."""
        m = self.measurement(gen, prompt, wav)
        return self.ordered(self.measure(m, gated=False) | self.measure(m, gated=True))


def overlap_default() -> bool:
    """Overlap the two halves of measuring when this process may run on at least two cores."""
    return len(os.sched_getaffinity(0)) >= 2 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) >= 2


def extract_all(
    home: Home,
    plan: EvaluationPlan,
    gens: list[Generation],
    corpus: Path,
    journal: Journal,
    progress: Callable[[str], None] | None = None,
    overlap: bool | None = None,
    transcripts: dict[tuple[str, str, int], dict[str, Any]] | None = None,
) -> list[Observation]:
    """Observations for every valid generation; rows already journaled are not recomputed.

    ``transcripts``, when given, receives what the ASR model heard for each measured generation
    (``text``, ``language`` and, when detected, ``language_probability``), keyed like the rows.

    With ``overlap`` (the default on two or more cores) two worker threads read the clips and run the
    ungated extractors (ASR, on its own model replica per thread, and what reads its transcript) up to
    a few generations ahead, while this thread runs the gated ones (speaker embedding, MOS) and
    journals the rows in order. Every value is the same as measured one generation at a time (each
    transcript is decoded whole by one replica); a plan without MOS, ASR-bound, then uses both cores.
    """
    prompts = {p.id: p for p in plan.prompts}
    seen: dict[tuple[str, str, int], list[Observation]] = {}
    measured: dict[tuple[str, str, int], str | None] = {}
    for row in journal.rows():
        key = (row["candidate"], row["prompt_id"], row["seed"])
        seen[key] = [Observation.model_validate(o) for o in row["observations"]]
        measured[key] = row.get("audio_sha256")
        if transcripts is not None and row.get("transcript") is not None:
            transcripts[key] = row["transcript"]
    overlapped = overlap_default() if overlap is None else overlap
    ex = Extractors(plan, corpus, asr_workers=ASR_WORKERS if overlapped else 1)
    todo = [
        (i, g)
        for i, g in enumerate(gens, 1)
        if g.valid
        and not ((g.candidate, g.prompt_id, g.seed) in seen and measured[(g.candidate, g.prompt_id, g.seed)] in (None, g.audio_sha256))
    ]

    def first_half(g: Generation) -> tuple[Measurement, dict[tuple[str, str], list[Observation]]]:
        wav, _ = sf.read(io.BytesIO(home.blobs.get_bytes(g.audio_sha256 or "")), dtype="float32")
        m = ex.measurement(g, prompts[g.prompt_id], wav)
        return m, ex.measure(m, gated=False)

    if overlapped and todo:
        ex.asr  # noqa: B018 (loaded and digest-checked here, once, before its threads start)
    halves = _ahead(first_half, [g for _, g in todo], workers=ex.asr_workers) if overlapped else map(first_half, (g for _, g in todo))
    try:
        for (i, g), (m, ungated) in zip(todo, halves, strict=True):
            obs = ex.ordered(ungated | ex.measure(m, gated=True))
            heard = m.cache.get("asr")
            row = {
                "candidate": g.candidate,
                "prompt_id": g.prompt_id,
                "seed": g.seed,
                "audio_sha256": g.audio_sha256,
                "observations": [o.model_dump(mode="json") for o in obs],
            }
            if heard is not None:
                row["transcript"] = {"text": heard.text, "language": heard.language, "language_probability": heard.language_probability}
                if transcripts is not None:
                    transcripts[(g.candidate, g.prompt_id, g.seed)] = row["transcript"]
            journal.append(row)
            seen[(g.candidate, g.prompt_id, g.seed)] = obs
            if progress:
                progress(f"measuring {i}/{len(gens)}: {g.candidate} {g.prompt_id} seed {g.seed}")
    finally:
        if isinstance(halves, Generator):
            halves.close()  # a failure here stops the worker now, not when the generator is collected
    return [o for g in gens if (g.candidate, g.prompt_id, g.seed) in seen for o in seen[(g.candidate, g.prompt_id, g.seed)]]


ASR_WORKERS = 2  # threads transcribing at once when measuring overlaps (the two cores of the machines this targets)


def _ahead(fn: Callable[[Any], Any], items: list[Any], depth: int = 2, workers: int = 1) -> Generator[Any, None, None]:
    """``map(fn, items)`` computed by ``workers`` threads up to ``depth + workers`` items ahead of the
    consumer, yielded in item order.

    An exception in ``fn`` is raised here, at its item; a consumer that stops early (or raises)
    cancels the items not yet started and waits for those running.
    """
    from collections import deque
    from concurrent.futures import Future, ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="voxledger-measure")
    window: deque[Future[Any]] = deque()
    try:
        for item in items:
            window.append(pool.submit(fn, item))
            if len(window) > depth + workers - 1:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()
    finally:
        for f in window:
            f.cancel()
        pool.shutdown(wait=True)
