"""The Mandarin demo corpus: byte-identical rebuilds, Chinese text, disjoint splits, planted flaws,
and what today's audit says about it with plans/audit-demo-zh.yaml."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import sys
import wave
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from voxledger.schemas.audit import AuditPolicy
from voxledger.stores.home import Home
from voxledger.tasks.corpus.demo import BASE_SPLITS, PEAK, SPLITS, TARGET_SPLITS
from voxledger.tasks.corpus.demo_zh import (
    SPLIT_SENTENCES,
    VOICES,
    assign_mandarin_sentences,
    build_mandarin_corpus,
    mandarin_sentences,
)
from voxledger.tasks.plans import load_plan
from voxledger.tasks.stages.audit import audit_corpus_fn

ROOT = Path(__file__).resolve().parents[2]
POLICY_FILE = ROOT / "plans" / "audit-demo-zh.yaml"
MANIFEST_KEYS = [
    "id", "audio", "text", "speaker", "recording_id", "split", "language", "instruction",
    "duration_s", "sample_rate_hz", "alignment", "voice", "pitch",
]  # fmt: skip
PLANTED_CODES = [
    "asr_disagreement", "split_leakage", "duplicate_audio", "clipping", "silence",
    "sample_rate_mismatch", "empty_transcript",
]  # fmt: skip
CHINESE = re.compile(r"[\u4e00-\u9fff]+[。？]")
TINY_CLIPS = 3 * (3 + 1) + (2 + 1 + 2)  # 3 base voices read train + dev; the target reads its 3 splits


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("demo-zh")
    build_mandarin_corpus(root / "a", size="tiny")
    code = (
        "from pathlib import Path; from voxledger.tasks.corpus.demo_zh import build_mandarin_corpus;"
        f"build_mandarin_corpus(Path({str(root / 'b')!r}), size='tiny')"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    build_mandarin_corpus(root / "flawed", size="tiny", flawed=True)
    build_mandarin_corpus(root / "small", size="small")
    return {"a": root / "a", "b": root / "b", "flawed": root / "flawed", "small": root / "small"}


def rows_of(corpus: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in (corpus / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_two_builds_are_byte_identical(built: dict[str, Path]) -> None:
    """Build "b" ran in another process, with its own espeak helper."""
    a, b = tree(built["a"]), tree(built["b"])
    assert a == b
    assert len(a) == 2 + 2 * TINY_CLIPS  # manifest, corpus.json, a wav and an alignment per clip
    assert not list(built["a"].parent.glob("*.tmp-*"))


def test_sentence_file_is_plain_everyday_chinese() -> None:
    sentences = mandarin_sentences()
    assert len(sentences) == 165 and len(set(sentences)) == len(sentences)
    for s in sentences:
        assert CHINESE.fullmatch(s) and 8 <= len(s) <= 20, s
    assert len(set("".join(sentences))) > 500  # varied vocabulary: distinct characters


def test_layout_and_manifest_rows(built: dict[str, Path]) -> None:
    root, rows = built["a"], rows_of(built["a"])
    assert len(rows) == TINY_CLIPS and len({r["id"] for r in rows}) == len(rows)
    for row in rows:
        assert list(row) == MANIFEST_KEYS
        assert re.fullmatch(r"zh-[bt]\d_s\d{4}", row["id"]) and row["recording_id"] == row["id"]
        assert (row["audio"], row["alignment"]) == (f"wavs/{row['id']}.wav", f"alignments/{row['id']}.json")
        assert (row["language"], row["instruction"], row["sample_rate_hz"]) == ("zh", None, 16000)
        voice = next(v for v in VOICES if v.speaker == row["speaker"])
        assert (row["voice"], row["pitch"]) == (voice.espeak_voice, voice.pitch)
        assert row["text"] == mandarin_sentences()[int(row["id"][-4:])] and CHINESE.fullmatch(row["text"])
        with wave.open(str(root / row["audio"]), "rb") as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        assert row["duration_s"] == pcm.size / 16000
        assert int(np.max(np.abs(pcm))) == round(PEAK * 32767)  # peak-normalised alike
    doc = json.loads((root / "corpus.json").read_text())
    assert (doc["language"], doc["size"], doc["flawed"], doc["utterances"]) == ("zh", "tiny", False, len(rows))
    assert doc["generator"] == "voxledger.tasks.corpus.demo_zh" and len(doc["generator_sha256"]) == 64
    assert [v["role"] for v in doc["voices"]] == ["base"] * 3 + ["target"]
    assert not (root / "planted.json").exists()


def test_alignments_are_contiguous_and_match_audio_length(built: dict[str, Path]) -> None:
    """espeak's Mandarin phoneme events make alignments like the English ones (no tone marks)."""
    root = built["a"]
    for row in rows_of(root):
        segs = json.loads((root / row["alignment"]).read_text())["phonemes"]
        assert segs[0]["phoneme"] == "_" and segs[0]["start_sample"] == 0
        assert segs[-1]["end_sample"] == round(row["duration_s"] * 16000)
        assert all(a["end_sample"] == b["start_sample"] for a, b in itertools.pairwise(segs))
        assert len([s for s in segs if s["phoneme"].startswith("'")]) >= 5  # stressed finals: one per content syllable or so


