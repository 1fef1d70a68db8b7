"""Synthesis through upstream's CosyVoice3 (fake tree): runtimes, seeds, concatenation, thread failures."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from voxledger.schemas.errors import DigestMismatchError, SynthesisError
from voxledger.tasks.backends.cosyvoice3 import synth
from voxledger.tasks.backends.cosyvoice3.backend import (
    ADAPTER_CONFIG,
    ADAPTER_FILE,
    MERGED_FILE,
    CosyVoice3Backend,
)
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.backends.cosyvoice3.upstream import read_llm_state

from .test_training import make_plan

TEXT = "The boat drifted toward the shore. Everyone waved from the pier."


@pytest.fixture(scope="module")
def export_dir(fake_config: CosyVoice3Config, small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An adapter export after 8 training steps (so the adapters are not zero)."""
    backend = CosyVoice3Backend(fake_config)
    setup = backend.setup(small_corpus, make_plan(), None)
    optimizer = torch.optim.AdamW([p for p in setup.model.parameters() if p.requires_grad], lr=3e-2)
    batch = backend.epoch_batches(0, 0)[0]
    for _ in range(8):
        backend.train_step(setup.model, batch, optimizer, 3e-2, 1.0)
    out = tmp_path_factory.mktemp("cv3-export")
    backend.export(setup.model, out)
    return out


@pytest.fixture(scope="module")
def adapter(fake_config: CosyVoice3Config, export_dir: Path) -> synth.CosyVoice3Loaded:
    return CosyVoice3Backend(fake_config).load_for_inference(None, export_dir, "adapter")


LONG = " ".join(["The boat drifted slowly toward the quiet shore while everyone on the pier waved and cheered."] * 8)


def test_zero_shot_concatenates_segments_at_24_khz(adapter: synth.CosyVoice3Loaded) -> None:
    wav, rate = CosyVoice3Backend().synthesize(adapter, LONG, "spk_t", 7, {})
    assert rate == 24000 and wav.dtype == np.float32 and wav.ndim == 1
    synth.seed_everything(7)
    prompt = f"You are a helpful assistant.<|endofprompt|>{adapter.prompt_text}"
    segments = [o["tts_speech"] for o in adapter.cosy.inference_zero_shot(LONG, prompt, str(adapter.prompt_wav), stream=False)]
    # upstream joins sentences into 60-80-token chunks (split_paragraph): 8 x 16 tokens -> 80 + 48 tokens
    assert len(segments) == 2 and all(s.shape[0] == 1 for s in segments)
    assert len(adapter.cosy.frontend.text_normalize(TEXT, split=True)) == 1  # two short sentences stay one segment
    assert np.array_equal(wav, torch.cat(segments, dim=1)[0].numpy())


def test_seed_is_set_right_before_each_call(adapter: synth.CosyVoice3Loaded) -> None:
    backend = CosyVoice3Backend()
    first, _ = backend.synthesize(adapter, TEXT, "spk_t", 11, {})
    random.seed(99)
    torch.manual_seed(99)
    np.random.seed(99)
    again, _ = backend.synthesize(adapter, TEXT, "spk_t", 11, {})
    other, _ = backend.synthesize(adapter, TEXT, "spk_t", 12, {})
    assert np.array_equal(first, again)
    assert first.shape != other.shape or not np.array_equal(first, other)


def test_instruct2_and_explicit_prompts(adapter: synth.CosyVoice3Loaded, small_corpus: Path) -> None:
    backend = CosyVoice3Backend()
    wav, _ = backend.synthesize(adapter, TEXT, "spk_t", 3, {"mode": "instruct2", "instruction": "Speak slowly."})
    assert wav.size > 0.1 * 24000
    other_voice = {"prompt_wav": str(small_corpus / "wavs" / "spk_a_0.wav"), "prompt_text": "The birch canoe slid on the smooth planks."}
    assert backend.synthesize(adapter, TEXT, "spk_a", 3, other_voice)[0].size > 0
    with pytest.raises(SynthesisError, match="bundled prompt is speaker 'spk_t'"):
        backend.synthesize(adapter, TEXT, "spk_a", 3, {})
    with pytest.raises(SynthesisError, match="valid keys"):
        backend.synthesize(adapter, TEXT, "spk_t", 3, {"temperature": 0.5})


