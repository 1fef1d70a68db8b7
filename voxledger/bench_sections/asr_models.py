"""``eval`` (ASR models): seconds of transcription per second of audio, per evaluator model, same clips.

The packaged English tiny.en and the packaged multilingual base transcribe the same English clips
(espeak-ng, the demo's held-out voice) through voxledger's own ``AsrModel`` one clip at a time, and
through faster-whisper's batched pipeline; base also transcribes Mandarin clips (the Mandarin demo's
held-out voice, espeak-ng ``cmn+f3`` at 130 words per minute),
told the language and left to detect it. Every pass runs in one spawned process, after a warm-up
clip, with one CTranslate2 thread, so the figures are same-run ratios on the same audio. Accuracy
rides along (CER against the text), since a faster model that hears less is no bargain.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from voxledger.bench_sections.common import SAMPLE_RATE_HZ, Figure, in_child

ZH_SENTENCES = (
    "今天天气很好，我们去公园散步吧。",
    "我每天早上七点起床，然后喝一杯咖啡。",
    "请把窗户关上，外面风很大。",
    "这家餐厅的菜非常好吃。",
    "火车站离这里不远，走路十分钟就到了。",
    "孩子们在院子里玩耍。",
    "图书馆周末也开门。",
    "医生说他需要多休息几天。",
)
BATCH = 4


def _clips(texts: list[str], voice: str, pitch: int = 50, rate_wpm: int = 175) -> list[np.ndarray]:
    from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize

    return [resample_synthesis(synthesize(t, voice, pitch, rate_wpm), SAMPLE_RATE_HZ).audio.astype(np.float32) for t in texts]


def _batched(model: Any, wavs: list[np.ndarray], language: str, beam: int) -> list[str]:
    """faster-whisper's batched pipeline, each clip its own window of one long array (0.1 s apart)."""
    from faster_whisper import BatchedInferencePipeline

    gap, windows, pos = np.zeros(SAMPLE_RATE_HZ // 10, dtype=np.float32), [], 0
    for w in wavs:
        windows.append({"start": pos / SAMPLE_RATE_HZ, "end": (pos + len(w)) / SAMPLE_RATE_HZ})
        pos += len(w) + len(gap)
    audio = np.concatenate([part for w in wavs for part in (w, gap)])
    segments, _ = BatchedInferencePipeline(model).transcribe(
        audio, clip_timestamps=windows, batch_size=BATCH, language=language, beam_size=beam, without_timestamps=True
    )
    texts: list[list[str]] = [[] for _ in wavs]
    for seg in segments:
        texts[next(i for i, w in enumerate(windows) if w["start"] - 0.01 <= seg.start <= w["end"])].append(seg.text.strip())
    return [" ".join(t).strip() for t in texts]


def _child(n_clips: int) -> dict[str, Any]:
    from voxledger.schemas.metrics import AsrSpec, TextMetricSpec
    from voxledger.tasks.corpus.sentences import harvard_sentences
    from voxledger.tasks.metrics.asr import AsrModel
    from voxledger.tasks.metrics.textmetrics import aggregate, score_text

    en_texts = list(harvard_sentences()[:n_clips])
    zh_texts = [ZH_SENTENCES[i % len(ZH_SENTENCES)] for i in range(n_clips)]
    en, zh = _clips(en_texts, "en-us+rob"), _clips(zh_texts, "cmn+f3", 70, 130)  # the Mandarin demo's held-out voice
    seconds = {"en": sum(len(w) for w in en) / SAMPLE_RATE_HZ, "zh": sum(len(w) for w in zh) / SAMPLE_RATE_HZ}
    rules = {"en": TextMetricSpec(normaliser="whisper_en"), "zh": TextMetricSpec(normaliser="zh")}
    out: dict[str, Any] = {"audio_s": seconds}
    runs = (
        ("tiny.en", "whisper-tiny.en-ct2", "en", "en", en, en_texts),
        ("base", "whisper-base-ct2", "en", "en", en, en_texts),
        ("base", "whisper-base-ct2", "zh", "zh", zh, zh_texts),
        ("base", "whisper-base-ct2", "detect", "zh", zh, zh_texts),
    )
    for label, name, language, lang, wavs, texts in runs:
        model = AsrModel(AsrSpec.model_validate({"model_name": name, "language": language}), cpu_threads=1)
        model.transcribe(wavs[0])  # load and warm-up, not timed
        t0 = time.perf_counter()
        heard = [model.hear(w) for w in wavs]
        wall = time.perf_counter() - t0
        key = f"{label}/{language}"
        cer = aggregate([score_text(t, h.text, rules[lang]) for t, h in zip(texts, heard, strict=True)]).cer_macro
        out[key] = {"sequential_s": wall, "cer": cer, "detected": sorted({h.language for h in heard})}
        if language != "detect":
            raw = model._model  # the same loaded CTranslate2 model, batched by faster-whisper's own pipeline
            _batched(raw, wavs[:BATCH], language, 5)  # warm-up
            t0 = time.perf_counter()
            batched = _batched(raw, wavs, language, 5)
            out[key]["batched_s"] = time.perf_counter() - t0
            out[key]["batched_cer"] = aggregate([score_text(t, h, rules[lang]) for t, h in zip(texts, batched, strict=True)]).cer_macro
    return out


def bench_asr_models(n_clips: int) -> list[Figure]:
    """Transcription seconds per audio second for tiny.en and multilingual base on the same clips, sequential
    against batched, and base on Mandarin (told and detecting)."""
    got = in_child(_child, n_clips)
    figures = []
    for key, row in got.items():
        if not isinstance(row, dict) or "sequential_s" not in row:
            continue
        audio_s = got["audio_s"]["zh" if key.endswith(("/zh", "/detect")) else "en"]
        what = f"ASR {key} ({n_clips} clips, {audio_s:.0f} s of audio)"
        figures.append(Figure(f"{what}: s per audio s, one clip at a time", row["sequential_s"] / audio_s, "s/s"))
        figures.append(Figure(f"{what}: CER (macro), one clip at a time", row["cer"], "ratio"))
        if "batched_s" in row:
            figures.append(Figure(f"{what}: batched ({BATCH}) / sequential wall", row["batched_s"] / row["sequential_s"], "x"))
            figures.append(Figure(f"{what}: CER (macro), batched", row["batched_cer"], "ratio"))
        if key.endswith("/detect"):
            figures.append(Figure(f"{what}: languages detected {', '.join(row['detected'])}", float(len(row["detected"])), "count"))
    tiny, base = got["tiny.en/en"]["sequential_s"], got["base/en"]["sequential_s"]
    figures.append(Figure(f"ASR base / tiny.en wall on the same {n_clips} English clips", base / tiny, "x"))
    return figures
