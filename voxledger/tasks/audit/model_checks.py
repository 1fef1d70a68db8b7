"""Model-based audit checks (off by default): ASR agreement and a DNSMOS noise screen."""

from __future__ import annotations

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

from voxledger.schemas.audit import AsrAgreementPolicy, Finding, NoiseScreenPolicy
from voxledger.schemas.manifest import Utterance
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


def asr_agreement(utts: list[Utterance], facts: dict[str, FileFacts], policy: AsrAgreementPolicy) -> list[Finding]:
    """CER between each transcript and the bundled Whisper model's transcript of the audio.

    A clip above ``max_cer`` is a finding of the policy's severity; with ``fail_chance_ratio`` it is
    an error when its CER is no better than chance: at least that fraction of the median CER of
    its ASR transcript against 25 other transcripts of the corpus (a transcript of another
    recording), which a poorly recognised but right transcript stays well below.
    """
    from voxledger.schemas.metrics import AsrSpec
    from voxledger.tasks.metrics.asr import load_asr_model
    from voxledger.tasks.metrics.textmetrics import score_text

    model = load_asr_model(AsrSpec(beam_size=policy.beam_size), cpu_threads=2)
    texts = [u.text for u in utts]
    out = []
    for i, u in enumerate(utts):
        hyp = model.transcribe(_wav16k(facts[u.id]))
        cer = score_text(u.text, hyp).cer
        if cer <= policy.max_cer:
            continue
        chance = _chance_cer(texts, i, hyp) if policy.fail_chance_ratio is not None else None
        wrong = chance is not None and policy.fail_chance_ratio is not None and cer >= policy.fail_chance_ratio * chance
        note = f"; no better than another recording's transcript (chance CER {chance:.2f}): fix the manifest line" if wrong else ""
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
    return out


def _chance_cer(texts: list[str], i: int, hyp: str) -> float | None:
    """Median CER of ``hyp`` against 25 other transcripts, spread evenly over the corpus (None: fewer than 5 others)."""
    from voxledger.tasks.metrics.textmetrics import score_text

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
