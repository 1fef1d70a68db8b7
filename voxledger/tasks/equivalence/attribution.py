"""Stage attribution: feed the reference runtime's intermediates forward through the candidate.

For the tiny backend the stages are durations (phoneme frame counts, compared exactly), mel
(the candidate decodes with the *reference's* durations) and pcm (the candidate's vocoder runs on
the *reference's* mel). Because each stage receives the reference's input, a gap shows up at the
stage that causes it and nowhere after: a corrupted decoder weight turns mel RED while durations
stay GREEN and pcm (vocoded from the reference mel) stays GREEN.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from voxledger.schemas.equivalence import EquivalenceBands, EquivalenceReport
from voxledger.tasks.equivalence.compare import compare_stage


def tiny_stage_outputs(loaded: Any, text: str, speaker: str, seed: int, feed: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Durations, mel and pcm of one utterance; ``feed`` replaces a stage's input with given arrays."""
    from voxledger.tasks.backends.tiny.audio import vocode
    from voxledger.tasks.backends.tiny.synth import _base, phonemize

    base = _base(loaded.model)
    spoken = phonemize(text)
    ids = torch.tensor([[base.config.phoneme_id(p) for p in spoken.phonemes]])
    spk = torch.tensor([base.speaker_index(speaker)])
    given = torch.from_numpy(feed["durations"]).long().unsqueeze(0) if feed and "durations" in feed else None
    loaded.model.eval()
    torch.manual_seed(seed)
    mel_norm, durations = base.infer(ids, spk, given)
    mel = loaded.norm.denormalize(mel_norm[0].numpy()).astype(np.float32)
    pcm_input = feed["mel"] if feed and "mel" in feed else mel
    pcm = vocode(pcm_input, seed=seed).astype(np.float32)
    return {"durations": durations[0].numpy().astype(np.int32), "mel": mel, "pcm": pcm}


def attribute_tiny(ref: Any, cand: Any, text: str, speaker: str, seed: int, bands: EquivalenceBands | None = None,
                   drift_windows: int = 8, dump_dir: Path | None = None) -> EquivalenceReport:  # fmt: skip
    """Compare two loaded tiny runtimes stage by stage with reference inputs fed forward."""
    bands = bands or EquivalenceBands()
    r = tiny_stage_outputs(ref, text, speaker, seed)
    fed_dur = tiny_stage_outputs(cand, text, speaker, seed, feed={"durations": r["durations"]})
    fed_mel = tiny_stage_outputs(cand, text, speaker, seed, feed={"durations": r["durations"], "mel": r["mel"]})
    c = {"durations": tiny_stage_outputs(cand, text, speaker, seed)["durations"], "mel": fed_dur["mel"], "pcm": fed_mel["pcm"]}
    stages = [
        compare_stage("durations", "tokens", r["durations"], c["durations"], bands),
        compare_stage("mel", "mel", r["mel"], c["mel"], bands, drift_windows=drift_windows),
        compare_stage("pcm", "pcm", r["pcm"], c["pcm"], bands, drift_windows=drift_windows),
    ]
    if dump_dir is not None:
        for side, arrays in (("ref", r), ("cand", c)):
            (dump_dir / side).mkdir(parents=True, exist_ok=True)
            arrays["durations"].astype("<i4").tofile(dump_dir / side / "tokens.i32")
            arrays["mel"].astype("<f4").tofile(dump_dir / side / "mel.f32")
            arrays["pcm"].astype("<f4").tofile(dump_dir / side / "pcm.f32")
    return EquivalenceReport.from_stages(stages, bands=bands)
