"""The cosyvoice3 LLM adapter as a PEFT folder: ``PeftModel.from_pretrained`` loads it onto the ``CosyVoice3LM``
voxledger's own loader builds, and the model's forward output equals voxledger's own adapter load bit for bit.

Parametrised over the fake tree and (the real-chain tier, ``-m real_chain``) upstream's real code on a
scaffolded model folder. The adapter is scaffolded too: LoRA injected by the training set-up, its B matrices
drawn at random (a fresh adapter's are zero, which would hide a load that put nothing in place)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from voxledger.tasks.backends.cosyvoice3.backend import ADAPTER_CONFIG, ADAPTER_FILE, CosyVoice3Backend
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config

from .test_training import make_plan


def _forward(model: torch.nn.Module, batch: dict, seed: int = 5) -> dict[str, torch.Tensor]:  # type: ignore[type-arg]
    random.seed(seed)  # upstream draws Python's global random per utterance while preparing LM inputs
    with torch.no_grad():
        return dict(model(batch, torch.device("cpu")))


def test_peft_loads_the_llm_adapter_export_and_computes_what_voxledger_computes(
    cv3_upstream: CosyVoice3Config, small_corpus: Path, tmp_path: Path
) -> None:
    from peft import PeftModel

    torch.set_num_threads(1)
    backend = CosyVoice3Backend()
    setup = backend.setup(small_corpus, make_plan(max_epochs=1), None)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in setup.model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    backend.export(setup.model, tmp_path / "adapter")
    adapter = {name: (tmp_path / "adapter" / name).read_bytes() for name in (ADAPTER_CONFIG, ADAPTER_FILE)}
    base_name = "sha256:" + "ab" * 32
    files, loading = backend.peft_files(adapter, setup.effective_config, base_name)
    assert sorted(files) == ["adapter_config.json", "adapter_model.safetensors"] and "PeftModel.from_pretrained" in loading
    assert backend.peft_files(adapter, setup.effective_config, base_name) == (files, loading)  # bytes are a function of the adapter
    (tmp_path / "peft").mkdir()
    for name, data in files.items():
        (tmp_path / "peft" / name).write_bytes(data)
    config = json.loads(files["adapter_config.json"])
    settings = json.loads(adapter[ADAPTER_CONFIG])["lora"]
    assert config["peft_type"] == "LORA" and config["base_model_name_or_path"] == base_name
    assert (config["r"], config["lora_alpha"]) == (settings["r"], settings["alpha"])

    ours = backend.load_for_inference(None, tmp_path / "adapter", "adapter").cosy.model.llm
    plain = backend.load_for_inference(None, tmp_path / "adapter", "base").cosy.model.llm
    batch = setup.cv_batches[0]
    untouched = _forward(plain, batch)
    theirs = PeftModel.from_pretrained(plain, str(tmp_path / "peft"))
    a, b = _forward(theirs, batch), _forward(ours, batch)
    assert set(a) == set(b) and "loss" in a
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert not torch.equal(a["loss"], untouched["loss"])  # the adapter's weights were loaded, not left out
    lora_b = {n for n, _ in theirs.named_parameters() if ".lora_B." in n}
    assert len(lora_b) == setup.effective_config["adapted_modules"]
