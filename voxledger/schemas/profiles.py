"""Protocol profiles: the published benchmarks an evaluation can be set beside, as data.

A profile fixes what its benchmark's numbers depend on: per language, the content metric, the
text processing and the recogniser; the speaker-similarity model; how utterance rates are
aggregated; and what happens to a failed generation. An evaluation plan names a profile
(``profile: seed-tts-eval``); its receipt then lists every way the run differs from it
(`voxledger.tasks.evaluation.profiles.deviations`), and the CLI and dashboard print that list
beside the numbers. Nothing here is enforced: a run on a smaller recogniser is still a run, but
it says so.

Sources, read for these rules:
- ``seed-tts-eval``: BytedanceSpeech/seed-tts-eval at commit 95003fe, ``run_wer.py`` (punctuation
  of zhon's CJK set and ``string.punctuation`` deleted except the apostrophe; ``en`` lowercased,
  WER over words; ``zh`` split into characters, the ASR output converted with zhconv ``zh-cn``,
  CER), ``average_wer.py`` (the reported number is the mean of utterance rates) and ``cal_sim.sh``
  (WavLM-large fine-tuned for speaker verification, UniSpeech). ASR: Whisper large-v3 for
  English, Paraformer-zh (FunASR) for Chinese. A generation whose file is missing is skipped
  (``if not os.path.exists(wav_res_path): continue``).
- ``cv3-eval``: the CosyVoice 3 paper (arXiv 2505.17589): content consistency as CER for Chinese,
  Japanese, Korean and Cantonese and WER for the other languages, measured by ASR models
  (Paraformer for Chinese, Whisper large-v3 otherwise), speaker similarity as the cosine of WavLM
  embeddings. Its scripts were not available to check here; the text rules are Seed-TTS-eval's,
  which CV3-Eval's Chinese and English sets follow, and a failed generation is treated as
  Seed-TTS-eval treats it. The profile says so in its ``limits``.
"""

from __future__ import annotations

from typing import Literal

from voxledger.schemas.base import Frozen
from voxledger.schemas.metrics import NormaliserName

ProfileName = Literal["seed-tts-eval", "cv3-eval"]


class ProfileLanguage(Frozen):
    """What a profile measures content with in one language."""

    metric: Literal["wer", "cer"]
    normaliser: NormaliserName
    asr_model: str
    """The recogniser the profile names (a published model, not a digest)."""


class ProtocolProfile(Frozen):
    """A benchmark's measurement rules (see the module docstring for sources)."""

    name: ProfileName
    source: str
    languages: dict[str, ProfileLanguage]
    other_languages: ProfileLanguage | None
    """Rules for a language not listed (None: the profile does not cover it)."""
    speaker_model: str
    aggregation: Literal["mean_of_utterance_rates"] = "mean_of_utterance_rates"
    failed_generations: str
    limits: str


_EN = ProfileLanguage(metric="wer", normaliser="seedtts_en", asr_model="whisper-large-v3")
_ZH = ProfileLanguage(metric="cer", normaliser="seedtts_zh", asr_model="paraformer-zh")
_SKIPPED = "a generation with no audio file is skipped: it enters no mean"

PROFILES: dict[str, ProtocolProfile] = {
    "seed-tts-eval": ProtocolProfile(
        name="seed-tts-eval",
        source="BytedanceSpeech/seed-tts-eval@95003fe run_wer.py, average_wer.py, cal_sim.sh",
        languages={"en": _EN, "zh": _ZH},
        other_languages=None,
        speaker_model="wavlm-large-sv (UniSpeech WavLM-large fine-tuned for speaker verification)",
        failed_generations=_SKIPPED,
        limits="English and Chinese only; text rules checked against run_wer.py by tests/tasks/metrics/test_conformance.py",
    ),
    "cv3-eval": ProtocolProfile(
        name="cv3-eval",
        source="CosyVoice 3 paper (arXiv 2505.17589), section on the CV3-Eval benchmark",
        languages={
            "en": _EN,
            "zh": _ZH,
            "yue": ProfileLanguage(metric="cer", normaliser="seedtts_zh", asr_model="paraformer-zh"),
            "ja": ProfileLanguage(metric="cer", normaliser="basic", asr_model="whisper-large-v3"),
            "ko": ProfileLanguage(metric="cer", normaliser="basic", asr_model="whisper-large-v3"),
        },
        other_languages=ProfileLanguage(metric="wer", normaliser="basic", asr_model="whisper-large-v3"),
        speaker_model="wavlm-large-sv (WavLM-large speaker verification)",
        failed_generations=_SKIPPED,
        limits=(
            "CV3-Eval's own scripts were not available to check: metrics, models and languages follow the paper; "
            "text rules for en/zh follow Seed-TTS-eval; ja/ko/other languages assume basic normalisation"
        ),
    ),
}
"""Every profile voxledger knows, by name."""
