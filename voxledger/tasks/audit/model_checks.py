"""Model-based audit checks (off by default): ASR agreement and a DNSMOS noise screen."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

from voxledger.schemas.audit import AsrAgreementPolicy, AsrAgreementResult, ClipAgreement, Finding, NoiseScreenPolicy
from voxledger.schemas.manifest import Utterance
from voxledger.schemas.metrics import AsrSpec, TextMetricSpec, TextScore
from voxledger.stores.memo import DerivedMemo
from voxledger.tasks.audit.measure import FileFacts


def _wav16k(f: FileFacts) -> np.ndarray:
    """The utterance's own samples (its cut, for a segment of a longer recording) as 16 kHz mono."""
    rng = f.samples
    data, sr = sf.read(str(f.path), dtype="float32", always_2d=True, start=rng.start if rng else 0, stop=rng.stop if rng else None)
    mono = data.mean(axis=1)
    if sr != 16000:
        from math import gcd

        g = gcd(16000, sr)
        mono = resample_poly(mono, 16000 // g, sr // g).astype(np.float32)
    out: np.ndarray = mono
    return out


ASR_MEMO_KIND = "audit-asr-transcript"
"""The kind of a home memo entry (`voxledger.stores.memo`) holding the audit's ASR transcript of one cut."""
ASR_THREADS = 2


def asr_memo_key(audio_id: str, spec: AsrSpec) -> dict[str, object]:
    """What the audit's transcript of one cut is computed from: its audio (or cut) digest, the ASR
    spec (model digest, engine version, every decoding setting), the thread count, and the code
    and packages that read and resample the cut."""
    from importlib import metadata

    return {
        "audio": audio_id,
        "asr": spec.model_dump(mode="json"),
        "cpu_threads": ASR_THREADS,
        "reader": _reader_digest(),
        "versions": {p: metadata.version(p) for p in ("soundfile", "scipy", "numpy")},
    }


@cache
def _reader_digest() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def asr_agreement(
    utts: list[Utterance],
    facts: dict[str, FileFacts],
    policy: AsrAgreementPolicy,
    audio_ids: dict[str, str] | None = None,
    memo: DerivedMemo | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[Finding], AsrAgreementResult]:
    """CER between each transcript and what the policy's Whisper model hears in the audio.

    A clip above ``max_cer`` is a finding of the policy's severity; with ``fail_chance_ratio`` it is
    an error when its CER is no better than chance: at least that fraction of the median CER of
    its ASR transcript against 25 other transcripts of the corpus (a transcript of another
    recording), which a poorly recognised but right transcript stays well below. The model and its
    language are the policy's (`AsrAgreementPolicy.asr_spec`), CER follows its normaliser, and every
    clip's CER comes back in the result, not only the findings.

    With ``audio_ids`` (utterance id -> audio or cut digest) and a home's ``memo``, a cut heard
    before under the same key (`asr_memo_key`) is not transcribed again: an audit re-run after a
    transcript is fixed transcribes only the clips whose audio it has not heard.
    """
    from voxledger.tasks.metrics.asr import load_asr_model
    from voxledger.tasks.metrics.textmetrics import score_text

    spec = policy.asr_spec()
    text_spec = TextMetricSpec(normaliser=policy.normaliser_name())
    keys = {u.id: asr_memo_key(audio_ids[u.id], spec) for u in utts if audio_ids and u.id in audio_ids} if memo is not None else {}
    heard = {uid: dict(v) for uid, v in (memo.get_many(ASR_MEMO_KIND, keys) if memo is not None else {}).items()}
    fresh: dict[str, dict[str, Any]] = {}
    try:
        findings, clips = _agreement(
            utts,
            facts,
            policy,
            heard,
            fresh,
            _announced(
                lambda: load_asr_model(spec, cpu_threads=ASR_THREADS), f"audit: loading the ASR model ({spec.model_name})", progress
            ),
            lambda r, h: score_text(r, h, text_spec),
            progress,
        )
    finally:  # what was heard before a failure is kept for the next attempt
        if memo is not None:
            memo.put_many(ASR_MEMO_KIND, {uid: (keys[uid], doc) for uid, doc in fresh.items() if uid in keys})
    median = float(np.median([c.cer for c in clips])) if clips else None
    return findings, AsrAgreementResult(asr=spec, normaliser=text_spec.normaliser, clips=tuple(clips), median_cer=median)


PROGRESS_EVERY_S = 2.0  # a slow recogniser still says where it is (the console shows a line at most every 10 s)


def _announced(load: Callable[[], Any], message: str, progress: Callable[[str], None] | None) -> Callable[[], Any]:
    """``load`` that says ``message`` before its first call (loading a model can take a while)."""
    said: list[bool] = []

    def wrapped() -> Any:
        if not said and progress is not None:
            progress(message)
            said.append(True)
        return load()

    return wrapped


def _agreement(
    utts: list[Utterance],
    facts: dict[str, FileFacts],
    policy: AsrAgreementPolicy,
    heard: dict[str, dict[str, Any]],
    fresh: dict[str, dict[str, Any]],
    model_of: Callable[[], Any],
    score_text: Callable[[str, str], Any],
    progress: Callable[[str], None] | None = None,
) -> tuple[list[Finding], list[ClipAgreement]]:
    import time

    texts = [u.text for u in utts]
    said = time.monotonic()
    fits = _BetterFit(utts, score_text) if policy.better_fit_margin is not None else None
    out, clips = [], []
    for i, u in enumerate(utts):
        if u.id in heard:
            doc = heard[u.id]
        else:
            t = model_of().hear(_wav16k(facts[u.id]))
            doc = fresh[u.id] = {"text": t.text, "language": t.language, "language_probability": t.language_probability}
            if progress is not None and (len(fresh) % 10 == 0 or time.monotonic() - said >= PROGRESS_EVERY_S):
                progress(f"audit: ASR agreement {i + 1}/{len(utts)} clips")
                said = time.monotonic()
        hyp = str(doc["text"])
        cer = score_text(u.text, hyp).cer
        clips.append(
            ClipAgreement(
                utterance_id=u.id,
                heard=hyp,
                cer=cer,
                language=str(doc.get("language") or policy.asr_spec().language),
                language_probability=doc.get("language_probability"),
            )
        )
        if cer <= policy.max_cer:
            continue
        chance = _chance_cer(texts, i, hyp, score_text) if policy.fail_chance_ratio is not None else None
        wrong = chance is not None and policy.fail_chance_ratio is not None and cer >= policy.fail_chance_ratio * chance
        note = f"; no better than another recording's transcript (chance CER {chance:.2f}): fix the manifest line" if wrong else ""
        if not wrong and fits is not None and policy.better_fit_margin is not None:
            other = fits.better(u, hyp, policy.better_fit_margin)
            if other is not None:
                wrong, note = True, f"; {other}: the line belongs to another clip (swapped or shifted?), fix the manifest"
        out.append(
            Finding(
                code="asr_disagreement",
                severity="error" if wrong else policy.severity,
                utterance_ids=(u.id,),
                file=u.audio,
                message=f"{u.audio}: ASR heard {hyp!r} for {u.text!r} (CER {cer:.2f}){note}",
                value=cer,
                bound=policy.max_cer,
            )
        )
    return out, clips


BETTER_FIT_TEXTS = 2000
"""Most distinct transcripts a flagged clip is compared with (spread evenly over the corpus)."""


class _BetterFit:
    """Which other transcript of the corpus fits an ASR hypothesis best, by edit distance over the
    longer of the two normalised texts (0: identical, 1: nothing in common), so a long garbled
    hypothesis cannot look close to a short text."""

    def __init__(self, utts: list[Utterance], score_text: Callable[[str, str], Any]) -> None:
        first: dict[str, str] = {}
        for u in utts:
            if u.text.strip():
                first.setdefault(u.text, u.id)
        texts = sorted(first)
        self.candidates = [(t, first[t]) for t in texts[:: max(1, len(texts) // BETTER_FIT_TEXTS)]]
        self.score_text = score_text

    def distance(self, text: str, hyp: str) -> float:
        s: TextScore = self.score_text(text, hyp)
        longer = max(s.ref_chars, len(s.normalised_hyp.replace(" ", "")), 1)
        return min(1.0, s.char_edits / longer)

    def better(self, u: Utterance, hyp: str, margin: float) -> str | None:
        """A sentence naming the transcript that fits ``hyp`` better than ``u``'s own by ``margin``, or None."""
        own = self.distance(u.text, hyp)
        best = min(((self.distance(t, hyp), uid) for t, uid in self.candidates if t != u.text), default=None)
        if best is None or own - best[0] < margin:
            return None
        return f"what ASR heard fits the transcript of {best[1]} (distance {best[0]:.2f}) better than its own ({own:.2f})"


def _chance_cer(texts: list[str], i: int, hyp: str, score_text: Callable[[str, str], Any]) -> float | None:
    """Median CER of ``hyp`` against 25 other transcripts, spread evenly over the corpus (None: fewer than 5 others)."""
    others = [t for j, t in enumerate(texts) if j != i]
    if len(others) < 5:
        return None
    sample = others[:: max(1, len(others) // 25)][:25]
    return float(np.median([score_text(t, hyp).cer for t in sample]))


def noise_screen(utts: list[Utterance], facts: dict[str, FileFacts], policy: NoiseScreenPolicy) -> list[Finding]:
    """Flag files whose DNSMOS background score (predicted, not human) is below the bound."""
    from voxledger.tasks.metrics.mos import predict_mos

    out = []
    for u in utts:
        bak = predict_mos(_wav16k(facts[u.id])).predicted_bak
        if bak < policy.min_bak:
            out.append(
                Finding(
                    code="noisy_audio",
                    severity=policy.severity,
                    utterance_ids=(u.id,),
                    file=u.audio,
                    message=f"{u.audio}: predicted DNSMOS BAK {bak:.2f} below {policy.min_bak}",
                    value=bak,
                    bound=policy.min_bak,
                )
            )
    return out
