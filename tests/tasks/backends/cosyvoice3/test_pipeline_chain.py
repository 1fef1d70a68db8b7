"""cosyvoice3 through every stage of the Prefect pipeline: audit -> LoRA -> promote -> evaluate -> package
(reload + merged-export equivalence) -> listening export, then stage attribution adapter vs merged.

Parametrised over the fake tree and, where the real-chain tier can run (``cv3_upstream`` in
conftest.py: a real checkout, upstream's import set and a scaffolded model folder), upstream's
real code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile as sf
import yaml
from huggingface_hub import ModelCard

from voxledger.flows.pipeline import pipeline
from voxledger.schemas.equivalence import EquivalencePlan
from voxledger.stores.capabilities import ANY, capability_matrix
from voxledger.stores.home import Home
from voxledger.stores.trees import load_manifest
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.packaging.peft_export import export_peft_fn
from voxledger.tasks.stages.equivalence import attribute_adapter

ROOT = Path(__file__).resolve().parents[4]
PROMPTS = [
    {"id": "p0", "category": "short", "text": "The soft cushion broke the man's fall.", "recording": "wavs/spk_t_4.wav"},
    {"id": "p1", "category": "short", "text": "The salt breeze came across from the sea.", "recording": "wavs/spk_t_5.wav"},
]
REFS = {"p0:0": "wavs/spk_t_3.wav", "p1:0": "wavs/spk_t_3.wav"}


def write_cv3_plans(d: Path) -> Path:
    """Plans of a cosyvoice3 pipeline: no base stage (the model folder's llm.pt is the base)."""
    d.mkdir(parents=True)
    (d / "audit.yaml").write_text((ROOT / "plans" / "audit-demo.yaml").read_text())
    lora = {
        "kind": "training_plan", "name": "cv3-lora", "backend": "cosyvoice3", "mode": "lora",
        "train_splits": ["target_train"], "cv_splits": ["target_dev"], "speakers": ["spk_t"], "new_speaker": "spk_t",
        "max_epochs": 1, "frames_per_batch": 400, "checkpoint_every_steps": 1, "threads": 1,
        "lora": {"r": 8, "alpha": 16}, "optim": {"peak_lr": 3e-2, "warmup_steps": 0, "weight_decay": 0.0},
    }  # fmt: skip
    promo = {
        "kind": "promotion_policy", "name": "cv3-promo", "best_k": 1, "baseline_speaker": "spk_t",
        "gate_plan": {"name": "g", "prompts": PROMPTS, "seeds": [0], "speaker_references": REFS, "metrics": {"mos": None}},
        "rules": [{"metric": "content_gate_pass", "statistic": "challenger_mean", "op": ">=", "threshold": 0.0}],
    }  # fmt: skip
    ev = {
        "kind": "evaluation_plan", "name": "cv3-eval", "seeds": [0], "baseline": "base", "prompts": PROMPTS,
        "speaker_references": REFS, "metrics": {"mos": None},
        "candidates": [
            # the model folder's own LLM, zero-shot from the voice prompt the adapter bundles
            {"name": "base", "backend": "cosyvoice3", "runtime": "base", "artifact": "input:adapter", "speaker": "spk_t"},
            {"name": "adapter", "backend": "cosyvoice3", "runtime": "adapter", "artifact": "input:adapter", "base": "own", "speaker": "spk_t"},
            {"name": "merged", "backend": "cosyvoice3", "runtime": "merged", "artifact": "input:adapter", "base": "own", "speaker": "spk_t"},
            {"name": "recordings", "backend": "recordings", "runtime": "recordings"},
        ],
    }  # fmt: skip
    listening = yaml.safe_load((ROOT / "plans" / "listening-demo.yaml").read_text())
    listening["design"] |= {"raters": 2, "raters_per_prompt": 2}
    listening["sample_rate_hz"] = 24000  # heard at the model's own rate (the metrics use a 16 kHz copy)
    listening["blinding"] = {**listening.get("blinding", {}), "on_leak": "warn"}  # noise from a toy model leaks, and is recorded
    for c in listening["criteria"]:
        c.pop("categories", None)
    pipe = {
        "kind": "pipeline_plan", "name": "cv3", "audit_policy": "audit.yaml", "adapter_training": "lora.yaml",
        "promotion_policy": "promo.yaml", "evaluation": "eval.yaml", "package": True, "listening_protocol": "listening.yaml",
    }  # fmt: skip
    for name, doc in {"lora.yaml": lora, "promo.yaml": promo, "eval.yaml": ev, "listening.yaml": listening, "pipeline.yaml": pipe}.items():
        (d / name).write_text(yaml.safe_dump(doc))
    return d


@pytest.mark.prefect
def test_cosyvoice3_runs_every_stage_of_the_pipeline(cv3_upstream: CosyVoice3Config, small_corpus: Path, tmp_path: Path) -> None:
    plans = write_cv3_plans(tmp_path / "plans")
    home_dir = tmp_path / "home"
    out = pipeline(str(home_dir), str(small_corpus), str(plans / "pipeline.yaml"), str(plans), str(tmp_path / "packets"))
    ran = [s.stage for s in out.stages]
    assert ran == ["audit", "train_adapter", "promote", "evaluate", "package", "export_packets"], ran
    home = Home(home_dir)
    receipts = {s.stage: s.receipt_id for s in out.stages}
    package = home.receipts.read_json(receipts["package"])
    assert package["status"] == "succeeded" and package["result"]["reload"]["bitwise_equal"]
    assert package["result"]["equivalence_band"] == "GREEN"
    # the merged export stores the tied embedding / LM head once: llm.pt's size plus the LoRA delta, within 2%
    merged = {e.path: e.size_bytes for e in load_manifest(home.blobs, package["result"]["merged_tree_sha256"]).entries}
    train_doc = home.receipts.read_json(receipts["train_adapter"])
    best_tree = {
        e.path: e.size_bytes
        for e in load_manifest(home.blobs, next(s["sha256"] for s in train_doc["subjects"] if s["role"] == "best")).entries
    }
    expected = (cv3_upstream.model_dir / "llm.pt").stat().st_size + best_tree["adapter.safetensors"]
    assert abs(merged["llm.safetensors"] - expected) <= 0.02 * expected, (merged, expected)
    evaluation = home.receipts.read_json(receipts["evaluate"])
    # one device for every stage, recorded in each receipt that computed on it (the CPU tests pin cpu)
    devices = {
        stage: home.receipts.read_json(receipts[stage])["environment"].get("device")
        for stage in ("audit", "train_adapter", "evaluate", "package")
    }
    assert devices == {"audit": None, "train_adapter": "cpu", "evaluate": "cpu", "package": "cpu"}, devices
    wavs = sorted((tmp_path / "packets").rglob("*.wav"))  # per-rater packets written, every clip at 24 kHz
    assert wavs and {sf.info(str(w)).samplerate for w in wavs} == {24000}
    gens = json.loads(home.blobs.get_bytes(next(s["sha256"] for s in evaluation["subjects"] if s["role"] == "generations")))
    synthesised = [g for g in gens if g["valid"] and g["candidate"] != "recordings"]
    assert synthesised and all(g["native_sample_rate_hz"] == 24000 and g["sample_rate_hz"] == 16000 for g in synthesised)
    # stage attribution: the reference's intermediates fed through the merged runtime, per component
    train = home.receipts.read_json(receipts["train_adapter"])
    best = next(s["sha256"] for s in train["subjects"] if s["role"] == "best")
    eq = attribute_adapter(
        home, None, best, EquivalencePlan.model_validate(yaml.safe_load((ROOT / "plans" / "equivalence-default.yaml").read_text())),
        plan_name="equivalence-default.yaml", ref_runtime="adapter", cand_runtime="merged",
        text="The salt breeze came across from the sea.", speaker=None, seed=0,
    )  # fmt: skip
    assert {s.stage: s.band for s in eq.receipt.report.stages} == dict.fromkeys(("tokens", "logits", "mel", "pcm"), "GREEN")
    # the package as a PEFT folder with its model card (its forward against voxledger's own load: test_peft_export.py)
    peft = export_peft_fn(home, package["result"]["package_sha256"], tmp_path / "peft").receipt.result
    assert [f.path for f in peft.files] == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    card = ModelCard.load(tmp_path / "peft" / "README.md")
    assert card.data.library_name == "peft" and card.data.base_model == peft.base_model_name_or_path
    assert json.loads((tmp_path / "peft" / "adapter_config.json").read_text())["base_model_name_or_path"] == peft.base_model_name_or_path
    with home.catalog.connect(read_only=True) as con:
        states = {(c.backend, c.stage, c.runtime): c.state for c in capability_matrix(con).cells if c.backend == "cosyvoice3"}
    # the capability matrix, derived from receipts alone, now has cosyvoice3 rows past training
    ran_rows = {(stage, runtime) for (_, stage, runtime), state in states.items() if state != "never_run"}
    expected = {("train_lora", ANY), ("promote", ANY), ("evaluate", "base"), ("evaluate", "adapter"), ("evaluate", "merged"),
                ("package", ANY), ("equivalence", "merged_export"), ("listening", ANY)}  # fmt: skip
    assert expected <= ran_rows, (sorted(expected - ran_rows), states)
