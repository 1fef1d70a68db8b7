"""Each public layout, generated tiny and exact: it imports to the same utterances, durations and
texts, audits clean, and each planted flaw (leakage, unreadable audio, empty transcript) is caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tasks.corpus.factory import POLICY
from tests.tasks.corpus.layouts import RATES, WRITERS
from voxledger.schemas.errors import CorpusError
from voxledger.stores.home import Home
from voxledger.tasks.corpus.importers import IMPORTERS, detect_layout
from voxledger.tasks.corpus.manifests import load_corpus, write_jsonl
from voxledger.tasks.stages.audit import audit_corpus_fn

FLAWS = {"leak": "split_leakage", "unreadable": "audio_unreadable", "empty": "empty_transcript"}


def test_every_importer_has_a_layout_writer() -> None:
    assert sorted(WRITERS) == sorted(IMPORTERS) and len(IMPORTERS) == 5


@pytest.mark.parametrize("layout", sorted(WRITERS))
def test_layout_round_trips_and_audits_clean(layout: str, tmp_path: Path, home: Home) -> None:
    src, truth = WRITERS[layout](tmp_path / layout)
    assert detect_layout(src) == layout
    loaded = load_corpus(src)
    assert not loaded.issues
    assert {u.id: u.text for u in loaded.utterances.utterances} == {k: t for k, (t, _) in truth.items()}
    policy = POLICY.model_copy(update={"sample_rate_hz": RATES[layout]})
    result = audit_corpus_fn(home, src, policy, policy_name="t").receipt.result
    assert result.verdict == "pass", result.counts_by_code
    assert result.n_utterances == len(truth)
    assert result.stats.total_hours * 3600 == pytest.approx(sum(d for _, d in truth.values()), abs=0.01)
    # the written manifest reads back to the same utterances, and audits to the same verdict
    manifest = write_jsonl(loaded, tmp_path / "imported" / "manifest.jsonl")
    back = load_corpus(manifest, audio_roots=(src,))
    assert [(u.id, u.text, u.speaker, u.split, u.start_s, u.end_s) for u in back.utterances.utterances] == \
           [(u.id, u.text, u.speaker, u.split, u.start_s, u.end_s) for u in loaded.utterances.utterances]  # fmt: skip
    again = audit_corpus_fn(home, manifest, policy, policy_name="t", audio_roots=(src,)).receipt.result
    assert again.verdict == "pass" and again.stats.total_hours == result.stats.total_hours


@pytest.mark.parametrize("layout,flaw", [(lay, f) for lay in sorted(WRITERS) for f in FLAWS if not (lay == "vctk" and f == "leak")])
def test_planted_flaw_is_caught(layout: str, flaw: str, tmp_path: Path, home: Home) -> None:
    src, _ = WRITERS[layout](tmp_path / layout, flaw)
    policy = POLICY.model_copy(update={"sample_rate_hz": RATES[layout]})
    result = audit_corpus_fn(home, src, policy, policy_name="t").receipt.result
    assert result.verdict == "fail" and FLAWS[flaw] in result.counts_by_code, result.counts_by_code


def test_unknown_layout_and_missing_columns_are_one_line_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match=r"no corpus found; expected manifest\.jsonl.*ljspeech, libritts"):
        load_corpus(tmp_path / "empty")
    bad = tmp_path / "af"
    (bad / "train").mkdir(parents=True)
    (bad / "train" / "metadata.csv").write_text("file_name,speaker_id\na.wav,s1\n")
    with pytest.raises(CorpusError, match=r"train/metadata\.csv:1: no transcript column .*add one named text or transcription"):
        load_corpus(bad)
    lj = tmp_path / "lj"
    (lj / "wavs").mkdir(parents=True)
    (lj / "metadata.csv").write_text("LJ001-0001|fine text|fine text\nLJ001-0002 no separator\n")
    with pytest.raises(CorpusError, match=r"metadata\.csv:2: expected 'id\|text'"):
        load_corpus(lj, layout="ljspeech")
    out = tmp_path / "out" / "manifest.jsonl"
    assert not out.exists()
