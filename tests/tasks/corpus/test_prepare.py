"""Formats and rates in, one training format out: FLAC/OGG/Opus/MP3/WAV at any rate and channel
count are read; ``prepare`` cuts, down-mixes, resamples and normalises into a derived corpus that
audits clean, is reused from cache, and whose lineage reaches the originals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import soundfile as sf

from tests.tasks.corpus.factory import POLICY, clip, sentence
from voxledger.schemas.errors import CorpusError
from voxledger.stores.home import Home
from voxledger.tasks.audit.measure import measure_file
from voxledger.tasks.corpus.manifests import load_corpus
from voxledger.tasks.stages.audit import audit_corpus_fn
from voxledger.tasks.stages.corpus_prepare import prepare_corpus_fn

# (file, rate, channels, libsndfile format, subtype)
SOURCES = [("a.flac", 44100, 2, "FLAC", None), ("b.mp3", 22050, 1, "MP3", None), ("c.ogg", 48000, 1, "OGG", "OPUS"),
           ("d.ogg", 32000, 2, "OGG", "VORBIS"), ("e.wav", 16000, 1, "WAV", "PCM_16")]  # fmt: skip


def mixed_corpus(base: Path) -> Path:
    """A Kaldi dir over files of every format; a.flac is a 6 s recording cut into two segments."""
    d = base / "data" / "train"
    d.mkdir(parents=True)
    wav, segs, text, spk = [], [], [], []
    for i, (name, rate, channels, fmt, subtype) in enumerate(SOURCES):
        seconds = 6.0 if name == "a.flac" else 1.5
        path = base / "audio" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(path, clip(seconds, i, rate, channels), rate, format=fmt, subtype=subtype)
        wav.append(f"r{i} {path}")
        cuts = [(f"u{i}a", 0.5, 2.0), (f"u{i}b", 3.0, 4.75)] if name == "a.flac" else [(f"u{i}", 0.0, -1)]
        for k, (uid, start, end) in enumerate(cuts):
            segs.append(f"{uid} r{i} {start} {end}")
            text.append(f"{uid} {sentence(10 * i + k)}")
            spk.append(f"{uid} s{i % 2}")
    for name, lines in (("wav.scp", wav), ("segments", segs), ("text", text), ("utt2spk", spk)):
        (d / name).write_text("\n".join(lines) + "\n")
    return base / "data"


def test_every_format_rate_and_channel_count_is_read(tmp_path: Path) -> None:
    data = mixed_corpus(tmp_path)
    loaded = load_corpus(data, audio_roots=(tmp_path / "audio",))
    facts = {u.id: measure_file(loaded.root, u, POLICY, audio_roots=loaded.audio_roots) for u in loaded.utterances.utterances}
    assert all(f.error_code is None for f in facts.values()), {k: f.error for k, f in facts.items()}
    assert {k: (f.sample_rate_hz, f.channels) for k, f in facts.items()} == {
        "u0a": (44100, 2),
        "u0b": (44100, 2),
        "u1": (22050, 1),
        "u2": (48000, 1),
        "u3": (32000, 2),
        "u4": (16000, 1),
    }
    assert facts["u0b"].stats.duration_s == pytest.approx(1.75, abs=1e-3)  # type: ignore[union-attr]
    assert facts["u1"].stats.duration_s == pytest.approx(1.5, abs=0.06)  # type: ignore[union-attr]  # MP3 pads a frame


def test_prepare_makes_a_corpus_that_meets_the_policy(tmp_path: Path, home: Home) -> None:
    data = mixed_corpus(tmp_path)
    roots = (tmp_path / "audio",)
    policy = POLICY.model_copy(update={"loudness_lufs": -23.0})
    before = audit_corpus_fn(home, data, policy, policy_name="t", audio_roots=roots).receipt.result
    assert before.counts_by_code.get("sample_rate_mismatch") == 5 and before.counts_by_code.get("channel_mismatch") == 3
    mismatch = next(f.message for f in before.findings if f.code == "sample_rate_mismatch")
    assert (
        mismatch.startswith("train/segments:1: ")
        and "44100 Hz, policy requires 16000 Hz; resample with voxledger corpus prepare" in mismatch
    )

    out = prepare_corpus_fn(home, data, policy, policy_name="t", audio_roots=roots, out_dir=tmp_path / "prepared")
    r = out.receipt.result
    assert (r.n_utterances, r.n_cut, r.n_resampled, r.n_downmixed) == (6, 2, 5, 3)
    assert r.n_loudness_normalised == 6 and not out.cached
    audited = audit_corpus_fn(home, out.corpus_dir, policy, policy_name="t")
    assert audited.receipt.result.verdict == "pass", audited.receipt.result.counts_by_code
    info = sf.info(str(out.corpus_dir / "audio" / "train" / "u0b.wav"))
    assert (info.samplerate, info.channels, round(info.duration, 3)) == (16000, 1, 1.75)
    # lineage: the audit of the derived corpus read the very manifest file prepare wrote, whose
    # receipt names the source tree; every derived file names its source digest and range
    subject = {s.role: s.sha256 for s in out.receipt.subjects}
    assert subject["manifest_file"] in {i.sha256 for i in audited.receipt.inputs}
    derivations = [json.loads(line) for line in home.blobs.get_bytes(subject["derivations"]).splitlines()]
    cut = next(d for d in derivations if d["utterance_id"] == "u0b")
    assert (cut["source_start_sample"], cut["source_stop_sample"], cut["source_sample_rate_hz"]) == (3 * 44100, int(4.75 * 44100), 44100)
    # cached, and rebuilt from the store when the folder is gone, byte for byte
    manifest = (out.corpus_dir / "manifest.jsonl").read_bytes()
    shutil.rmtree(out.corpus_dir)
    again = prepare_corpus_fn(home, data, policy, policy_name="t", audio_roots=(tmp_path, *roots), out_dir=tmp_path / "prepared")
    assert again.cached and again.receipt_id == out.receipt_id
    assert (again.corpus_dir / "manifest.jsonl").read_bytes() == manifest
    loud = sf.read(str(again.corpus_dir / "audio" / "train" / "u4.wav"))[0]
    import pyloudnorm

    assert pyloudnorm.Meter(16000).integrated_loudness(loud) == pytest.approx(-23.0, abs=0.5)


def test_prepare_refuses_broken_input_and_writes_nothing(tmp_path: Path, home: Home) -> None:
    data = mixed_corpus(tmp_path)
    (tmp_path / "audio" / "e.wav").write_bytes(b"RIFF....WAVEjunk")
    with pytest.raises(CorpusError, match=r"train/segments:6: .*e\.wav: cannot decode audio"):
        prepare_corpus_fn(home, data, POLICY, policy_name="t", audio_roots=(tmp_path / "audio",), out_dir=tmp_path / "prepared")
    assert not (tmp_path / "prepared").exists() and not list(tmp_path.glob(".prepared*"))
    with pytest.raises(CorpusError, match=r"outside the corpus and audio roots"):
        prepare_corpus_fn(home, data, POLICY, policy_name="t", out_dir=tmp_path / "prepared")
