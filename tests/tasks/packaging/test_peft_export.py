"""``package export --format peft`` of the shared pipeline run's package: PEFT loads it as it is and
computes what voxledger computes, bit for bit; the folder is a function of the package; the model
card's metadata parses with huggingface_hub and states what the receipts say."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from huggingface_hub import ModelCard

from voxledger.cli import main
from voxledger.schemas.adapter_export import AdapterExportReceipt
from voxledger.schemas.canonical import sha256_hex
from voxledger.schemas.errors import UnsafePathError
from voxledger.schemas.evaluation import EvaluationReceipt
from voxledger.schemas.package import PackageReceipt
from voxledger.stores.home import Home
from voxledger.stores.trees import build_manifest, manifest_bytes, materialize_tree
from voxledger.tasks.backends.base import get_backend
from voxledger.tasks.packaging.archive import Verified, unpack_package, verify_package
from voxledger.tasks.packaging.model_card import card_text
from voxledger.tasks.packaging.peft_export import base_model_name, bound_receipts, export_peft_fn

pytestmark = pytest.mark.prefect


@dataclass
class Exported:
    home: Home
    verified: Verified
    folder: Path
    out: dict  # type: ignore[type-arg]
    work: Path


def _export(home: Path, package: str, dest: Path) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, ["--home", str(home), "package", "export", package, str(dest), "--format", "peft", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def exported(first_run, tmp_path_factory: pytest.TempPathFactory) -> Exported:  # type: ignore[no-untyped-def]
    work = tmp_path_factory.mktemp("peft")
    shutil.copytree(first_run[0], work / "h", ignore=shutil.ignore_patterns("prefect", "*.lock", "pipeline.holder"))
    home = Home(work / "h")
    sha = home.receipts.read(first_run[2]["package"]["receipt_id"], PackageReceipt).result.package_sha256
    out = _export(work / "h", sha[:12], work / "peft")
    return Exported(home, verify_package(home.blobs.path_of(sha)), work / "peft", out, work)


def _tree(folder: Path) -> str:
    return sha256_hex(manifest_bytes(build_manifest(folder)))


def test_peft_loads_the_export_and_its_forward_equals_voxledgers_adapter_bitwise(exported: Exported) -> None:
    from peft import PeftModel

    from voxledger.tasks.backends.tiny.model import load_tiny

    torch.set_num_threads(1)
    m = exported.verified.manifest
    config = json.loads((exported.folder / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["base_model_name_or_path"] == f"sha256:{m.components.base_model_sha256}"
    ours_config = json.loads(exported.verified.contents["adapter/adapter_config.json"])
    assert (config["r"], config["lora_alpha"]) == (ours_config["r"], ours_config["alpha"])
    assert config["target_modules"] == sorted(ours_config["targets"])
    base = exported.work / "base"
    materialize_tree(exported.home.blobs, m.components.base_model_sha256, base)
    unpack_package(exported.home.blobs.path_of(exported.verified.sha256), exported.work / "pkg")
    ours = get_backend("tiny").load_for_inference(base, exported.work / "pkg" / "adapter", "adapter").model
    plain, _ = load_tiny(base / "model.safetensors")
    row = plain.add_speaker(m.inference.speaker)
    theirs = PeftModel.from_pretrained(plain, str(exported.folder))
    g = torch.Generator().manual_seed(0)
    ids, durations = torch.randint(1, 20, (2, 12), generator=g), torch.randint(1, 6, (2, 12), generator=g)
    speakers = torch.tensor([row, row])
    with torch.no_grad():
        a, b = theirs(ids, speakers, durations), ours(ids, speakers, durations)
        bare, _ = load_tiny(base / "model.safetensors")
        bare.add_speaker(m.inference.speaker)
        untouched = bare(ids, speakers, durations)
    assert set(a) == {"mel_before", "mel_after", "frame_mask", "log_durations"}
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert not torch.equal(a["mel_after"], untouched["mel_after"])  # the adapter's weights were loaded, not left at init


def test_export_is_recorded_and_the_same_package_gives_the_same_folder_in_any_home(exported: Exported) -> None:
    rid = exported.out["receipt"]
    receipt = exported.home.receipts.read(rid, AdapterExportReceipt)
    assert receipt.kind == "adapter_export" and not exported.out["cached"]
    assert receipt.result.tree_sha256 == exported.out["tree_sha256"] == _tree(exported.folder)
    assert sorted(p.name for p in exported.folder.iterdir()) == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    b = exported.verified.manifest.binding
    assert {i.role: i.sha256 for i in receipt.inputs} == {
        "package": exported.verified.sha256,
        "training_run": b.training_run,
        "audit": b.audit_receipt,
        "evaluation:0": b.evaluation_receipts[0],
        "promotion": b.promotion_receipt,
    }
    again = _export(exported.home.root, exported.verified.sha256, exported.work / "again")
    assert again["cached"] and again["tree_sha256"] == receipt.result.tree_sha256
    # the package file alone, exported into a home that never saw its receipts: the same bytes
    tar = exported.work / "p.tar"
    shutil.copyfile(exported.home.blobs.path_of(exported.verified.sha256), tar)
    elsewhere = _export(exported.work / "fresh-home", str(tar), exported.work / "elsewhere")
    assert not elsewhere["cached"] and elsewhere["tree_sha256"] == receipt.result.tree_sha256
    fresh = Home(exported.work / "fresh-home").receipts.read(elsewhere["receipt"], AdapterExportReceipt)
    assert [i.role for i in fresh.inputs] == ["package"] and set(fresh.result.read_receipts) == set(receipt.result.read_receipts)
    with pytest.raises(UnsafePathError, match="never written over"):
        export_peft_fn(exported.home, exported.verified.sha256, exported.folder)


def test_model_card_parses_and_states_the_gate_and_evaluation_from_the_receipts(exported: Exported) -> None:
    card = ModelCard.load(exported.folder / "README.md")
    bound = bound_receipts(exported.verified)
    m = exported.verified.manifest
    assert card.data.base_model == f"sha256:{m.components.base_model_sha256}" and card.data.library_name == "peft"
    assert card.data.language == ["en"] and card.data.voxledger["package_sha256"] == exported.verified.sha256
    assert bound.promotion is not None and bound.evaluations
    rid, promo = bound.promotion
    decision = next(c for c in promo.result.challengers if c.tree_sha256 == m.binding.checkpoint_tree_sha256)
    assert card.data.voxledger["gate_verdict"] == "promoted" and f"**Verdict: {'passed' if decision.passed else 'failed'}**" in card.text
    assert rid in card.text and all(rule.detail in card.text for rule in decision.rules) and len(decision.rules) >= 1
    (ev,) = bound.evaluations.values()
    (name,) = [c.name for c in ev.parameters.candidates if c.artifact_sha256 == m.binding.checkpoint_tree_sha256]
    summary = next(s for s in ev.result.summaries if s.candidate == name)
    got = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert got == {k: v.mean for k, v in summary.overall.items()} and len(got) >= 5
    assert "## Not measured" in card.text and "listening test" in card.text


def test_the_card_writes_each_interval_the_evaluation_recorded(exported: Exported) -> None:
    """The shared run's toy evaluation has two prompts (no intervals); give one metric an interval and
    the card prints exactly those bounds, and the metadata carries them."""
    bound = bound_receipts(exported.verified)
    ((rid, ev),) = bound.evaluations.items()
    (i, s) = next((i, s) for i, s in enumerate(ev.result.summaries) if s.candidate == "adapter")
    wer = s.overall["wer:whisper_en"].model_copy(update={"low": 0.125, "high": 0.375, "mean": 0.25})
    s2 = s.model_copy(update={"overall": {**s.overall, "wer:whisper_en": wer}})
    summaries = (*ev.result.summaries[:i], s2, *ev.result.summaries[i + 1 :])
    ev2 = EvaluationReceipt.model_validate(ev.model_copy(update={"result": ev.result.model_copy(update={"summaries": summaries})}))
    bound2 = type(bound)(bound.training, bound.audit, {rid: ev2}, bound.promotion)
    m = exported.verified.manifest
    text = card_text(m, bound2, exported.verified.sha256, base_model_name(m.components.base_model_sha256), "pass").text
    assert "| wer:whisper_en | 0.25 [0.125, 0.375] (cluster_t, 2 prompts) |" in text
    card = ModelCard(text)
    (r,) = [r for r in card.data.eval_results if r.metric_type == "wer:whisper_en"]
    assert (r.metric_value, r.metric_args["low"], r.metric_args["high"]) == (0.25, 0.125, 0.375)


def test_an_exported_folder_signed_with_oms_verifies_with_the_library_and_not_after_a_byte_changes(exported: Exported) -> None:
    from model_signing import verifying

    from voxledger.tasks.packaging.attest import write_keypair
    from voxledger.tasks.packaging.oms import sign_folder

    folder = exported.work / "signed"
    shutil.copytree(exported.folder, folder)
    key, pub = write_keypair(exported.work / "oms", "ecdsa-p256")
    sig = sign_folder(folder, key)
    verifier = verifying.Config().use_elliptic_key_verifier(public_key=pub)
    verifier.verify(folder, sig)
    weights = folder / "adapter_model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 1
    weights.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"Hash mismatch for \\*'adapter_model\.safetensors"):
        verifying.Config().use_elliptic_key_verifier(public_key=pub).verify(folder, sig)


def doc_commands() -> list[str]:
    """The lines of docs/packaging.md's ``# doc-test: exports`` block."""
    import re

    text = (Path(__file__).resolve().parents[3] / "docs" / "packaging.md").read_text()
    (block,) = re.findall(r"```bash\n# doc-test: exports\n(.*?)```", text, flags=re.S)
    return [line for line in block.splitlines() if line.strip()]


