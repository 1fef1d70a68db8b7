"""wav.scp pipe commands materialised: run once without a shell (a real program writing audio to its
standard output), the copy audits cleanly, the receipt names every command; bad lines stop the run
with the file, line and fix, and leave nothing behind."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.tasks.corpus.factory import POLICY
from tests.tasks.corpus.test_kaldi import kaldi_corpus
from voxledger.schemas.errors import CorpusError
from voxledger.stores.home import Home
from voxledger.tasks.corpus.manifests import load_corpus
from voxledger.tasks.stages.audit import audit_corpus_fn
from voxledger.tasks.stages.corpus_materialise import command_argv, materialise_pipes_fn

# a decoder standing in for sox: reads a file, writes it as FLAC to standard output
DECODER = "import sys, soundfile as sf; data, sr = sf.read(sys.argv[1]); sf.write(sys.stdout.buffer, data, sr, format='FLAC')\n"


def _decoder(tmp_path: Path) -> Path:
    script = tmp_path / "to_flac.py"
    script.write_text(DECODER)
    return script


def test_pipes_are_run_once_into_a_copy_that_audits(tmp_path: Path, home: Home) -> None:
    script = _decoder(tmp_path)
    data = kaldi_corpus(tmp_path, lambda p, d: f"{sys.executable} {script} {p} |" if p.stem != "spk_a_0" else str(p))
    out = tmp_path / "materialised-data"
    done = materialise_pipes_fn(home, data, out, cwd=tmp_path)
    assert done.receipt.result.n_commands == 6  # one line of seven is a plain path
    commands = [json.loads(line) for line in home.blobs.get_bytes(done.receipt.subjects[1].sha256).splitlines()]
    first = next(c for c in commands if c["recording_id"] == "spk_a_1")
    assert first["argv"] == [sys.executable, str(script), str(tmp_path / "audio" / "spk_a_1.wav")]
    assert first["format"] == "FLAC" and first["frames"] == 24000 and home.blobs.intact(first["output_sha256"])
    assert (out / "train" / "wav.scp").read_text().splitlines()[1] == "spk_a_1 materialised/spk_a_1.flac"
    loaded = load_corpus(out, audio_roots=(tmp_path / "audio",))
    assert len(loaded.utterances.utterances) == 7 and not loaded.issues
    audit = audit_corpus_fn(home, out, POLICY, policy_name="t", audio_roots=(tmp_path / "audio",))
    assert audit.receipt.result.verdict == "pass", audit.receipt.result.counts_by_code
    with pytest.raises(CorpusError, match="exists; choose a new --out"):  # never overwritten
        materialise_pipes_fn(home, data, out, cwd=tmp_path)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("cat {p} | sox - -t wav - |", r"shell syntax \('\|'\)"),
        ("sox {p} -t wav - > /tmp/x |", r"shell syntax \('>'\)"),
        ("sox $(cat list) -t wav - |", r"shell syntax"),
        ("no-such-decoder-here {p} |", r"'no-such-decoder-here' is not installed"),
        ("{py} -c 'import sys; sys.exit(3)' |", r"exited with status 3"),
        ("{py} -c 'print(1)' |", r"not audio"),
    ],
)
def test_bad_commands_stop_with_the_line_and_leave_nothing(tmp_path: Path, home: Home, value: str, message: str) -> None:
    data = kaldi_corpus(tmp_path, lambda p, d: value.format(p=p, py=sys.executable) if p.stem == "spk_a_2" else str(p))
    before = sorted(home.receipts.ids())
    with pytest.raises(CorpusError, match=r"train/wav\.scp:3: .*" + message):
        materialise_pipes_fn(home, data, tmp_path / "out", cwd=tmp_path)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.tmp-*"))
    assert sorted(home.receipts.ids()) == before


def test_argv_is_split_like_a_shell_would_without_running_one() -> None:
    assert command_argv("sox 'my file.flac' -t wav - |", "w:1") == ["sox", "my file.flac", "-t", "wav", "-"]
    with pytest.raises(CorpusError, match="w:1: cannot split"):
        command_argv("sox 'open -t wav - |", "w:1")


@pytest.mark.prefect
def test_materialise_from_the_command_line_runs_as_a_flow(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from voxledger.cli import main

    script = _decoder(tmp_path)
    data = kaldi_corpus(tmp_path, lambda p, d: f"{sys.executable} {script} {p} |")
    args = ["--home", str(tmp_path / "home"), "corpus", "materialise", str(data), "--out", str(tmp_path / "files"), "--cwd", str(tmp_path)]
    res = CliRunner().invoke(main, [*args, "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["n_commands"] == 7
    doc = Home(tmp_path / "home").receipts.read_document(summary["receipt"])
    assert doc["kind"] == "pipe_materialise" and doc["producer"]["flow"] == "materialise_pipes"
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 1 and "exists; choose a new --out" in again.output and "Traceback" not in again.output
