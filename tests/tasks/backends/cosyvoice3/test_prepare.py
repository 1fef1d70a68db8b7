"""Data preparation as upstream's recipe does it: Kaldi files, embeddings, 25 Hz tokens, parquet."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from voxledger.schemas.errors import CorpusError
from voxledger.tasks.backends.cosyvoice3 import features
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.backends.cosyvoice3.prepare import PreparedData, prepare_corpus

SPLITS = ("target_train", "target_dev")
# tools/make_parquet_list.py's columns, in its order (with the optional instruct column of v3)
UPSTREAM_COLUMNS = ["utt", "audio_data", "wav", "text", "spk", "utt_embedding", "spk_embedding", "speech_token", "instruct"]


@pytest.fixture(scope="module")
def prepared(fake_config: CosyVoice3Config, small_corpus: Path) -> PreparedData:
    return prepare_corpus(small_corpus, SPLITS, ("spk_t",), fake_config, "You are a helpful assistant.")


def test_kaldi_files_and_instructs(prepared: PreparedData, small_corpus: Path) -> None:
    d = prepared.root / "target_train"
    files = {name: (d / name).read_text(encoding="utf-8").splitlines() for name in ("wav.scp", "text", "utt2spk", "spk2utt", "instruct")}
    assert [line.split()[0] for line in files["wav.scp"]] == ["spk_t_0", "spk_t_1", "spk_t_2", "spk_t_3"]
    assert all(Path(line.split(maxsplit=1)[1]).is_file() for line in files["wav.scp"])
    assert files["text"][0] == "spk_t_0 Kick the ball straight and follow through."
    assert files["spk2utt"] == ["spk_t spk_t_0 spk_t_1 spk_t_2 spk_t_3"]
    assert all(line.endswith(" You are a helpful assistant.<|endofprompt|>") for line in files["instruct"])
    assert prepared.utterances == {"target_train": 4, "target_dev": 1}
    assert (d / "data.list").read_text().splitlines() == [str(p) for p in prepared.parquet["target_train"]]


def test_parquet_has_upstream_columns_tokens_at_25_hz_and_mean_speaker_embedding(prepared: PreparedData, small_corpus: Path) -> None:
    (path,) = prepared.parquet["target_train"]
    table = pq.read_table(path)
    assert table.column_names == UPSTREAM_COLUMNS
    rows = table.to_pylist()
    for row in rows:
        assert row["audio_data"] == (small_corpus / row["wav"]).read_bytes()
        speech, sr = features.read_mono(row["audio_data"])
        duration = speech.shape[1] / sr
        assert abs(len(row["speech_token"]) - duration * 25) <= 1  # 25 Hz codes (4 whisper frames each)
        assert all(0 <= t < 6561 for t in row["speech_token"])
        assert len(row["utt_embedding"]) == 192
    mean = np.mean([r["utt_embedding"] for r in rows], axis=0)
    assert np.allclose(rows[0]["spk_embedding"], mean, atol=1e-6)  # per-speaker mean, as extract_embedding.py


def test_preparation_is_cached_reproducible_and_self_healing(
    prepared: PreparedData, fake_config: CosyVoice3Config, small_corpus: Path
) -> None:
    again = prepare_corpus(small_corpus, SPLITS, ("spk_t",), fake_config, "You are a helpful assistant.")
    assert again.key == prepared.key and again.digest == prepared.digest
    other = prepare_corpus(small_corpus, SPLITS, ("spk_t",), fake_config, "Speak clearly.")
    assert other.key != prepared.key  # the instruct text is part of the key
    (victim,) = other.parquet["target_dev"]
    victim.write_bytes(b"corrupt")
    rebuilt = prepare_corpus(small_corpus, SPLITS, ("spk_t",), fake_config, "Speak clearly.")
    assert rebuilt.digest == other.digest  # re-hashed on reuse, rebuilt identically
    done = json.loads((rebuilt.root / "done.json").read_text())
    assert done["parquet_sha256"] == rebuilt.parquet_sha256


def test_bad_corpora_are_refused_with_the_reason(fake_config: CosyVoice3Config, small_corpus: Path) -> None:
    with pytest.raises(CorpusError, match=r"no utterances in split\(s\) \['nope'\]"):
        prepare_corpus(small_corpus, ("nope",), None, fake_config, "x")


def test_cuts_of_longer_recordings_are_refused_naming_corpus_prepare(
    fake_config: CosyVoice3Config, small_corpus: Path, tmp_path: Path
) -> None:
    """Upstream's parquet holds whole files (``audio_data``), so a segment would train on its whole recording."""
    import shutil

    cut = Path(shutil.copytree(small_corpus, tmp_path / "cut"))
    rows = [json.loads(line) for line in (cut / "manifest.jsonl").read_text().splitlines()]
    first = next(r for r in rows if r["split"] == "target_train")
    first |= {"start_s": 0.0, "end_s": 0.5}
    (cut / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(
        CorpusError, match=rf"1 utterance\(s\) are cuts of longer recordings .*e\.g\. {first['id']}.*voxledger corpus prepare"
    ):
        prepare_corpus(cut, SPLITS, ("spk_t",), fake_config, "x")


def test_whisper_log_mel_matches_the_recipe() -> None:
    t = torch.arange(16000) / 16000
    speech = (0.5 * torch.sin(2 * torch.pi * 440 * t)).unsqueeze(0)
    mel = features.whisper_log_mel(speech)
    assert mel.shape == (1, 128, 100)  # 100 frames per second
    # the clamp at (max - 8) then (x + 4) / 4 bounds the range to 2 units below the peak
    assert float(mel.max() - mel.min()) <= 2.0 + 1e-6
    peak_bin = int(mel[0, :, 50].argmax())
    assert 10 <= peak_bin <= 20  # 440 Hz falls in the low slaney mel bands of a 128-band, 8 kHz filterbank