@pytest.mark.parametrize("size", ["full", "small", "tiny"])
def test_split_table_sizes_and_disjoint_sentences(size: str) -> None:
    """Counted from the split table, without synthesising: full gives 262 clips."""
    splits, unused = assign_mandarin_sentences(size)  # type: ignore[arg-type]
    every = [i for s in SPLITS for i in splits[s]]
    assert len(every) == len(set(every)) == sum(SPLIT_SENTENCES[size].values())
    assert not set(every) & set(unused) and len(every) + len(unused) == len(mandarin_sentences())
    assert len(unused) >= 4  # what planting needs
    n_base = sum(v.role == "base" for v in VOICES)
    clips = n_base * sum(len(splits[s]) for s in BASE_SPLITS) + sum(len(splits[s]) for s in TARGET_SPLITS)
    assert clips == {"full": 262, "small": 131, "tiny": TINY_CLIPS}[size]
    assert set(assign_mandarin_sentences("tiny")[0]["test"]) <= set(splits["test"])  # test prompts are cut first


def test_built_splits_are_disjoint_by_sentence(built: dict[str, Path]) -> None:
    rows = rows_of(built["small"])
    texts = {s: {r["text"] for r in rows if r["split"] == s} for s in SPLITS}
    for i, a in enumerate(SPLITS):
        assert len(texts[a]) == SPLIT_SENTENCES["small"][a]
        for b in SPLITS[i + 1 :]:
            assert not texts[a] & texts[b], (a, b)
    roles = {v.speaker: v.role for v in VOICES}
    assert all(r["split"] in (BASE_SPLITS if roles[r["speaker"]] == "base" else TARGET_SPLITS) for r in rows)
    base_train = {
        spk: {r["text"] for r in rows if r["speaker"] == spk and r["split"] == "train"} for spk, role in roles.items() if role == "base"
    }
    assert len({frozenset(t) for t in base_train.values()}) == 1  # base voices read the same sentences


def test_flawed_corpus_lists_the_wrong_transcript(built: dict[str, Path]) -> None:
    root, rows = built["flawed"], rows_of(built["flawed"])
    by_id = {r["id"]: r for r in rows}
    planted = json.loads((root / "planted.json").read_text())
    assert [p["code"] for p in planted] == PLANTED_CODES
    assert all(p["expected_severity"] == "error" for p in planted)
    ids = {p["code"]: p["utterance_ids"] for p in planted}
    assert all(i in by_id for group in ids.values() for i in group)
    (wrong,) = ids["asr_disagreement"]
    spoken = mandarin_sentences()[int(wrong[-4:])]
    text = by_id[wrong]["text"]
    assert text != spoken and text in mandarin_sentences() and abs(len(text) - len(spoken)) <= 2
    assert text not in {r["text"] for r in rows if r["id"] != wrong}  # nothing else in the corpus says it
    clean = tree(built["a"])
    assert (root / by_id[wrong]["audio"]).read_bytes() == clean[by_id[wrong]["audio"]]  # the audio is untouched
    assert {by_id[i]["speaker"] for i in ids["split_leakage"]} == {"zh-t1"}
    assert by_id[ids["empty_transcript"][0]]["text"] == ""


