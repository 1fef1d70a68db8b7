"""``voxledger corpus import``: writes a manifest the audit reads; bad input is one line, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.tasks.corpus.layouts import ljspeech
from voxledger.cli import main
from voxledger.tasks.corpus.manifests import load_corpus


def test_import_writes_a_manifest_and_refuses_bad_input(tmp_path: Path) -> None:
    src, truth = ljspeech(tmp_path / "LJSpeech-1.1")
    out = tmp_path / "lj" / "manifest.jsonl"
    runner = CliRunner()
    res = runner.invoke(main, ["corpus", "import", "auto", str(src), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["utterances"] == len(truth)
    assert len(load_corpus(out, audio_roots=(src,)).utterances.utterances) == len(truth)
    again = runner.invoke(main, ["corpus", "import", "ljspeech", str(src), "--out", str(out)])
    assert again.exit_code != 0 and "exists; choose a new file name" in again.output
    # the next step a hint names is complete: the audit told where the audio lies, or init on a manifest beside its audio
    outside = runner.invoke(main, ["corpus", "import", "auto", str(src), "--out", str(tmp_path / "elsewhere" / "m.jsonl")])
    assert outside.output.rstrip().endswith(f"next: voxledger audit {tmp_path / 'elsewhere' / 'm.jsonl'} --audio-root {src}")
    beside = runner.invoke(main, ["corpus", "import", "auto", str(src), "--out", str(src / "manifest.jsonl")])
    assert beside.output.rstrip().endswith(f"next: voxledger init {src}"), beside.output
    assert "plans/audit-demo.yaml" not in outside.output + beside.output  # never the demo's policy for someone's corpus
    (tmp_path / "nothing").mkdir()
    bad = runner.invoke(main, ["corpus", "import", "auto", str(tmp_path / "nothing"), "--out", str(tmp_path / "n.jsonl")])
    assert bad.exit_code != 0 and "CorpusError" in bad.output and len(bad.output.strip().splitlines()) == 1
    assert not (tmp_path / "n.jsonl").exists()


@pytest.mark.prefect
def test_prepare_from_the_command_line(tmp_path: Path) -> None:
    src, truth = ljspeech(tmp_path / "LJSpeech-1.1")
    policy = tmp_path / "policy.yaml"
    policy.write_text("kind: audit_policy\nname: lj\nleakage: [{key: speaker, partition: [[train, dev]]}]\nsample_rate_hz: 16000\n")
    res = CliRunner().invoke(main, ["--home", str(tmp_path / "home"), "corpus", "prepare", str(src), "--policy", str(policy),
                                    "--out", str(tmp_path / "prepared"), "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["n_utterances"] == len(truth) and doc["n_resampled"] == len(truth)
    assert len(load_corpus(tmp_path / "prepared").utterances.utterances) == len(truth)
