"""The home memo of forced alignments: a training stage binds a corpus without alignment files
without aligning unchanged clips again, and a damaged, misfiled or outdated entry is never used."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from voxledger.schemas.errors import CorpusError
from voxledger.stores.home import Home
from voxledger.stores.memo import DerivedMemo
from voxledger.tasks.backends.tiny import align, data
from voxledger.tasks.backends.tiny import audio as tiny_audio
from voxledger.tasks.backends.tiny.backend import TinyBackend
from voxledger.tasks.corpus import audio as corpus_audio
from voxledger.tasks.corpus import espeak
from voxledger.tasks.corpus.demo import build_voice_corpus
from voxledger.tasks.corpus.manifests import load_corpus
from voxledger.tasks.corpus.sources import audio_digests


@pytest.fixture(scope="module")
def voice_master(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder, clips = build_voice_corpus(tmp_path_factory.mktemp("memo") / "voice", size="tiny")
    assert clips == 5
    return folder


@pytest.fixture
def voice(voice_master: Path, tmp_path: Path) -> Path:
    """A copy each test may change."""
    import shutil

    return Path(shutil.copytree(voice_master, tmp_path / "voice"))


@pytest.fixture
def aligned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts forced alignment ran on (the real aligner, counted); the process memo emptied."""
    calls: list[str] = []
    real = align.durations_by_warp

    def counted(mel: np.ndarray, text: str, language: str) -> align.Durations:
        calls.append(text)
        return real(mel, text, language)

    monkeypatch.setattr(data, "durations_by_warp", counted)
    monkeypatch.setattr(data, "_DURATIONS", {})
    return calls


def bind(root: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch, *, memo: bool = True) -> tuple[dict[str, bytes], Home]:
    """The features a training stage binds, as a new process would (empty process memo, new home object)."""
    monkeypatch.setattr(data, "_DURATIONS", {})
    home = Home(root)
    loaded = load_corpus(corpus)
    digests, _ = audio_digests(loaded, home.stat_cache)
    return TinyBackend().feature_files(loaded, digests, home.memo if memo else None), home


def rows(root: Path) -> dict[str, str]:
    with sqlite3.connect(root / "cache" / "derived.sqlite") as conn:
        return dict(conn.execute("SELECT key_sha256, entry_sha256 FROM derived WHERE kind = ?", [data.MEMO_KIND]).fetchall())


def test_a_rebinding_reads_every_alignment_back_byte_identical(
    voice: Path, tmp_path: Path, aligned: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, home = bind(tmp_path / "home", voice, monkeypatch)
    assert len(aligned) == 5 and home.memo.stats.stored == 5 and home.memo.persistent
    again, home = bind(tmp_path / "home", voice, monkeypatch)
    assert again == first
    assert len(aligned) == 5, "nothing aligned a second time"
    assert (home.memo.stats.hits, home.memo.stats.misses, home.memo.stats.rejected) == (5, 0, 0)
    direct, _ = bind(tmp_path / "other", voice, monkeypatch, memo=False)
    assert direct == first and len(aligned) == 10, "the memo returns what aligning returns"
    assert all(b'"source":"espeak_warp"' in v for v in first.values())


def test_a_damaged_or_misfiled_entry_is_refused_and_aligned_again(
    voice: Path, tmp_path: Path, aligned: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "home"
    first, home = bind(root, voice, monkeypatch)
    (k1, e1), (k2, e2), (_, e3) = sorted(rows(root).items())[:3]
    # one entry's bytes forged (a frame more for the first phoneme, still valid JSON), another
    # row pointing at an intact entry filed for a different clip
    blob = home.blobs.path_of(e1)
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes().replace(b'"frames":[', b'"frames":[1,', 1))
    with sqlite3.connect(root / "cache" / "derived.sqlite") as conn:
        conn.execute("UPDATE derived SET entry_sha256 = ? WHERE key_sha256 = ?", [e3, k2])
    before = len(aligned)
    again, home = bind(root, voice, monkeypatch)
    assert again == first
    assert len(aligned) - before == 2 and home.memo.stats.rejected == 2 and home.memo.stats.hits == 3
    healed = rows(root)
    assert healed[k1] == e1 and healed[k2] == e2, "the refused rows point at freshly written, intact entries again"
    home.blobs.verify(e1)
    _, home = bind(root, voice, monkeypatch)
    assert (home.memo.stats.hits, home.memo.stats.rejected) == (5, 0)


def test_new_audio_text_or_aligner_code_misses(voice: Path, tmp_path: Path, aligned: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "home"
    first, _ = bind(root, voice, monkeypatch)
    wav = sorted((voice / "wavs").glob("*.wav"))[0]
    samples, rate = sf.read(wav, dtype="int16")
    sf.write(wav, (samples // 2).astype(np.int16), rate, subtype="PCM_16")  # the same words, quieter: new bytes
    lines = (voice / "metadata.csv").read_text().splitlines(keepends=True)
    uid, text, _ = lines[-1].rstrip("\n").split("|")
    edited = text.rstrip(".") + "!"
    lines[-1] = f"{uid}|{edited}|{edited}\n"
    (voice / "metadata.csv").write_text("".join(lines))
    n = len(aligned)
    changed, home = bind(root, voice, monkeypatch)
    assert aligned[n:] == [lines[0].split("|")[1], edited], "only the rewritten clip and the edited transcript are aligned"
    assert home.memo.stats.hits == 3 and changed != first
    n = len(aligned)
    monkeypatch.setattr(data, "aligner_identity", lambda: "0" * 64)
    again, home = bind(root, voice, monkeypatch)
    assert again == changed and len(aligned) - n == 5 and home.memo.stats.hits == 0, "other aligner code: every clip again"


def test_alignments_done_before_a_failing_clip_are_kept(
    voice: Path, tmp_path: Path, aligned: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = (voice / "metadata.csv").read_text().splitlines(keepends=True)
    uid, original = lines[-1].split("|")[0], lines[-1]
    long = " ".join(["a transcript far longer than what the clip says"] * 8)
    lines[-1] = f"{uid}|{long}|{long}\n"
    (voice / "metadata.csv").write_text("".join(lines))
    with pytest.raises(CorpusError, match="check the transcript matches the audio"):
        bind(tmp_path / "home", voice, monkeypatch)
    (voice / "metadata.csv").write_text("".join([*lines[:-1], original]))
    n = len(aligned)
    _, home = bind(tmp_path / "home", voice, monkeypatch)
    assert len(aligned) - n == 1 and home.memo.stats.hits == 4, "the four clips aligned before the failure were kept"


def test_the_aligner_identity_covers_every_module_alignment_runs_through() -> None:
    for fn in (
        data.read_audio_16k,
        tiny_audio.log_mel,
        align.durations_by_warp,
        align.cepstra,
        corpus_audio.read_utterance,
        espeak.synthesize,
    ):
        assert fn.__module__ in align.ALIGNER_MODULES, fn
    assert len(align.aligner_identity()) == 64


def test_a_read_only_memo_keeps_values_in_memory_only(tmp_path: Path) -> None:
    from voxledger.stores.blobs import LocalBlobStore

    memo = DerivedMemo(tmp_path / "cache" / "derived.sqlite", LocalBlobStore(tmp_path / "store"), read_only=True)
    memo.put_many("k", {"a": ({"x": 1}, {"v": [1, 2]})})
    assert memo.get_many("k", {"a": {"x": 1}, "b": {"x": 2}}) == {"a": {"v": [1, 2]}}
    assert not memo.persistent and not (tmp_path / "cache").exists()
