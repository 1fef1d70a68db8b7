"""Generation: every (candidate, prompt, seed) exactly once, each row journaled as it completes."""

from __future__ import annotations

import io
import resource
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from math import gcd
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.evaluation import Candidate, EvaluationPlan, Generation, ResolvedCandidate
from voxledger.stores.home import Home
from voxledger.stores.trees import materialize_tree
from voxledger.tasks.backends.base import get_backend
from voxledger.tasks.evaluation.journal import Journal
from voxledger.tasks.threads import torch_threads

SAMPLE_RATE_HZ = 16000
GENERATION_THREADS = 2
"""Torch intra-op threads while a model candidate synthesises. Set here, never inherited: a model's output
depends on the thread count (the tiny base gave other audio at 1 than at 2 threads on one machine), and
whatever the caller's thread last set (a stage before, a Prefect worker thread) must not decide it."""


def resample_to(wav: np.ndarray, sr: int, rate: int) -> np.ndarray:
    """Mono float32 at ``rate`` (polyphase), clipped to [-1, 1]."""
    wav = np.asarray(wav, dtype=np.float32)
    if wav.ndim > 1:
        wav = wav.mean(axis=1)
    if sr != rate:
        g = gcd(rate, sr)
        from scipy.signal import resample_poly  # ~1.1 s of imports a cached evaluation never needs

        wav = resample_poly(wav, rate // g, sr // g).astype(np.float32)
    return np.asarray(np.clip(wav, -1.0, 1.0), dtype=np.float32)


def to_16k(wav: np.ndarray, sr: int) -> np.ndarray:
    """Mono float32 at 16 kHz (the rate every extractor uses)."""
    return resample_to(wav, sr, SAMPLE_RATE_HZ)


def wav_bytes(wav: np.ndarray, rate: int = SAMPLE_RATE_HZ) -> bytes:
    """16-bit PCM WAV bytes at ``rate`` (deterministic: no tags, no timestamps)."""
    buf = io.BytesIO()
    sf.write(buf, wav, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def generate_all(
    home: Home,
    plan: EvaluationPlan,
    resolved: dict[str, ResolvedCandidate],
    corpus: Path,
    journal: Journal,
    progress: Callable[[str], None] | None = None,
) -> list[Generation]:
    """Generate every missing row; rows already in the journal are kept, never redone."""
    done = {(r["candidate"], r["prompt_id"], r["seed"]): Generation.model_validate(r) for r in journal.rows()}
    for key, row in list(done.items()):  # a journaled clip is re-used only if its bytes (both rates) still verify
        bad = [sha for sha in (row.audio_sha256, row.native_audio_sha256) if row.valid and sha and not home.blobs.intact(sha)]
        if bad:
            for sha in bad:
                home.blobs.quarantine(sha)
            del done[key]
            if progress:
                progress(f"clip {bad[0][:12]} of {'/'.join(map(str, key))} is damaged; regenerating it")
    total, made = len(plan.candidates) * len(plan.prompts) * len(plan.seeds), len(done)
    for cand in plan.candidates:
        todo = [(p, s) for p in plan.prompts for s in plan.seeds if (cand.name, p.id, s) not in done]
        if not todo:
            continue
        with tempfile.TemporaryDirectory() as tmp, nullcontext() if cand.runtime == "recordings" else torch_threads(GENERATION_THREADS):
            synth = _loader(home, cand, resolved[cand.name], corpus, Path(tmp))  # models load once per candidate
            for prompt, seed in todo:
                row = _one(home, synth, cand, prompt, seed)
                journal.append(row.model_dump(mode="json"))
                done[(cand.name, prompt.id, seed)] = row
                made += 1
                if progress:
                    progress(f"generating {made}/{total}: {cand.name} {prompt.id} seed {seed}: {'ok' if row.valid else row.error}")
    return [done[(c.name, p.id, s)] for c in plan.candidates for p in plan.prompts for s in plan.seeds]


def _loader(home: Home, cand: Candidate, res: ResolvedCandidate, corpus: Path, tmp: Path) -> Callable[[Any, int], tuple[np.ndarray, int]]:
    if cand.runtime == "recordings":

        def recording(prompt: Any, seed: int) -> tuple[np.ndarray, int]:
            wav, sr = sf.read(str(corpus / prompt.recording), dtype="float32")
            return wav, sr

        return recording
    backend = get_backend(cand.backend)  # type: ignore[arg-type]
    base_dir = None
    if res.base_sha256:
        base_dir = tmp / "base"
        materialize_tree(home.blobs, res.base_sha256, base_dir)
    art = tmp / "artifact"
    if res.artifact_sha256 is None:
        raise EvaluationError(f"candidate {cand.name}: no artifact resolved")
    materialize_tree(home.blobs, res.artifact_sha256, art)
    loaded = backend.load_for_inference(base_dir, art, cand.runtime)

    def synth(prompt: Any, seed: int) -> tuple[np.ndarray, int]:
        return backend.synthesize(loaded, prompt.text, cand.speaker or "", seed, dict(cand.settings))

    return synth


def _one(home: Home, synth: Callable[[Any, int], tuple[np.ndarray, int]], cand: Candidate, prompt: Any, seed: int) -> Generation:
    t0 = time.perf_counter()
    try:
        wav, sr = synth(prompt, seed)
        wav16 = to_16k(wav, sr)
        if wav16.size == 0:
            raise EvaluationError("backend returned empty audio")
    except Exception as exc:  # noqa: BLE001 (any backend failure becomes an invalid row, never a crash)
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return Generation(
            candidate=cand.name,
            prompt_id=prompt.id,
            seed=seed,
            valid=False,
            wall_s=time.perf_counter() - t0,
            peak_rss_mb=_peak_rss_mb(),
            error=detail[:500],
        )
    wall = time.perf_counter() - t0
    digest = home.blobs.put_bytes(wav_bytes(wav16))
    native: dict[str, Any] = {}
    if sr > SAMPLE_RATE_HZ:  # kept for listening at the model's own bandwidth
        native = {"native_audio_sha256": home.blobs.put_bytes(wav_bytes(resample_to(wav, sr, sr), sr)), "native_sample_rate_hz": sr}
    duration = wav16.size / SAMPLE_RATE_HZ
    return Generation(
        candidate=cand.name,
        prompt_id=prompt.id,
        seed=seed,
        valid=True,
        audio_sha256=digest,
        **native,
        sample_rate_hz=SAMPLE_RATE_HZ,
        duration_s=duration,
        wall_s=wall,
        rtf=wall / duration if cand.runtime != "recordings" else None,
        peak_rss_mb=_peak_rss_mb(),
    )