def test_llm_thread_failure_is_raised_not_returned_as_a_short_wav(adapter: synth.CosyVoice3Loaded, monkeypatch: pytest.MonkeyPatch) -> None:
    # what upstream does: the thread's assertion is only reported, and a 0.04 s wav still comes back
    with synth.capture_thread_errors() as errors:
        raw = [o["tts_speech"] for o in adapter.cosy.inference_zero_shot("Hello there.", "no marker here", str(adapter.prompt_wav))]
    assert raw[0].shape == (1, 960) and isinstance(errors[0], AssertionError)
    monkeypatch.setattr(synth, "_prompt_text", lambda transcript, system: transcript)  # drop the <|endofprompt|> marker
    with pytest.raises(SynthesisError, match=r"LLM thread failed.*AssertionError.*0\.040 s") as err:
        CosyVoice3Backend().synthesize(adapter, "Hello there.", "spk_t", 1, {"prompt_text": "no marker here"})
    assert isinstance(err.value.__cause__, AssertionError) and "(llm_job)" in str(err.value)  # upstream's thread target


def test_runtimes_agree_and_merged_export_has_llm_pt_keys(fake_config: CosyVoice3Config, export_dir: Path,
                                                          adapter: synth.CosyVoice3Loaded, tmp_path: Path) -> None:  # fmt: skip
    backend = CosyVoice3Backend(fake_config)
    merged = backend.load_for_inference(None, export_dir, "merged")
    backend.export_merged(adapter, tmp_path / "merged")
    llm_pt = read_llm_state(fake_config.model_dir / "llm.pt")
    stored = load_file(str(tmp_path / "merged" / MERGED_FILE))
    # the tied text embedding / LM head pair is stored once, as in llm.pt, and restored on reading
    assert sorted(stored) == sorted(set(llm_pt) - {"llm.model.lm_head.weight"})
    restored = read_llm_state(tmp_path / "merged" / MERGED_FILE)
    assert sorted(restored) == sorted(llm_pt)
    assert restored["llm.model.lm_head.weight"].data_ptr() == restored["llm.model.model.embed_tokens.weight"].data_ptr()
    # size: llm.pt plus the LoRA delta, within 2% (was twice the embedding: 151936 x hidden floats more)
    expected = (fake_config.model_dir / "llm.pt").stat().st_size + (export_dir / ADAPTER_FILE).stat().st_size
    size = (tmp_path / "merged" / MERGED_FILE).stat().st_size
    assert abs(size - expected) <= 0.02 * expected, (size, expected)
    exported = backend.load_for_inference(None, tmp_path / "merged", "merged_export")
    base = backend.load_for_inference(None, export_dir, "base")
    wavs = {rt.runtime: backend.synthesize(rt, TEXT, "spk_t", 5, {})[0] for rt in (adapter, merged, exported, base)}
    for runtime in ("merged", "merged_export"):
        assert wavs[runtime].shape == wavs["adapter"].shape and np.allclose(wavs[runtime], wavs["adapter"], atol=1e-4), runtime
    assert wavs["base"].shape != wavs["adapter"].shape or not np.allclose(wavs["base"], wavs["adapter"], atol=1e-4)


def test_base_runtime_needs_a_prompt_and_adapters_need_their_base(fake_config: CosyVoice3Config, export_dir: Path, tmp_path: Path) -> None:
    backend = CosyVoice3Backend(fake_config)
    bare = backend.load_for_inference(None, tmp_path, "base")
    with pytest.raises(SynthesisError, match="no prompt audio"):
        backend.synthesize(bare, TEXT, "spk_t", 1, {})
    meta = json.loads((export_dir / ADAPTER_CONFIG).read_text())
    moved = tmp_path / "tampered"
    moved.mkdir()
    for f in export_dir.iterdir():
        (moved / f.name).write_bytes(f.read_bytes())
    (moved / ADAPTER_CONFIG).write_text(json.dumps({**meta, "base_weights_sha256": "0" * 64}))
    with pytest.raises(DigestMismatchError, match="trained on LLM weights 0000"):
        backend.load_for_inference(None, moved, "adapter")