def test_the_packaging_page_exports_sign_and_verify_as_written(exported: Exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shlex
    import subprocess
    import sys

    monkeypatch.chdir(tmp_path)
    commands = doc_commands()
    assert [c.split()[:3] for c in commands] == [
        ["voxledger", "package", "export"],
        ["voxledger", "package", "keygen"],
        ["voxledger", "package", "sign"],
        ["voxledger", "package", "verify"],
        ["model_signing", "verify", "key"],
    ]
    for line in commands:
        argv = shlex.split(line.replace("$PACKAGE", exported.verified.sha256))
        if argv[0] == "voxledger":
            r = CliRunner().invoke(main, ["--home", str(exported.home.root), *argv[1:]])
            assert r.exit_code == 0, (line, r.output)
        else:  # the library's own command, as a user runs it
            tool = Path(sys.executable).with_name(argv[0])
            done = subprocess.run([str(tool), *argv[1:]], capture_output=True, text=True, timeout=300, check=False)
            assert done.returncode == 0 and "Verification succeeded" in done.stdout + done.stderr, (line, done.stderr)
    assert _tree(tmp_path / "spk_t-peft") != exported.out["tree_sha256"]  # model.sig joined the folder
    (tmp_path / "spk_t-peft" / "model.sig").rename(tmp_path / "model.sig")
    assert _tree(tmp_path / "spk_t-peft") == exported.out["tree_sha256"]  # and nothing else changed
