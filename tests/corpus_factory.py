"""A small corpus in the demo layout (manifest, 16 kHz wavs, espeak alignments) for fast tests."""

from __future__ import annotations

import json
from pathlib import Path

import soundfile as sf

from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize

SENTENCES = [
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It is easy to tell the depth of a well.",
    "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.",
    "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.",
    "The hogs were fed chopped corn and garbage.",
    "Four hours of steady work faced us.",
    "A large size in stockings is hard to sell.",
]
BASE = {"spk_a": ("en-us", 50), "spk_b": ("en+m3", 40)}
TARGET = ("spk_t", ("en+f3", 75))


def write_utt(root: Path, uid: str, text: str, voice: str, pitch: int, speaker: str, split: str) -> dict[str, object]:
    s = resample_synthesis(synthesize(text, voice=voice, pitch=pitch), 16000)
    sf.write(root / "wavs" / f"{uid}.wav", s.audio, 16000, subtype="PCM_16")
    phonemes = [{"phoneme": p.phoneme, "start_sample": p.start_sample, "end_sample": p.end_sample} for p in s.phonemes]
    (root / "alignments" / f"{uid}.json").write_text(json.dumps({"sample_rate_hz": 16000, "phonemes": phonemes}))
    return {"id": uid, "audio": f"wavs/{uid}.wav", "text": text, "speaker": speaker, "recording_id": uid, "split": split,
            "language": "en", "instruction": None, "duration_s": len(s.audio) / 16000, "sample_rate_hz": 16000,
            "alignment": f"alignments/{uid}.json", "voice": voice, "pitch": pitch}  # fmt: skip


def build_small_corpus(root: Path, target: tuple[str, tuple[str, int]] = TARGET) -> Path:
    """Base voices speak sentences 0-5 (train) and 6-7 (dev); the target voice (``TARGET`` unless
    given: speaker id, espeak voice and pitch) has its own sentences."""
    (root / "wavs").mkdir(parents=True)
    (root / "alignments").mkdir()
    rows = []
    for spk, (voice, pitch) in BASE.items():
        for i, text in enumerate(SENTENCES[:8]):
            rows.append(write_utt(root, f"{spk}_{i}", text, voice, pitch, spk, "train" if i < 6 else "dev"))
    spk, (voice, pitch) = target
    target_sentences = [
        ("Kick the ball straight and follow through.", "target_train"),
        ("Help the woman get back to her feet.", "target_train"),
        ("A pot of tea helps to pass the evening.", "target_train"),
        ("Smoky fires lack flame and heat.", "target_train"),
        ("The soft cushion broke the man's fall.", "target_dev"),
        ("The salt breeze came across from the sea.", "test"),
    ]
    for i, (text, split) in enumerate(target_sentences):
        rows.append(write_utt(root, f"{spk}_{i}", text, voice, pitch, spk, split))
    (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root
