"""Tiny backend data: alignment -> frame durations, the demo corpus reader, batch order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voxledger.schemas.errors import CorpusError
from voxledger.tasks.backends.tiny.align import frame_durations
from voxledger.tasks.backends.tiny.audio import compute_norm_stats, frame_count
from voxledger.tasks.backends.tiny.data import TinyDataset, TinyUtterance, load_utterances
from voxledger.tasks.backends.tiny.model import TinyTTSConfig
from voxledger.tasks.corpus.demo import build_demo_corpus
from voxledger.tasks.corpus.espeak import phoneme_inventory

BASE_SPEAKERS = ("spk-b1", "spk-b2", "spk-b3", "spk-b4")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-data") / "corpus"
    build_demo_corpus(out, size="tiny")
    return out


def config() -> TinyTTSConfig:
    return TinyTTSConfig(phonemes=tuple(phoneme_inventory()), speakers=BASE_SPEAKERS)


def test_frame_durations_round_boundaries_and_keep_the_total() -> None:
    # boundaries 300, 700, 1000 samples -> 1.17, 2.73, 3.9 hops -> 1, 3, then pinned to 7 frames
    assert frame_durations([300, 700, 1000], 7).tolist() == [1, 2, 4]
    # a phoneme shorter than half a hop gets no frame; ends past the clip are clipped
    assert frame_durations([256, 300, 5000], 3).tolist() == [1, 0, 2]
    assert frame_durations([10], 1).tolist() == [1]


def test_corpus_utterances_are_aligned_to_their_mels(corpus: Path) -> None:
    utts = load_utterances(corpus, ("train",), config())
    assert len(utts) == 12  # tiny corpus: 3 sentences x 4 base voices
    for u in utts:
        assert u.mel.shape == (u.n_frames, 80) and u.mel.dtype == np.float32
        assert int(u.durations.sum()) == u.n_frames
        assert (u.durations >= 0).all() and u.phoneme_ids.min() >= 1
        assert u.phoneme_ids[0] == config().phoneme_id("_")  # leading silence first
    assert frame_count(16000) == 63


def test_unknown_speaker_and_missing_split_are_reported(corpus: Path) -> None:
    with pytest.raises(CorpusError, match="no utterances in splits"):
        load_utterances(corpus, ("nope",), config())
    target = load_utterances(corpus, ("target_train",), config())
    norm = compute_norm_stats(u.mel for u in target)
    with pytest.raises(CorpusError, match="add_speaker"):
        TinyDataset(target, config(), norm)


def synthetic(n: int, seed: int = 0) -> list[TinyUtterance]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(40, 200, size=n)
    return [
        TinyUtterance(f"u{i}", BASE_SPEAKERS[i % 4], np.array([1, 2, 3]),
                      np.array([10, 10, t - 20]), np.zeros((t, 80), np.float32))
        for i, t in enumerate(lengths.tolist())
    ]  # fmt: skip


def test_batch_plan_is_a_pure_function_of_epoch_and_seed() -> None:
    utts = synthetic(300)
    norm = compute_norm_stats(u.mel + 1.0 for u in utts[:2])
    ds = TinyDataset(utts, config(), norm, frames_per_batch=1500)
    plan = ds.batch_plan(epoch=3, seed=7)
    again = TinyDataset(utts, config(), norm, frames_per_batch=1500).batch_plan(epoch=3, seed=7)
    assert plan == again
    assert plan != ds.batch_plan(epoch=4, seed=7) and plan != ds.batch_plan(epoch=3, seed=8)
    assert sorted(i for b in plan for i in b) == list(range(300))  # every utterance exactly once
    for batch in plan:
        longest = max(utts[i].n_frames for i in batch)
        assert len(batch) == 1 or longest * len(batch) <= 1500


def test_collate_pads_and_normalises(corpus: Path) -> None:
    utts = load_utterances(corpus, ("train",), config())
    norm = compute_norm_stats(u.mel for u in utts)
    batch = TinyDataset(utts, config(), norm).collate([0, 5])
    assert batch.ids == (utts[0].id, utts[5].id)
    assert batch.mels.shape == (2, max(utts[0].n_frames, utts[5].n_frames), 80)
    assert batch.n_frames == utts[0].n_frames + utts[5].n_frames
    np.testing.assert_allclose(batch.mels[0, : utts[0].n_frames].numpy(), norm.normalize(utts[0].mel))
    assert batch.speaker_ids.tolist() == [BASE_SPEAKERS.index(utts[i].speaker) for i in (0, 5)]


def test_a_mandarin_manifest_phonemizes_with_espeaks_mandarin_voice() -> None:
    """Manifests and Whisper say `zh`; espeak-ng names Mandarin `cmn` (a synthesis asked `zh` failed: no such voice)."""
    from voxledger.tasks.backends.tiny.align import espeak_voice
    from voxledger.tasks.corpus import espeak

    assert espeak_voice("zh") == "cmn" and espeak_voice("en") == "en-us"
    assert len(espeak.synthesize("你好。", espeak_voice("zh")).phonemes) > 2
