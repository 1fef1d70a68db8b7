"""Kaldi data directories as recipes write them: absolute and ``..`` paths under declared audio
roots, segments, spk2gender/utt2lang/utt2dur, pipe commands refused; the exporter's output reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tasks.corpus.factory import POLICY, sentence, write_clip
from voxledger.schemas.errors import CorpusError, UnsafePathError
from voxledger.stores.home import Home
from voxledger.tasks.corpus.manifests import load_corpus, write_kaldi
from voxledger.tasks.stages.audit import audit_corpus_fn

SPLITS = {"train": ("spk_a", range(4)), "dev": ("spk_a", range(4, 5)), "test": ("spk_b", range(5, 7))}


def kaldi_corpus(base: Path, wav_value) -> Path:  # type: ignore[no-untyped-def]
    """``base/data/<split>/`` Kaldi dirs; audio in ``base/audio``; ``wav_value(path, split_dir)`` writes wav.scp."""
    for split, (spk, ids) in SPLITS.items():
        d = base / "data" / split
        d.mkdir(parents=True)
        wav, text, utt2spk = [], [], []
        for i in ids:
            uid = f"{spk}_{i}"
            path = write_clip(base / "audio" / f"{uid}.wav", 1.5, seed=i)
            wav.append(f"{uid} {wav_value(path, d)}")
            text.append(f"{uid} {sentence(i)}")
            utt2spk.append(f"{uid} {spk}")
        for name, lines in (("wav.scp", wav), ("text", text), ("utt2spk", utt2spk)):
            (d / name).write_text("\n".join(lines) + "\n")
    return base / "data"


def test_absolute_paths_need_an_audio_root(tmp_path: Path, home: Home) -> None:
    data = kaldi_corpus(tmp_path, lambda p, d: str(p.absolute()))
    refused = audit_corpus_fn(home, data, POLICY, policy_name="t")
    escapes = [f for f in refused.receipt.result.findings if f.code == "path_escape"]
    assert refused.receipt.result.verdict == "fail" and len(escapes) == 7
    assert "dev/wav.scp:1" in escapes[0].message or "wav.scp:1" in escapes[0].message
    assert "--audio-root" in escapes[0].message and "none declared" in escapes[0].message

    ok = audit_corpus_fn(home, data, POLICY, policy_name="t", audio_roots=(tmp_path / "audio",))
    assert ok.receipt.result.verdict == "pass", ok.receipt.result.counts_by_code
    assert ok.receipt.result.n_utterances == 7
    # the roots are not part of the key: another declaration of the same files is a cache hit
    again = audit_corpus_fn(home, data, POLICY, policy_name="t", audio_roots=(tmp_path, tmp_path / "audio"))
    assert again.cached and again.receipt_id == ok.receipt_id


def test_relative_paths_leaving_the_split_folder_resolve_inside_the_corpus(tmp_path: Path, home: Home) -> None:
    # ESPnet habit: data/<split>/wav.scp says ../../audio/x.wav; relative to data/ that is ../audio/x.wav
    data = kaldi_corpus(tmp_path, lambda p, d: f"../../audio/{p.name}")
    assert load_corpus(data).utterances.utterances[0].audio == "../audio/spk_a_4.wav"
    with pytest.raises(UnsafePathError, match="outside the corpus root"):
        from voxledger.tasks.audit.measure import resolve_audio

        resolve_audio(data, load_corpus(data).utterances.utterances[0])
    out = audit_corpus_fn(home, data, POLICY, policy_name="t", audio_roots=(tmp_path,))
    assert out.receipt.result.verdict == "pass", out.receipt.result.counts_by_code
    # paths that climb out but land inside the corpus folder need no root at all
    inside = tmp_path / "inside"
    for split, (spk, ids) in SPLITS.items():
        d = inside / split
        d.mkdir(parents=True)
        for i in ids:
            write_clip(inside / "audio" / f"{spk}_{i}.wav", 1.5, seed=i)
        (d / "wav.scp").write_text("".join(f"{spk}_{i} ../audio/{spk}_{i}.wav\n" for i in ids))
        (d / "text").write_text("".join(f"{spk}_{i} {sentence(i)}\n" for i in ids))
        (d / "utt2spk").write_text("".join(f"{spk}_{i} {spk}\n" for i in ids))
    assert audit_corpus_fn(home, inside, POLICY, policy_name="t").receipt.result.verdict == "pass"


def test_symlink_out_of_every_root_is_refused(tmp_path: Path, home: Home) -> None:
    data = kaldi_corpus(tmp_path, lambda p, d: str(p.absolute()))
    outside = write_clip(tmp_path / "elsewhere" / "x.wav", 1.5, seed=99)
    target = tmp_path / "audio" / "spk_b_6.wav"
    target.unlink()
    target.symlink_to(outside)
    out = audit_corpus_fn(home, data, POLICY, policy_name="t", audio_roots=(tmp_path / "audio",))
    assert [f.utterance_ids for f in out.receipt.result.findings if f.code == "path_escape"] == [("spk_b_6",)]


def test_pipe_commands_are_refused_with_the_line_and_the_fix(tmp_path: Path, home: Home) -> None:
    data = kaldi_corpus(tmp_path, lambda p, d: f"sox {p} -t wav - |" if p.stem == "spk_a_2" else str(p))
    with pytest.raises(CorpusError, match=r"train/wav\.scp:3: entry 'spk_a_2' is a pipe command .*point wav\.scp at the files"):
        load_corpus(data, audio_roots=(tmp_path,))
    with pytest.raises(CorpusError):
        audit_corpus_fn(home, data, POLICY, policy_name="t", audio_roots=(tmp_path,))
    assert [home.receipts.read_document(r)["kind"] for r in home.receipts.ids()].count("audit") == 0  # nothing half-written


def test_exporter_writes_what_the_reader_reads(tmp_path: Path, home: Home) -> None:
    data = kaldi_corpus(tmp_path / "src", lambda p, d: f"../../audio/{p.name}")
    loaded = load_corpus(data, audio_roots=(tmp_path / "src",))
    for relative in (False, True):
        out = tmp_path / f"export-{relative}"
        write_kaldi(loaded.utterances, data, out, relative=relative)
        back = load_corpus(out, audio_roots=(tmp_path / "src" / "audio",))
        assert not back.issues
        assert {u.id: (u.text, u.speaker, u.split) for u in back.utterances.utterances} == {
            u.id: (u.text, u.speaker, u.split) for u in loaded.utterances.utterances
        }
        result = audit_corpus_fn(home, out, POLICY, policy_name="t", audio_roots=(tmp_path / "src" / "audio",)).receipt.result
        assert result.verdict == "pass", result.counts_by_code


def test_segments_genders_languages_durations(tmp_path: Path, home: Home) -> None:
    d = tmp_path / "data" / "train"
    d.mkdir(parents=True)
    rec = write_clip(tmp_path / "audio" / "rec1.wav", 6.0, seed=1)
    write_clip(tmp_path / "audio" / "rec2.wav", 3.0, seed=2)
    (d / "wav.scp").write_text(f"rec1 {rec}\nrec2 ../../audio/rec2.wav\n")
    (d / "segments").write_text("u1 rec1 0.00 1.50\nu2 rec1 2.00 3.75\nu3 rec2 0.50 -1\n")
    (d / "text").write_text(f"u1 {sentence(1)}\nu2 {sentence(2, 1.75)}\nu3 {sentence(3, 2.5)}\n")
    (d / "utt2spk").write_text("u1 s1\nu2 s1\nu3 s2\n")
    (d / "spk2gender").write_text("s1 f\ns2 m\n")
    (d / "utt2lang").write_text("u1 en\nu2 en\nu3 de\n")
    (d / "utt2dur").write_text("u1 1.5\nu2 1.75\nu3 2.5\n")
    loaded = load_corpus(tmp_path / "data", audio_roots=(tmp_path / "audio",))
    by_id = {u.id: u for u in loaded.utterances.utterances}
    assert (by_id["u2"].recording_id, by_id["u2"].start_s, by_id["u2"].end_s) == ("rec1", 2.0, 3.75)
    assert by_id["u3"].end_s is None and by_id["u3"].language == "de" and by_id["u3"].extra["gender"] == "m"
    assert by_id["u1"].duration_s == 1.5
    out = audit_corpus_fn(home, tmp_path / "data", POLICY, policy_name="t", audio_roots=(tmp_path / "audio",))
    result = out.receipt.result
    assert result.verdict == "pass", result.counts_by_code
    assert "duplicate_audio" not in result.counts_by_code  # two cuts of rec1 are different utterances
    assert result.stats.total_hours == pytest.approx((1.5 + 1.75 + 2.5) / 3600, abs=1e-6)  # the cuts, not the recordings
    # a segment past the end of its recording and the same cut listed twice
    (d / "segments").write_text("u1 rec1 0.00 1.50\nu2 rec1 0.00 1.50\nu3 rec2 0.50 9.00\n")
    (d / "text").write_text(f"u1 {sentence(1)}\nu2 {sentence(2)}\nu3 {sentence(3, 2.5)}\n")
    bad = audit_corpus_fn(home, tmp_path / "data", POLICY, policy_name="t", audio_roots=(tmp_path / "audio",)).receipt.result
    assert bad.counts_by_code.get("duplicate_audio") == 1 and bad.counts_by_code.get("audio_unreadable") == 1
    assert "past the end" in next(f.message for f in bad.findings if f.code == "audio_unreadable")
