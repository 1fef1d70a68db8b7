"""Stage attribution on the tiny backend: equal runtimes GREEN, a corrupted weight blamed on its stage."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from tests.tasks.test_evaluation import trained  # noqa: F401  (module fixture: a trained base + adapter)
from voxledger.stores.home import Home
from voxledger.stores.trees import materialize_tree
from voxledger.tasks.backends.tiny.backend import TinyBackend
from voxledger.tasks.equivalence.attribution import attribute_runtimes

# Short on purpose: the 1-epoch test base overestimates durations (26 s of audio for a 100-character
# sentence), and every stage output is vocoded; eight drift windows still fit easily.
TEXT = "The boats rocked in the harbour."


def _load(home: Home, base_sha: str, adapter_sha: str, tmp: Path, runtime: str):  # type: ignore[no-untyped-def]
    base, art = tmp / f"base-{runtime}", tmp / f"art-{runtime}"
    materialize_tree(home.blobs, base_sha, base)
    materialize_tree(home.blobs, adapter_sha, art)
    return TinyBackend().load_for_inference(base, art, runtime)


def test_adapter_vs_merged_is_green_and_corruption_is_blamed_on_its_stage(trained, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    home, _, base_sha, adapter_sha = trained
    adapter = _load(home, base_sha, adapter_sha, tmp_path, "adapter")
    merged = _load(home, base_sha, adapter_sha, tmp_path, "merged")
    report = attribute_runtimes("tiny", adapter, merged, TEXT, "spk_t", seed=0, dump_dir=tmp_path / "dumps")
    assert report.band == "GREEN", [(s.stage, s.rel) for s in report.stages]
    assert (tmp_path / "dumps" / "cand" / "mel.f32").is_file()
    mel = next(s for s in report.stages if s.stage == "mel")
    assert len(mel.drift_rel) == 8  # rel per window along the utterance: length-dependent drift is visible

    broken = copy.deepcopy(merged)
    with torch.no_grad():
        broken.model.mel_out.weight[3, :] += 5.0  # a decoder weight: only the mel stage may turn RED
    report = attribute_runtimes("tiny", merged, broken, TEXT, "spk_t", seed=0)
    bands = {s.stage: s.band for s in report.stages}
    assert bands == {"durations": "GREEN", "mel": "RED", "pcm": "GREEN"}, bands
    assert not report.passed


@pytest.mark.prefect
def test_attribute_command_records_a_receipt_and_refuses_a_non_adapter_tree(trained, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    import json

    from click.testing import CliRunner

    from voxledger.cli import main

    home, _, base_sha, adapter_sha = trained
    runner = CliRunner()
    ok = runner.invoke(main, ["--home", str(home.root), "equivalence", "attribute", base_sha, adapter_sha, "--json"])
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.output)
    assert doc["report"]["band"] == "GREEN" and {s["stage"] for s in doc["report"]["stages"]} >= {"tokens", "mel", "pcm"}
    stored = home.receipts.read(doc["receipt"])
    assert stored.parameters.candidate.name == "merged-fed-forward"  # type: ignore[attr-defined]
    bad = runner.invoke(main, ["--home", str(home.root), "equivalence", "attribute", base_sha, base_sha])
    assert bad.exit_code != 0 and "adapter_config.json" in bad.output and "Traceback" not in bad.output
    missing = runner.invoke(main, ["--home", str(home.root), "equivalence", "attribute", base_sha, "0" * 64])
    assert missing.exit_code != 0 and "no receipt or artifact in the catalog has the id '" + "0" * 64 in missing.output
