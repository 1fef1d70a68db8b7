"""``corpus-scale``: audit throughput and peak RSS on a large synthetic corpus of ten-second clips,
first pass and cached pass, against a bare soundfile read loop over the same files in the same run.

The full size is the issue's 100 hours (36,000 clips, ~11.5 GB of 16 kHz 16-bit WAV, written
under a temporary folder and deleted afterwards); ``VOXLEDGER_BENCH_SCALE_CLIPS`` sets another
size. Clips are assembled from a pool of one-second blocks of speech-shaped noise (the first two
blocks spell the clip number, so no two clips share their bytes; the rest are drawn per clip), which
keeps generation at disk speed. Each measured pass runs in its own spawned process, so each peak RSS is its own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from voxledger.bench_sections.audit import WORDS, speech_shaped_noise, wav_header
from voxledger.bench_sections.common import SAMPLE_RATE_HZ, Figure, audit_policy, in_child, peak_rss_mb
from voxledger.settings import load_settings

CLIP_S = 10
POOL = 200  # one-second blocks; clip numbers up to POOL**2 = 40,000 are spelt by two blocks
FULL_CLIPS = 36_000


def _row(i: int) -> dict[str, Any]:
    uid = f"c{i:05d}"
    # ~150 letters for 10 s (ordinary read speech); the first three words make the text unique
    words = [WORDS[(i // len(WORDS) ** k) % len(WORDS)] for k in range(3)] + [WORDS[(i + k) % len(WORDS)] for k in range(22)]
    return {
        "id": uid,
        "audio": f"wavs/{i // 1000:02d}/{uid}.wav",
        "text": " ".join(words),
        "speaker": f"spk{i % 100:03d}",
        "recording_id": uid,
        "split": "train",
        "language": "en",
    }


def build_scale_corpus(root: Path, n: int, seed: int = 0) -> list[Path]:
    """``n`` distinct ten-second clips and their ``manifest.jsonl`` under ``root``; returns the clip paths."""
    if n > POOL**2:
        raise ValueError(f"n={n} exceeds the {POOL**2} clips two pool blocks can spell")
    blocks = speech_shaped_noise(np.random.default_rng(seed), POOL)
    header = wav_header(CLIP_S * SAMPLE_RATE_HZ)
    paths, rows = [], []
    for i in range(n):
        # a seeded order per clip: two clips share a block at the same position with chance
        # 1/POOL, so they are neither byte nor fingerprint near duplicates of each other
        order = [i // POOL, i % POOL, *np.random.default_rng((seed, i)).integers(0, POOL, CLIP_S - 2)]
        row = _row(i)
        path = root / row["audio"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(header + blocks[order].tobytes())
        paths.append(path)
        rows.append(row)
    (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


def _bare_read_child(paths: list[str]) -> dict[str, Any]:
    import soundfile as sf

    t0 = time.perf_counter()
    frames = sum(sf.read(p, dtype="float32")[0].shape[0] for p in paths)
    return {"wall_s": time.perf_counter() - t0, "frames": frames}


def _audit_child(home: str, corpus: str) -> dict[str, Any]:
    from voxledger.stores.home import Home
    from voxledger.tasks.stages.audit import audit_corpus_fn

    policy, imports_mb = audit_policy(), peak_rss_mb()
    t0 = time.perf_counter()
    out = audit_corpus_fn(Home(home), Path(corpus), policy, policy_name="bench-corpus-scale.yaml")
    r = out.receipt.result
    return {
        "wall_s": time.perf_counter() - t0,
        "cached": out.cached,
        "verdict": r.verdict,
        "counts": r.counts_by_code,
        "imports_mb": imports_mb,
    }


def bench_corpus_scale(work: Path, n: int | None = None) -> list[Figure]:
    """Audit of ``n`` ten-second clips: first pass, cached pass, peak RSS, against a bare read loop."""
    n = n or load_settings().bench.scale_clips or FULL_CLIPS
    corpus = work / "scale-corpus"
    t0 = time.perf_counter()
    paths = build_scale_corpus(corpus, n)
    t_build = time.perf_counter() - t0
    bare = in_child(_bare_read_child, [str(p) for p in paths])
    first = in_child(_audit_child, str(work / "scale-home"), str(corpus))
    cached = in_child(_audit_child, str(work / "scale-home"), str(corpus))
    hours = n * CLIP_S / 3600
    return [
        Figure(f"corpus-scale: generate {n:,} x {CLIP_S} s clips ({hours:.1f} h)", n / t_build, "clips/s"),
        Figure("corpus-scale: bare soundfile read loop (1 thread)", n / bare["wall_s"], "utterances/s"),
        Figure(f"corpus-scale: audit first pass ({first['verdict']})", n / first["wall_s"], "utterances/s"),
        Figure(
            "corpus-scale: audit cached pass" + ("" if cached["cached"] else " (MISSED: the code changed mid-run)"),
            n / cached["wall_s"],
            "utterances/s",
        ),
        Figure("corpus-scale: first pass time / bare read time", first["wall_s"] / bare["wall_s"], "x", "<= 2"),
        Figure("corpus-scale: first pass time / cached pass time", first["wall_s"] / cached["wall_s"], "x", ">= 10"),
        Figure("corpus-scale: audit first pass peak RSS", first["peak_rss_mb"], "MB", "< 1000"),
        Figure("corpus-scale: audit cached pass peak RSS", cached["peak_rss_mb"], "MB", "< 1000"),
    ]
