"""``audit``: audit throughput and peak RSS on a synthetic corpus, first pass against cached pass."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from voxledger.bench_sections.common import SAMPLE_RATE_HZ, Figure, audit_policy, in_child, peak_rss_mb
from voxledger.schemas.errors import AuditFailedError, VoxledgerError

# 4-6 letter words: three per one-second clip is ~15 letters/s, ordinary read speech, so the
# speaking-rate check runs without flagging; 40**3 distinct texts keep every transcript unique.
WORDS = tuple(
    "amber birch cedar delta ember fable grain harbor ivory jolly "
    "kettle lemon maple noble olive pearl quiet river stone tiger "
    "umber vivid wheat young zebra acorn bloom cloud dune frost "
    "glade hazel inlet joint knoll linen marsh north orbit plume".split()
)


def wav_header(n_samples: int) -> bytes:
    """The header soundfile writes for a mono 16-bit 16 kHz clip of ``n_samples`` samples."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.zeros(n_samples, np.int16), SAMPLE_RATE_HZ, format="WAV", subtype="PCM_16")
    return buf.getvalue()[: -2 * n_samples]


def speech_shaped_noise(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` one-second int16 clips: low-passed noise under a 3-5 Hz syllable envelope, peak 0.3."""
    from scipy.signal import lfilter

    t = np.arange(SAMPLE_RATE_HZ) / SAMPLE_RATE_HZ
    noise = lfilter([1.0], [1.0, -0.9], rng.standard_normal((count, SAMPLE_RATE_HZ)), axis=1)
    rate, phase = rng.uniform(3.0, 5.0, (count, 1)), rng.uniform(0.0, np.pi, (count, 1))
    x = noise * (0.15 + 0.85 * np.abs(np.sin(np.pi * rate * t + phase)))
    return (x / np.abs(x).max(axis=1, keepdims=True) * 0.3 * 32767).astype("<i2")  # type: ignore[no-any-return]


def _noise_row(i: int) -> dict[str, Any]:
    """Manifest row ``i``: 100 speakers, 90 base (train/dev) and 10 target (target splits, test)."""
    speaker, turn = i % 100, i % 100 + i // 100  # turn mixes splits even in the first hundred rows
    split = ("target_train", "target_train", "target_dev", "test")[turn % 4] if speaker >= 90 else ("dev" if turn % 10 == 0 else "train")
    uid = f"u{i:05d}"
    text = " ".join(WORDS[(i // len(WORDS) ** k) % len(WORDS)] for k in range(3))
    return {
        "id": uid,
        "audio": f"wavs/{i // 1000:02d}/{uid}.wav",
        "text": text,
        "speaker": f"spk{speaker:03d}",
        "recording_id": uid,
        "split": split,
        "language": "en",
        "duration_s": 1.0,
        "sample_rate_hz": SAMPLE_RATE_HZ,
    }


def build_noise_corpus(root: Path, n: int, seed: int = 0) -> Path:
    """A JSONL corpus of ``n`` distinct one-second speech-shaped noise clips that passes the audit.

    Clips are generated 1,000 at a time; the WAV header comes from soundfile once (every clip has
    the same length), so 10,000 files take seconds instead of a minute of per-file encoder calls.

    Raises:
        ValueError: ``n`` exceeds the number of distinct transcripts (64,000).
    """
    if n > len(WORDS) ** 3:
        raise ValueError(f"n={n} exceeds the {len(WORDS) ** 3} distinct transcripts of the noise corpus")
    header, rng, rows = wav_header(SAMPLE_RATE_HZ), np.random.default_rng(seed), []
    for start in range(0, n, 1000):
        for j, clip in enumerate(speech_shaped_noise(rng, min(1000, n - start))):
            row = _noise_row(start + j)
            path = root / row["audio"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(header + clip.tobytes())
            rows.append(row)
    (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def _audit_child(home: str, corpus: str) -> dict[str, Any]:
    from voxledger.stores.home import Home
    from voxledger.tasks.stages.audit import audit_corpus_fn

    policy, imports_mb = audit_policy(), peak_rss_mb()
    t0 = time.perf_counter()
    out = audit_corpus_fn(Home(home), Path(corpus), policy, policy_name="bench-audit.yaml")
    r = out.receipt.result
    return {
        "wall_s": time.perf_counter() - t0,
        "cached": out.cached,
        "verdict": r.verdict,
        "counts": r.counts_by_code,
        "imports_mb": imports_mb,
        "code": out.receipt.environment.code.source_sha256,
    }


def bench_audit(work: Path, n: int) -> list[Figure]:
    """Audit throughput and peak RSS, first pass and cached pass, each in its own process."""
    corpus = build_noise_corpus(work / "audit-corpus", n)
    for attempt in range(3):  # the cache key holds the code digest: an edit between the passes misses, so start over
        home = str(work / f"audit-home-{attempt}")
        first, cached = in_child(_audit_child, home, str(corpus)), in_child(_audit_child, home, str(corpus))
        if first["verdict"] != "pass":
            raise AuditFailedError(
                f"the synthetic audit corpus {corpus} failed its audit ({first['counts']}); the benchmark would measure a broken corpus"
            )
        if cached["cached"]:
            break
    else:
        raise VoxledgerError(
            f"the second audit pass missed the cache 3 times (source digests {first['code']} then {cached['code']}): "
            "the code changes while the benchmark runs; run it on a quiet checkout"
        )
    return [
        Figure(f"audit {n:,} x 1 s clips, first pass", n / first["wall_s"], "utterances/s"),
        Figure("audit first pass: peak RSS (own process)", first["peak_rss_mb"], "MB"),
        Figure(f"audit {n:,} clips, cached pass", n / cached["wall_s"], "utterances/s"),
        Figure("audit cached pass: peak RSS (own process)", cached["peak_rss_mb"], "MB"),
        Figure("audit process RSS after imports (floor of both)", first["imports_mb"], "MB"),
        Figure("audit cached / first pass time", cached["wall_s"] / first["wall_s"], "x"),
    ]


def _asr_child(clips: int) -> dict[str, float]:
    """Seconds per clip of the audit's ASR agreement check, greedy (init's policy) and beam 5, over espeak-ng clips."""
    import shutil
    import tempfile

    import soundfile as sf

    from voxledger.schemas.audit import AsrAgreementPolicy
    from voxledger.schemas.manifest import Utterance
    from voxledger.tasks.audit.measure import FileFacts
    from voxledger.tasks.audit.model_checks import asr_agreement
    from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize
    from voxledger.tasks.corpus.sentences import harvard_sentences

    texts = harvard_sentences()[:clips]
    utts, facts, audio_s = [], {}, 0.0
    folder = Path(tempfile.mkdtemp(prefix="vx-asr-bench-"))
    for i, text in enumerate(texts):
        s = resample_synthesis(synthesize(text, "en-us+rob"), 16000)
        sf.write(folder / f"u{i}.wav", s.audio, 16000, subtype="PCM_16")
        u = Utterance.from_record({"id": f"u{i}", "audio": f"u{i}.wav", "text": text, "speaker": "s", "split": "train"})
        utts.append(u)
        facts[u.id] = FileFacts(u.id, folder / f"u{i}.wav")
        audio_s += s.audio.size / 16000
    out: dict[str, float] = {"audio_s": audio_s}
    for beam in (1, 5):
        policy = AsrAgreementPolicy(enabled=True, beam_size=beam)
        asr_agreement(utts[:1], facts, policy)  # model load and warm-up, not timed
        t0 = time.perf_counter()
        asr_agreement(utts, facts, policy)
        out[f"beam{beam}_s"] = time.perf_counter() - t0
    shutil.rmtree(folder, ignore_errors=True)
    return out


def bench_asr_agreement(clips: int) -> list[Figure]:
    """The audit's ASR agreement check per clip: greedy (what `voxledger init` writes) against beam 5, same clips, same run."""
    got = in_child(_asr_child, clips)
    per_clip = got["audio_s"] / clips
    return [
        Figure(f"audit ASR agreement, greedy: per {per_clip:.1f} s clip", got["beam1_s"] / clips, "s/clip"),
        Figure(f"audit ASR agreement, beam 5: per {per_clip:.1f} s clip", got["beam5_s"] / clips, "s/clip"),
        Figure("audit ASR agreement greedy / beam 5 time", got["beam1_s"] / got["beam5_s"], "x"),
    ]


def build_spoken_corpus(root: Path, clips: int) -> tuple[Path, list[dict[str, Any]]]:
    """A JSONL corpus of ``clips`` espeak-ng Harvard sentences (one speaker, 16 kHz), the first
    row's transcript swapped for another sentence: the finding a user fixes before re-running."""
    import soundfile as sf

    from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize
    from voxledger.tasks.corpus.sentences import harvard_sentences

    texts, rows = harvard_sentences()[: clips + 1], []
    (root / "wavs").mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts[:clips]):
        sf.write(
            root / "wavs" / f"u{i}.wav",
            resample_synthesis(synthesize(text, "en-us+rob"), SAMPLE_RATE_HZ).audio,
            SAMPLE_RATE_HZ,
            subtype="PCM_16",
        )
        rows.append({"id": f"u{i}", "audio": f"wavs/u{i}.wav", "text": text, "speaker": "s", "recording_id": f"r{i}", "split": "train"})
    rows[0] = {**rows[0], "text": texts[clips]}
    (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root, rows


def _audit_rerun_child(work: str, clips: int) -> dict[str, Any]:
    """Three audits with ASR agreement on (greedy, as `voxledger init` writes it) in one process,
    so the Whisper model loads once: the first pass in a home (a swapped transcript to fix), then,
    after the fix, the re-run in that home and the same audit in a fresh home; each timed."""
    from voxledger.schemas.audit import AsrAgreementPolicy
    from voxledger.stores.home import Home
    from voxledger.tasks.corpus.sentences import harvard_sentences
    from voxledger.tasks.stages.audit import audit_corpus_fn

    corpus, rows = build_spoken_corpus(Path(work) / "audit-rerun-corpus", clips)
    policy = audit_policy().model_copy(update={"asr_agreement": AsrAgreementPolicy(enabled=True)})

    def audit(home: Home) -> tuple[float, Any]:
        t0 = time.perf_counter()
        out = audit_corpus_fn(home, corpus, policy, policy_name="bench-audit-asr.yaml")
        return time.perf_counter() - t0, out

    _, first = audit(Home(Path(work) / "audit-rerun-home"))
    flagged = [list(f.utterance_ids) for f in first.receipt.result.findings if f.code == "asr_disagreement"]
    rows[0] = {**rows[0], "text": harvard_sentences()[0]}
    (corpus / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    home = Home(Path(work) / "audit-rerun-home")
    memo_s, memo = audit(home)
    fresh_s, fresh = audit(Home(Path(work) / "audit-rerun-fresh-home"))
    return {
        "flagged_first": flagged,
        "memo_s": memo_s,
        "fresh_s": fresh_s,
        "memo_cached": memo.cached,
        "memo_hits": home.memo.stats.hits,
        "same_findings": memo.receipt.result.findings == fresh.receipt.result.findings,
        "corpus": str(corpus),
    }


def bench_audit_rerun(work: Path, clips: int) -> list[Figure]:
    """An audit re-run after one transcript is fixed: in the home that heard every clip (ASR
    transcripts read back from its memo) against a fresh home (every clip transcribed again), the
    model loaded in both. The first pass must flag the swapped transcript, the re-run must read
    every transcript back and both must report the same findings, or the section fails."""
    got = in_child(_audit_rerun_child, str(work), clips)
    if ["u0"] not in got["flagged_first"]:
        raise VoxledgerError(f"the first audit of {got['corpus']} did not flag the swapped transcript of u0: {got['flagged_first']}")
    if got["memo_cached"] or not got["same_findings"] or got["memo_hits"] != clips:
        raise VoxledgerError(
            f"the re-run in the same home (cached={got['memo_cached']}, {got['memo_hits']} of {clips} transcripts from the memo) "
            f"{'found what a fresh home found' if got['same_findings'] else 'found other findings than a fresh home'}"
        )
    label = f"audit re-run after one transcript fix, {clips} spoken clips, ASR agreement on"
    return [
        Figure(f"{label}: a fresh home (every clip transcribed)", got["fresh_s"], "s"),
        Figure(f"{label}: the same home (transcripts from its memo)", got["memo_s"], "s"),
        Figure("audit re-run: memo / fresh home time", got["memo_s"] / got["fresh_s"], "x"),
    ]
