"""Model-based audit checks (off by default): ASR agreement and a DNSMOS noise screen."""

from __future__ import annotations

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

from voxledger.schemas.audit import AsrAgreementPolicy, Finding, NoiseScreenPolicy
from voxledger.schemas.manifest import Utterance
from voxledger.tasks.audit.measure import FileFacts


def _wav16k(f: FileFacts) -> np.ndarray:
    data, sr = sf.read(str(f.path), dtype="float32", always_2d=True)
    mono = data.mean(axis=1)
    if sr != 16000:
        from math import gcd

        g = gcd(16000, sr)
        mono = resample_poly(mono, 16000 // g, sr // g).astype(np.float32)
    out: np.ndarray = mono
    return out


def asr_agreement(utts: list[Utterance], facts: dict[str, FileFacts], policy: AsrAgreementPolicy) -> list[Finding]:
    """CER between each transcript and the bundled Whisper model's transcript of the audio."""
    from voxledger.schemas.metrics import AsrSpec
    from voxledger.tasks.metrics.asr import load_asr_model
    from voxledger.tasks.metrics.textmetrics import score_text

    model = load_asr_model(AsrSpec(beam_size=policy.beam_size), cpu_threads=2)
    out = []
    for u in utts:
        hyp = model.transcribe(_wav16k(facts[u.id]))
        cer = score_text(u.text, hyp).cer
        if cer > policy.max_cer:
            wrong = policy.fail_above_cer is not None and cer > policy.fail_above_cer
            out.append(
                Finding(
                    code="asr_disagreement",
                    severity="error" if wrong else policy.severity,
                    utterance_ids=(u.id,),
                    file=u.audio,
                    message=f"{u.audio}: ASR heard {hyp!r} for {u.text!r} (CER {cer:.2f})"
                    + ("; the transcript is likely of another recording: fix the manifest line" if wrong else ""),
                    value=cer,
                    bound=policy.fail_above_cer if wrong and policy.fail_above_cer is not None else policy.max_cer,
                )
            )
    return out


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
