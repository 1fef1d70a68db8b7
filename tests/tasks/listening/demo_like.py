"""Demo-like listening material: the demo's target voice as ``recordings`` and two Griffin-Lim candidates.

``recordings`` is espeak ``en-us+rob`` peak-normalised to -1 dBFS (as ``voxledger demo corpus``
writes the target voice); ``adapter`` vocodes the recording's own log-mel with the tiny backend's
Griffin-Lim vocoder, and ``base`` vocodes base voice spk-b1 (espeak ``en-us``) reading the same
sentence. No model is trained: these stand in for the demo's candidates, and carry what makes
them identifiable (Griffin-Lim's noise in pauses and its smeared onsets).
"""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf

from tests.corpus_factory import SENTENCES as FACTORY_SENTENCES
from tests.tasks.listening.factory import EVAL_PLAN_SHA256
from voxledger.schemas.listening import Stimulus, StimulusSet
from voxledger.stores.home import Home
from voxledger.tasks.backends.tiny.audio import log_mel, vocode
from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize

SENTENCES = (*FACTORY_SENTENCES, "The boy was there when the sun rose.", "A rod is used to catch pink salmon.")


def _wav(audio: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, audio, 16000, subtype="PCM_16", format="WAV")
    return buf.getvalue()


def _voice(text: str, voice: str) -> np.ndarray:
    audio = resample_synthesis(synthesize(text, voice=voice), 16000).audio.astype(np.float64)
    return audio * (10 ** (-1 / 20) / np.max(np.abs(audio)))


def demo_like_stimuli(home: Home, n_prompts: int = 12) -> StimulusSet:
    """``n_prompts`` sentences (news and chat alternating) x recordings, adapter, base, audio in ``home``."""
    stimuli = []
    for i, text in enumerate(SENTENCES[:n_prompts]):
        target = _voice(text, "en-us+rob")
        clips = {
            "recordings": target,
            "adapter": vocode(log_mel(target), seed=i),
            "base": vocode(log_mel(_voice(text, "en-us")), seed=100 + i),
        }
        for cand, audio in clips.items():
            sha = home.blobs.put_bytes(_wav(np.asarray(audio, dtype=np.float64)))
            category = "news" if i % 2 == 0 else "chat"
            stimuli.append(Stimulus(prompt_id=f"h{i:02d}", category=category, text=text, candidate=cand, seed=i, audio_sha256=sha))
    return StimulusSet(evaluation_plan_sha256=EVAL_PLAN_SHA256, stimuli=tuple(stimuli))
