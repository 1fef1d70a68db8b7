"""Bring your own corpus: no alignment files, its own split and speaker names, `voxledger init`,
then the whole pipeline (tiny model, a few steps) through evaluation and listening packets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf
import yaml
from click.testing import CliRunner

from tests.flows.conftest import TINY, run
from voxledger.cli import main
from voxledger.schemas.errors import CorpusError
from voxledger.schemas.training import TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.stores.trees import load_manifest
from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize
from voxledger.tasks.plans_init import init_plans

TRAIN = ["The birch canoe slid on the smooth planks.", "Glue the sheet to the dark blue background.",
         "It is easy to tell the depth of a well.", "These days a chicken leg is a rare dish.", "Rice is often served in round bowls."]  # fmt: skip
DEV = {"alice": ["The juice of lemons makes fine punch.", "The box was thrown beside the parked truck."],
       "bob": ["The hogs were fed chopped corn and garbage.", "Four hours of steady work faced us."]}  # fmt: skip
VOICES = {"alice": ("en-us+f3", 70), "bob": ("en-us", 45)}


def build_own_corpus(root: Path, with_dev: bool = True) -> Path:
    """Two speakers, splits mine_train / mine_dev, 16 kHz wavs, a manifest and nothing else."""
    (root / "audio").mkdir(parents=True)
    rows = []
    for speaker, (voice, pitch) in VOICES.items():
        lines = [(t, "mine_train") for t in TRAIN] + [(t, "mine_dev" if with_dev else "mine_train") for t in DEV[speaker]]
        for i, (text, split) in enumerate(lines):
            uid = f"{speaker}-{i:02d}"
            sf.write(
                root / "audio" / f"{uid}.wav",
                resample_synthesis(synthesize(text, voice=voice, pitch=pitch), 16000).audio,
                16000,
                subtype="PCM_16",
            )
            rows.append({"id": uid, "audio": f"audio/{uid}.wav", "text": text, "speaker": speaker, "split": split, "language": "en"})
    (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture(scope="module")
def own_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_own_corpus(tmp_path_factory.mktemp("own") / "my-voice")


def shrink(plans: Path) -> None:
    """What a user would edit for a smoke run: a tiny model, a few steps, no MOS, a lenient gate."""
    steps = {"max_epochs": 2, "steps_per_epoch": 3, "frames_per_batch": 800, "checkpoint_every_steps": 2, "threads": 1}
    edits = {"train-base.yaml": {**steps, "model": TINY, "precision": "fp32"}, "train-adapter.yaml": {**steps, "precision": "fp32"}}
    for file, change in edits.items():
        doc = yaml.safe_load((plans / file).read_text())
        (plans / file).write_text(yaml.safe_dump(doc | change))
    promo = yaml.safe_load((plans / "promote.yaml").read_text())
    promo["gate_plan"]["metrics"] = {"mos": None}
    # six steps do not make intelligible speech; a failure margin below what the gate's size resolves is refused at load
    promo["rules"] = [r if r["statistic"] == "new_failure_rate_high" else r | {"threshold": 0.0} for r in promo["rules"]]
    (plans / "promote.yaml").write_text(yaml.safe_dump(promo))
    ev = yaml.safe_load((plans / "eval.yaml").read_text())
    (plans / "eval.yaml").write_text(yaml.safe_dump(ev | {"metrics": {"mos": None}}))
    listening = yaml.safe_load((plans / "listening.yaml").read_text())
    listening["design"] |= {"raters": 2, "raters_per_prompt": 2}
    # a six-step model's output is told from PCM16 recordings by its low bits; record the leak, do not stop
    listening["blinding"] = {"on_leak": "warn"}
    (plans / "listening.yaml").write_text(yaml.safe_dump(listening))


def test_init_refuses_a_corpus_without_a_dev_split(tmp_path: Path) -> None:
    corpus = build_own_corpus(tmp_path / "no-dev", with_dev=False)
    with pytest.raises(
        CorpusError, match=r"(?s)no dev split \(splits: mine_train\).*on a few lines per speaker.*manifest.jsonl.*--dev-split"
    ):
        init_plans(corpus, tmp_path / "plans")
    assert not (tmp_path / "plans").exists()  # nothing written


@pytest.mark.prefect
def test_own_corpus_end_to_end(own_corpus: Path, tmp_path: Path) -> None:
    plans = tmp_path / "plans"
    result = CliRunner().invoke(main, ["init", str(own_corpus), "--out", str(plans), "--target", "alice"])
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in plans.iterdir())
    assert written == [
        "audit.yaml",
        "eval.yaml",
        "listening.yaml",
        "pipeline.yaml",
        "promote.yaml",
        "train-adapter.yaml",
        "train-base.yaml",
    ]
    for name in written:
        text = (plans / name).read_text()
        assert text.startswith("# voxledger "), name
        assert "target_" not in text and "spk-" not in text, f"{name} names demo splits or speakers"
    base = yaml.safe_load((plans / "train-base.yaml").read_text())
    assert (base["train_splits"], base["cv_splits"], base["speakers"]) == (["mine_train"], ["mine_dev"], ["bob"])

    shrink(plans)
    summary = run(tmp_path / "h", own_corpus, plans)
    stages = [(s["stage"], s["status"]) for s in summary["stages"]]
    assert stages == [
        (s, "succeeded") for s in ("audit", "train_base", "train_adapter", "promote", "evaluate", "package", "export_packets")
    ]

    home = Home(tmp_path / "h")
    receipt = home.receipts.read(summary["train_base"]["receipt_id"], TrainingRunReceipt)
    assert receipt.parameters.effective_config["duration_sources"] == ["espeak_warp"]
    tree = load_manifest(home.blobs, receipt.parameters.bound.features_sha256)
    assert len(tree.entries) == 14 and all(e.path.startswith("durations/") for e in tree.entries)
    assert any(p.is_file() for p in (tmp_path / "packets-pipeline.yaml").rglob("*"))