def _audit(home: Home, corpus: Path, asr: bool = True):  # type: ignore[no-untyped-def]
    policy = load_plan(POLICY_FILE, AuditPolicy)
    if not asr:
        policy = policy.model_copy(update={"asr_agreement": policy.asr_agreement.model_copy(update={"enabled": False})})
    out = audit_corpus_fn(home, corpus, policy, policy_name=POLICY_FILE.name)
    result = out.receipt.result
    print(f"\n{corpus.name}: verdict {result.verdict}, {dict(Counter((f.code, f.severity) for f in result.findings))}")
    for f in result.findings[:3]:
        print(f"  {f.code} {f.severity}: {f.message}")
    return result


@pytest.fixture(scope="module")
def zh_home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    """One home for the audits of the clean and the flawed tiny corpus: their shared clips are heard once (the ASR memo)."""
    return Home(tmp_path_factory.mktemp("zh-home") / "h")


def test_audit_of_the_clean_corpus_hears_every_clip_in_mandarin(built: dict[str, Path], zh_home: Home) -> None:
    """ASR agreement through the packaged multilingual Whisper, told the language: every clip gets its CER
    under the zh normaliser, and a clean corpus has no error (a clip the small model hears poorly is a warning)."""
    result = _audit(zh_home, built["a"])
    assert result.verdict == "pass" and not [f for f in result.findings if f.severity == "error"]
    assert {f.code for f in result.findings} <= {"asr_disagreement"}  # the chars/s bounds of the policy fit Mandarin
    agreement = result.asr_agreement
    assert agreement is not None and agreement.asr.model_name == "whisper-base-ct2" and agreement.normaliser == "zh"
    assert len(agreement.clips) == len(rows_of(built["a"])) and {c.language for c in agreement.clips} == {"zh"}
    assert all(c.cer >= 0 for c in agreement.clips) and agreement.median_cer is not None


def test_audit_finds_every_planted_problem_including_the_wrong_transcript(built: dict[str, Path], zh_home: Home) -> None:
    """The planted wrong transcript is an error because another line of the corpus fits what Whisper heard
    better than its own (better_fit_margin); no error falls on a clip nothing was planted on."""
    result = _audit(zh_home, built["flawed"])
    planted = json.loads((built["flawed"] / "planted.json").read_text())
    assert result.verdict == "fail"
    errors = [f for f in result.findings if f.severity == "error"]
    for p in planted:
        hits = [f for f in errors if f.code == p["code"] and set(p["utterance_ids"]) <= set(f.utterance_ids)]
        assert len(hits) == 1, (p, errors)
    touched = {u for p in planted for u in p["utterance_ids"]}
    assert all(set(f.utterance_ids) & touched for f in errors), [f for f in errors if not set(f.utterance_ids) & touched]
    wrong = next(f for f in errors if f.code == "asr_disagreement" and set(f.utterance_ids) == set(planted[0]["utterance_ids"]))
    assert "fits the transcript of" in wrong.message


def test_text_leakage_is_caught_on_chinese_text(built: dict[str, Path], tmp_path: Path) -> None:
    """A test prompt reused as a train transcript (with ？ for 。) is split leakage by normalised text."""
    corpus = tmp_path / "c"
    shutil.copytree(built["a"] / "wavs", corpus / "wavs")
    rows = rows_of(built["a"])
    prompt = next(r["text"] for r in rows if r["split"] == "test")
    rows[0]["text"] = prompt[:-1] + ("？" if prompt.endswith("。") else "。")
    (corpus / "manifest.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    result = _audit(Home(tmp_path / "h"), corpus, asr=False)
    leaks = [f for f in result.findings if f.code == "split_leakage"]
    assert len(leaks) == 1 and leaks[0].message.startswith(f"text_norm {prompt[:-1]!r}") and rows[0]["id"] in leaks[0].utterance_ids


def test_cli_builds_the_mandarin_corpus_and_names_its_policy(tmp_path: Path) -> None:
    from voxledger.cli import main

    result = CliRunner().invoke(
        main, ["demo", "corpus", str(tmp_path / "zh"), "--size", "tiny", "--language", "zh"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert f"wrote {TINY_CLIPS} utterances" in result.output and "zh-t1 (target, cmn+f3)" in result.output
    assert result.output.rstrip().endswith(f"next: voxledger audit {tmp_path / 'zh'} --policy plans/audit-demo-zh.yaml")
    assert POLICY_FILE.read_text().startswith("# voxledger audit ") and load_plan(POLICY_FILE, AuditPolicy).name == "demo-zh"
