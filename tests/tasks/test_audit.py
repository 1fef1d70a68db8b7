"""Corpus audit on real synthesized audio: clean pass, every planted problem, bad input, cache."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.corpus_factory import SENTENCES as SMALL_CORPUS_SENTENCES
from voxledger.schemas.audit import AuditPolicy, LeakageRule
from voxledger.stores.home import Home
from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize
from voxledger.tasks.corpus.manifests import load_corpus, write_kaldi
from voxledger.tasks.stages.audit import audit_corpus_fn

SENTENCES = SMALL_CORPUS_SENTENCES[:6]
VOICES = {"spk_a": ("en-us", 50), "spk_b": ("en+f3", 70)}
POLICY = AuditPolicy(
    name="test",
    leakage=(LeakageRule(key="speaker", partition=(("train", "dev"),)), LeakageRule(key="recording_id"), LeakageRule(key="text_norm")),
)


@pytest.fixture(scope="module")
def clips() -> dict[tuple[str, int], np.ndarray]:
    out = {}
    for spk, (voice, pitch) in VOICES.items():
        for i, text in enumerate(SENTENCES):
            out[(spk, i)] = resample_synthesis(synthesize(text, voice=voice, pitch=pitch), 16000).audio
    return out


def make_corpus(root: Path, clips: dict[tuple[str, int], np.ndarray], extra_lines: list[str] | None = None) -> Path:
    """Sentences 0-3 in train, 4 in dev, 5 in test (spk_b only in test), one JSONL manifest."""
    (root / "wavs").mkdir(parents=True)
    lines = []
    for (spk, i), audio in sorted(clips.items()):
        split = "train" if i < 4 else "dev" if i == 4 else "test"
        if split == "test" and spk == "spk_a":
            continue
        if split != "test" and spk == "spk_b" and i in (4,):
            continue
        uid = f"{spk}_{i}"
        sf.write(root / "wavs" / f"{uid}.wav", audio, 16000, subtype="PCM_16")
        lines.append(
            json.dumps({"id": uid, "audio": f"wavs/{uid}.wav", "text": SENTENCES[i], "speaker": spk, "split": split, "voice_note": "kept"})
        )
    (root / "manifest.jsonl").write_text("\n".join(lines + (extra_lines or [])) + "\n")
    return root


def codes(outcome) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return outcome.receipt.result.counts_by_code


def test_clean_corpus_passes_and_rerun_is_cached(tmp_path: Path, home: Home, clips) -> None:  # type: ignore[no-untyped-def]
    # spk_b appears in train (sentences 0-3) and test: leakage by speaker between the groups
    corpus = make_corpus(tmp_path / "c", {k: v for k, v in clips.items() if not (k[0] == "spk_b" and k[1] < 5)})
    first = audit_corpus_fn(home, corpus, POLICY, policy_name="test")
    assert first.receipt.result.verdict == "pass", first.receipt.result.findings
    assert not first.cached
    stats = first.receipt.result.stats
    assert {s.split: s.utterances for s in stats.splits} == {"train": 4, "dev": 1, "test": 1}
    assert stats.total_hours > 0
    second = audit_corpus_fn(home, corpus, POLICY, policy_name="test")
    assert second.cached and second.receipt_id == first.receipt_id
    # unknown columns survive into the stored manifest
    manifest = json.loads(home.blobs.get_bytes(first.receipt.parameters.manifest_sha256))
    assert manifest["utterances"][0]["extra"] == {"voice_note": "kept"}
    # every audio file went into the store under its digest
    tree = json.loads(home.blobs.get_bytes(first.receipt.parameters.audio_tree_sha256))
    assert all(home.blobs.has(e["sha256"]) for e in tree["entries"])


def test_speaker_leakage_fails_and_lands_in_the_catalog(tmp_path: Path, home: Home, clips) -> None:  # type: ignore[no-untyped-def]
    corpus = make_corpus(tmp_path / "c", clips)
    out = audit_corpus_fn(home, corpus, POLICY, policy_name="test")
    assert out.receipt.result.verdict == "fail"
    leaks = [f for f in out.receipt.result.findings if f.code == "split_leakage"]
    assert any("speaker 'spk_b'" in f.message for f in leaks)
    assert all(f.severity == "error" for f in leaks)
    with home.catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT code, severity FROM audit_findings WHERE receipt_sha256 = ? AND code = 'split_leakage'", [out.receipt_id]
        ).fetchall()
    assert rows and all(r[1] == "error" for r in rows)


def test_planted_signal_problems(tmp_path: Path, home: Home, clips) -> None:  # type: ignore[no-untyped-def]
    keep = {k: v for k, v in clips.items() if k[0] == "spk_a"}
    corpus = make_corpus(tmp_path / "c", keep)
    w = corpus / "wavs"
    audio, _ = sf.read(w / "spk_a_0.wav")
    sf.write(w / "spk_a_0.wav", np.clip(audio * 8, -1, 1), 16000, subtype="PCM_16")  # clipped
    sf.write(w / "spk_a_1.wav", np.zeros(32000), 16000, subtype="PCM_16")  # silent
    sf.write(w / "spk_a_2.wav", 0.1 * np.sin(np.arange(22050 * 31) * 0.05), 22050, subtype="PCM_16")  # rate + long
    lines = (corpus / "manifest.jsonl").read_text().splitlines()
    rec = json.loads(lines[3])
    rec["text"] = "  "
    lines[3] = json.dumps(rec)
    dup = json.loads(lines[0]) | {"id": "copy", "split": "dev", "text": "A completely different sentence here."}
    (w / "copy.wav").write_bytes((w / "spk_a_0.wav").read_bytes())
    dup["audio"] = "wavs/copy.wav"
    lines.append(json.dumps(dup))
    (corpus / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    out = audit_corpus_fn(home, corpus, POLICY, policy_name="test")
    c = codes(out)
    for code in ("clipping", "silence", "sample_rate_mismatch", "duration_out_of_bounds", "empty_transcript", "duplicate_audio"):
        assert c.get(code), f"{code} not found in {c}"
    assert out.receipt.result.verdict == "fail"


def test_near_duplicate_by_fingerprint(tmp_path: Path, home: Home, clips) -> None:  # type: ignore[no-untyped-def]
    corpus = make_corpus(tmp_path / "c", {k: v for k, v in clips.items() if k[0] == "spk_a"})
    audio, _ = sf.read(corpus / "wavs" / "spk_a_0.wav")
    sf.write(corpus / "wavs" / "quiet.wav", audio * 0.5, 16000, subtype="PCM_16")
    line = json.dumps(
        {"id": "quiet", "audio": "wavs/quiet.wav", "text": "Another sentence entirely, said twice.", "speaker": "spk_z", "split": "train"}
    )
    with open(corpus / "manifest.jsonl", "a") as f:
        f.write(line + "\n")
    out = audit_corpus_fn(home, corpus, POLICY, policy_name="test")
    near = [f for f in out.receipt.result.findings if f.code == "near_duplicate_audio"]
    assert [tuple(f.utterance_ids) for f in near] == [("quiet", "spk_a_0")]
    assert near[0].severity == "warning" and (near[0].value or 0) <= 12


def test_bad_input_becomes_findings_not_crashes(tmp_path: Path, home: Home, clips) -> None:  # type: ignore[no-untyped-def]
    bad = [
        '{"id": "broken", "audio": ',
        json.dumps({"id": "ghost", "audio": "wavs/none.wav", "text": "Where is it?", "speaker": "spk_a", "split": "train"}),
        json.dumps({"id": "escape", "audio": "../outside.wav", "text": "Out.", "speaker": "spk_a", "split": "train"}),
        json.dumps({"id": "nospeaker", "audio": "wavs/x.wav", "text": "x", "split": "train"}),
    ]
    corpus = make_corpus(tmp_path / "c", {k: v for k, v in clips.items() if k[0] == "spk_a"}, bad)
    with open(corpus / "manifest.jsonl", "ab") as f:
        f.write(b'{"id": "latin1", "text": "caf\xe9"}\n')
    out = audit_corpus_fn(home, corpus, POLICY, policy_name="test")
    by_code = {f.code: f for f in out.receipt.result.findings}
    unreadable = [f for f in out.receipt.result.findings if f.code == "manifest_unreadable_line"]
    assert sorted(f.line for f in unreadable) == [6, 10]  # 5 good lines, then the planted ones
    assert "manifest.jsonl:" in by_code["manifest_unreadable_line"].message
    assert "not UTF-8" in " ".join(f.message for f in out.receipt.result.findings)
    assert by_code["audio_missing"].utterance_ids == ("ghost",)
    assert by_code["path_escape"].utterance_ids == ("escape",)
    assert "speaker" in by_code["manifest_invalid_record"].message
    assert out.receipt.result.verdict == "fail"
    assert home.receipts.read(out.receipt_id)  # the receipt is whole and valid


def test_kaldi_round_trip_keeps_everything(tmp_path: Path, clips) -> None:  # type: ignore[no-untyped-def]
    corpus = make_corpus(tmp_path / "c", {k: v for k, v in clips.items() if k[0] == "spk_a"})
    loaded = load_corpus(corpus)
    dirs = write_kaldi(loaded.utterances, corpus, tmp_path / "kaldi")
    assert sorted(d.name for d in dirs) == ["dev", "train"]
    assert (tmp_path / "kaldi" / "train" / "spk2utt").read_text().startswith("spk_a ")
    back = load_corpus(tmp_path / "kaldi")
    assert not back.issues
    a = {u.id: (u.text, u.speaker, u.split) for u in loaded.utterances.utterances}
    b = {u.id: (u.text, u.speaker, u.split) for u in back.utterances.utterances}
    assert a == b


def test_leakage_needs_a_key() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="at least 1"):
        AuditPolicy(name="x", leakage=())


def test_bucketed_near_duplicate_search_equals_brute_force() -> None:
    from voxledger.tasks.audit.fingerprint import hamming, near_duplicate_pairs

    rng = np.random.default_rng(7)
    base = rng.integers(0, 256, (60, 32), dtype=np.uint8)
    base[:30, :4] = base[0, :4]  # a crowded bucket, as clips sharing an opening second give
    codes = {f"u{i:03d}": bytes(row) for i, row in enumerate(base)}
    for i in range(25):  # near copies with 0-20 flipped bits
        row = base[i].copy()
        for bit in rng.choice(256, int(rng.integers(0, 21)), replace=False):
            row[bit // 8] ^= 1 << (bit % 8)
        codes[f"v{i:03d}"] = bytes(row)
    codes["silent"] = bytes(32)
    for max_bits in (0, 6, 15):
        ids = sorted(k for k, c in codes.items() if any(c))
        brute = sorted((a, b, hamming(codes[a], codes[b])) for i, a in enumerate(ids) for b in ids[i + 1 :]
                       if hamming(codes[a], codes[b]) <= max_bits)  # fmt: skip
        assert near_duplicate_pairs(codes, max_bits) == brute


def test_audio_changed_between_hashing_and_measuring_is_refused(tmp_path: Path, home: Home) -> None:
    from voxledger.schemas.errors import DigestMismatchError
    from voxledger.schemas.manifest import Utterance
    from voxledger.tasks.audit.measure import measure_file

    wav = tmp_path / "a.wav"
    sf.write(wav, 0.1 * np.sin(np.arange(16000) / 5.0), 16000)
    utt = Utterance(id="a", audio="a.wav", text="hello there", speaker="s", recording_id="r", split="train")
    hashed = hashlib.sha256(wav.read_bytes()).hexdigest()
    facts = measure_file(tmp_path, utt, POLICY, expected_sha256=hashed, store=home.blobs)
    assert facts.error_code is None and home.blobs.intact(hashed)  # measured from the bytes it stored
    sf.write(wav, 0.2 * np.sin(np.arange(16000) / 5.0), 16000)
    with pytest.raises(DigestMismatchError, match="changed during the audit"):
        measure_file(tmp_path, utt, POLICY, expected_sha256=hashed)


def test_an_impossible_transcript_for_its_clip_is_an_error(tmp_path: Path, home: Home, clips) -> None:  # type: ignore[no-untyped-def]
    """A 1 MB transcript for a clip of a few seconds is not a fast speaker but the wrong transcript."""
    keep = {k: v for k, v in clips.items() if not (k[0] == "spk_b" and k[1] < 5)}
    corpus = make_corpus(tmp_path / "c", keep)
    sf.write(corpus / "wavs" / "huge.wav", keep[("spk_a", 0)], 16000, subtype="PCM_16")
    line = json.dumps({"id": "huge", "audio": "wavs/huge.wav", "text": "word " * 200_000, "speaker": "spk_a", "split": "train"})
    with open(corpus / "manifest.jsonl", "a") as f:
        f.write(line + "\n")
    out = audit_corpus_fn(home, corpus, POLICY, policy_name="test")
    rate = [f for f in out.receipt.result.findings if f.code == "speaking_rate" and "huge" in f.utterance_ids]
    assert len(rate) == 1 and rate[0].severity == "error" and "does not belong to this clip" in rate[0].message
    assert POLICY.speaking_rate_severity == "warning"  # the policy's own severity is for plausible rates only
    assert out.receipt.result.verdict == "fail"


def test_asr_agreement_hears_each_segment_not_its_whole_recording(clips: dict[tuple[str, int], np.ndarray], tmp_path: Path) -> None:
    """Two sentences cut from one recording (start_s/end_s): each is transcribed on its own samples.
    Heard as the whole recording, each would score a CER near 1 against its one sentence."""
    from voxledger.schemas.audit import AsrAgreementPolicy
    from voxledger.tasks.audit.measure import measure_file
    from voxledger.tasks.audit.model_checks import asr_agreement
    from voxledger.tasks.corpus.manifests import load_corpus

    gap = np.zeros(8000, dtype=np.float32)
    a, b = clips[("spk_a", 0)], clips[("spk_a", 1)]
    (tmp_path / "wavs").mkdir()
    sf.write(tmp_path / "wavs" / "rec.wav", np.concatenate([gap, a, gap, b, gap]), 16000, subtype="PCM_16")
    cuts = [(0, 0.0, (len(a) + 8000) / 16000), (1, (len(a) + 8000) / 16000, (len(a) + len(b) + 24000) / 16000)]
    lines = [json.dumps({"id": f"seg{i}", "audio": "wavs/rec.wav", "text": SENTENCES[i], "speaker": "spk_a", "recording_id": "rec",
                         "split": "train", "start_s": start, "end_s": end}) for i, start, end in cuts]  # fmt: skip
    (tmp_path / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    loaded = load_corpus(tmp_path)
    utts = list(loaded.utterances.utterances)
    facts = {u.id: measure_file(tmp_path, u, POLICY) for u in utts}
    every, agreement = asr_agreement(utts, facts, AsrAgreementPolicy(enabled=True, max_cer=1e-9))  # every clip reported, with its CER
    cer = {f.utterance_ids[0]: f.value for f in every}
    assert set(cer) <= {"seg0", "seg1"} and all(v is not None and v < 0.3 for v in cer.values()), every
    assert {c.utterance_id: c.cer for c in agreement.clips} == {u.id: cer.get(u.id, 0.0) for u in utts if u.id in cer} | {
        c.utterance_id: c.cer for c in agreement.clips if c.utterance_id not in cer
    }
    assert [c.utterance_id for c in agreement.clips] == [u.id for u in utts] and {c.language for c in agreement.clips} == {"en"}


def test_an_audit_rerun_after_a_fixed_transcript_hears_no_clip_twice(
    clips: dict[tuple[str, int], np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ASR agreement's transcripts are memoised per home by the cut's digest and the ASR spec: a
    re-run after a transcript is fixed transcribes nothing, a rewritten clip is heard again, and
    the findings equal a fresh home's."""
    from voxledger.schemas.audit import AsrAgreementPolicy
    from voxledger.tasks.metrics.asr import AsrModel

    heard: list[int] = []
    real = AsrModel.hear

    def counted(self: AsrModel, wav16k: np.ndarray, language: str | None = None) -> object:
        heard.append(len(wav16k))
        return real(self, wav16k, language)

    monkeypatch.setattr(AsrModel, "hear", counted)
    (tmp_path / "c" / "wavs").mkdir(parents=True)
    rows = []
    for i in range(3):
        sf.write(tmp_path / "c" / "wavs" / f"u{i}.wav", clips[("spk_a", i)], 16000, subtype="PCM_16")
        rows.append(
            {"id": f"u{i}", "audio": f"wavs/u{i}.wav", "text": SENTENCES[i], "speaker": "spk_a", "recording_id": f"r{i}", "split": "train"}
        )
    rows[1]["text"] = SENTENCES[4]  # a wrong transcript: the finding to fix
    manifest = tmp_path / "c" / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    policy = POLICY.model_copy(update={"asr_agreement": AsrAgreementPolicy(enabled=True, max_cer=0.3)})
    home = Home(tmp_path / "h")
    first = audit_corpus_fn(home, tmp_path / "c", policy, policy_name="p.yaml").receipt.result
    flagged = {f.utterance_ids[0] for f in first.findings if f.code == "asr_disagreement"}
    assert len(heard) == 3 and "u1" in flagged
    rows[1]["text"] = SENTENCES[1]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fixed = audit_corpus_fn(Home(tmp_path / "h"), tmp_path / "c", policy, policy_name="p.yaml")
    assert not fixed.cached and len(heard) == 3, "no clip transcribed again"
    assert {f.utterance_ids[0] for f in fixed.receipt.result.findings if f.code == "asr_disagreement"} == flagged - {"u1"}
    fresh = audit_corpus_fn(Home(tmp_path / "fresh"), tmp_path / "c", policy, policy_name="p.yaml").receipt.result
    assert len(heard) == 6 and fresh.findings == fixed.receipt.result.findings
    sf.write(tmp_path / "c" / "wavs" / "u2.wav", clips[("spk_a", 2)] * 0.5, 16000, subtype="PCM_16")  # new bytes, same words
    audit_corpus_fn(Home(tmp_path / "h"), tmp_path / "c", policy, policy_name="p.yaml")
    assert len(heard) == 7, "only the rewritten clip is heard again"


