"""The corpus-scale benchmark's generator and section (the section itself is slow: three processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf

from voxledger.bench_sections.corpus_scale import CLIP_S, bench_corpus_scale, build_scale_corpus
from voxledger.stores.hashing import hash_files


def test_scale_corpus_clips_are_distinct_ten_second_wavs(tmp_path: Path) -> None:
    paths = build_scale_corpus(tmp_path / "c", 50)
    assert len(set(hash_files(paths).values())) == 50
    info = sf.info(str(paths[7]))
    assert (info.samplerate, info.channels, info.duration) == (16000, 1, CLIP_S)
    rows = [json.loads(line) for line in (tmp_path / "c" / "manifest.jsonl").read_text().splitlines()]
    assert len({r["text"] for r in rows}) == 50


@pytest.mark.slow
def test_corpus_scale_section_reports_every_figure(tmp_path: Path) -> None:
    figures = {f.name: f for f in bench_corpus_scale(tmp_path, 40)}
    assert len(figures) == 8 and all(f.value > 0 for f in figures.values())
    assert "corpus-scale: audit first pass (pass)" in figures