def test_path_syntax_in_ids_and_a_lookalike_speaker_are_refused(tmp_path: Path, home: Home, clips) -> None:  # type: ignore[no-untyped-def]
    """An id '../../..', a NUL in a speaker id and a transcript become manifest findings naming the line; a
    speaker 'ѕpk_a' (Cyrillic ѕ) beside 'spk_a' is one voice split in two and is an error."""
    bad = [
        json.dumps({"id": "../../..", "audio": "wavs/spk_a_0.wav", "text": "Up.", "speaker": "spk_a", "split": "train"}),
        json.dumps({"id": "nul", "audio": "wavs/spk_a_1.wav", "text": "A\u0000b.", "speaker": "spk_a", "split": "train"}),
        json.dumps({"id": "nulspk", "audio": "wavs/spk_a_2.wav", "text": "Ok.", "speaker": "spk\u0000a", "split": "train"}),
    ]
    corpus = make_corpus(tmp_path / "c", {k: v for k, v in clips.items() if k[0] == "spk_a"}, bad)
    rows = [json.loads(line) for line in (corpus / "manifest.jsonl").read_text().splitlines()]
    rows[0]["speaker"] = "\u0455pk_a"  # the attack: one look-alike letter
    (corpus / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = audit_corpus_fn(home, corpus, POLICY, policy_name="test").receipt.result
    invalid = [f for f in out.findings if f.code == "manifest_invalid_record"]
    assert len(invalid) == 3 and all(f.severity == "error" for f in invalid), invalid
    messages = " ".join(f.message for f in invalid)
    assert "'../../..' holds a path separator" in messages and "NUL" in messages
    (lookalike,) = [f for f in out.findings if f.code == "speaker_lookalike"]
    assert lookalike.severity == "error" and "cyrillic" in lookalike.message and "'s'" in lookalike.message
    assert out.verdict == "fail"
