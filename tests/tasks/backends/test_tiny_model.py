"""TinyTTS network: shapes, masking, speaker adaptation, LoRA attach/merge, safetensors I/O."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from voxledger.tasks.backends.tiny.audio import NormStats
from voxledger.tasks.backends.tiny.model import (
    LORA_TARGETS,
    TinyTTS,
    TinyTTSConfig,
    attach_lora,
    load_tiny,
    merge_lora,
    rounded_durations,
    save_tiny,
    split_stress,
)

SMALL = {"hidden_size": 64, "ffn_size": 128, "backbone_layers": 2, "postnet_channels": 32}


def small_model(seed: int = 0, **overrides: object) -> TinyTTS:
    torch.manual_seed(seed)
    cfg = TinyTTSConfig(phonemes=tuple("_abcdefghij"), speakers=("s1", "s2"), **{**SMALL, **overrides})
    return TinyTTS(cfg).eval()


def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    phonemes = torch.tensor([[1, 2, 3, 4, 0], [5, 6, 7, 8, 9]])
    durations = torch.tensor([[3, 4, 0, 2, 0], [2, 2, 2, 2, 2]])
    return phonemes, torch.tensor([0, 1]), durations


def test_forward_shapes_and_frame_mask() -> None:
    out = small_model()(*inputs())
    assert out["mel_before"].shape == out["mel_after"].shape == (2, 10, 80)
    assert out["log_durations"].shape == (2, 5)
    assert out["frame_mask"].sum(1).tolist() == [9, 10]
    assert float(out["mel_after"][0, 9:].detach().abs().max()) == 0.0  # padding frames stay zero


def test_padding_does_not_leak_into_real_frames() -> None:
    model = small_model()
    phonemes, speakers, durations = inputs()
    alone = model(phonemes[:1, :4], speakers[:1], durations[:1, :4])["mel_after"]
    batched = model(phonemes, speakers, durations)["mel_after"][:1, :9]
    torch.testing.assert_close(alone, batched, atol=1e-5, rtol=0)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_attention_direction(bidirectional: bool) -> None:
    model = small_model(bidirectional=bidirectional)
    phonemes = torch.arange(1, 11).unsqueeze(0)
    durations = torch.full((1, 10), 2)
    changed = phonemes.clone()
    changed[0, 9] = 1
    speakers = torch.tensor([0])
    first = model(phonemes, speakers, durations)["mel_before"][0, 0].detach()
    second = model(changed, speakers, durations)["mel_before"][0, 0].detach()
    # convolutions reach 6 phonemes and 2 frames: only bidirectional attention links frame 0
    # to phoneme 9
    assert bool((first - second).abs().max() > 1e-4) is bidirectional


def test_predicted_durations_are_used_when_none_given() -> None:
    model = small_model()
    phonemes, speakers, _ = inputs()
    mel, used = model.infer(phonemes, speakers)
    assert used.shape == phonemes.shape and int(used[0, 4]) == 0  # padding gets no frames
    assert mel.shape[1] == max(int(used.sum(1).max()), 1)


def test_rounded_durations_round_the_running_total_and_keep_every_phoneme() -> None:
    frames = torch.tensor([[0.4, 0.4, 0.4, 0.4, 2.6, 7.0], [1.4, 1.4, 1.4, 1.4, 0.0, 0.0]])
    keep = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    got = rounded_durations(torch.log1p(frames), keep)
    assert got[1].tolist() == [1, 2, 1, 2, 0, 0]  # running totals 1.4, 2.8, 4.2, 5.6 -> 1, 3, 4, 6 (alone: 1, 1, 1, 1)
    assert got[0].tolist()[:4] == [1, 1, 1, 1]  # rounded alone these would all be 0: dropped phonemes
    assert abs(int(got[0].sum()) - float(frames[0].sum())) < 2  # the total tracks the prediction


def test_stress_variants_share_a_bare_phoneme_embedding() -> None:
    assert split_stress("'aI") == ("aI", 1) and split_stress(",a") == ("a", 2)
    assert split_stress("a") == ("a", 0) and split_stress("'") == ("'", 0)
    torch.manual_seed(0)
    cfg = TinyTTSConfig(phonemes=("'a", ",a", "a", "b"), speakers=("s",), **SMALL)
    emb = TinyTTS(cfg).phoneme_embedding
    assert emb.bare_ids.tolist() == [0, 1, 1, 1, 2] and emb.stress_ids.tolist() == [0, 1, 2, 0, 0]
    ids = torch.tensor([[1, 2, 3]])
    before = emb(ids).detach()
    with torch.no_grad():
        emb.bare.weight[1] += 1.0  # moves every stress variant of "a" together
    torch.testing.assert_close(emb(ids).detach() - before, torch.ones(1, 3, 64))
    plain = TinyTTS(cfg.model_copy(update={"shared_stress_embedding": False})).phoneme_embedding
    assert not hasattr(plain, "bare")


def test_add_speaker_appends_mean_row_and_names_it() -> None:
    model = small_model()
    before = model.speaker_embedding.weight.detach().clone()
    index = model.add_speaker("target")
    assert index == 2 and model.config.speakers == ("s1", "s2", "target")
    torch.testing.assert_close(model.speaker_embedding.weight[2], before.mean(0))
    with pytest.raises(ValueError, match="already exists"):
        model.add_speaker("s1")
    with pytest.raises(KeyError, match="unknown speaker"):
        model.speaker_index("nobody")


def test_lora_trains_only_adapters_and_new_row_then_merges_exactly() -> None:
    model = small_model()
    original = model.speaker_embedding.weight.detach().clone()
    row = model.add_speaker("target")
    phonemes, _, durations = inputs()
    speakers = torch.tensor([row, row])
    plain = model(phonemes, speakers, durations)["mel_after"].detach()
    peft_model = attach_lora(model, r=4, alpha=8, dropout=0.0)
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or "trainable_tokens" in n for n in trainable)
    assert {t for t in LORA_TARGETS if any(f".{t}.lora_A" in n for n in trainable)} == set(LORA_TARGETS)
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(3):
        loss = peft_model(phonemes, speakers, durations)["mel_after"].abs().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    adapted = peft_model(phonemes, speakers, durations)["mel_after"].detach()
    assert float((adapted - plain).abs().max()) > 1e-3
    merged = merge_lora(peft_model)
    assert isinstance(merged, TinyTTS)
    torch.testing.assert_close(merged(phonemes, speakers, durations)["mel_after"], adapted, atol=1e-4, rtol=0)
    torch.testing.assert_close(merged.speaker_embedding.weight[:2], original)  # old rows frozen
    assert set(merged.state_dict()) == set(TinyTTS(merged.config).state_dict())


def test_safetensors_round_trip(tmp_path) -> None:
    model = small_model(seed=3)
    model.add_speaker("target")
    norm = NormStats(mean=np.linspace(-5, 0, 80, dtype=np.float32), std=np.full(80, 2, np.float32))
    path = tmp_path / "tiny.safetensors"
    save_tiny(path, model, norm)
    loaded, loaded_norm = load_tiny(path)
    assert loaded.config == model.config
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    np.testing.assert_array_equal(loaded_norm.mean, norm.mean)
    np.testing.assert_array_equal(loaded_norm.std, norm.std)
    torch.testing.assert_close(loaded(*inputs())["mel_after"], model(*inputs())["mel_after"])


def test_load_rejects_a_foreign_safetensors_file(tmp_path) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(2)}, str(path))
    with pytest.raises(ValueError, match="not a tiny TTS checkpoint"):
        load_tiny(path)


def test_attention_runs_in_float32_under_bf16_autocast_and_is_plain_sdpa_otherwise() -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from voxledger.tasks.backends.tiny.model import SDPA_FP32_UNDER_AUTOCAST, _sdpa_fp32_under_autocast

    model = small_model()
    assert all(layer.self_attn.config._attn_implementation == SDPA_FP32_UNDER_AUTOCAST for layer in model.backbone.layers)
    attn = model.backbone.layers[0].self_attn
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 37, 16, generator=g) for _ in range(3))
    k, v = k[:, :2], v[:, :2]  # grouped-query: 2 kv heads, as the tiny backbone has
    mask = torch.ones(2, 1, 37, 37, dtype=torch.bool)
    plain, _ = sdpa_attention_forward(attn, q, k, v, mask)
    ours, _ = _sdpa_fp32_under_autocast(attn, q, k, v, mask)
    assert torch.equal(ours, plain)  # fp32 training and synthesis: exactly SDPA
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed, _ = _sdpa_fp32_under_autocast(attn, q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
        in_bf16, _ = sdpa_attention_forward(attn, q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
    exact, _ = sdpa_attention_forward(attn, q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float(), mask)
    assert mixed.dtype == torch.bfloat16
    assert torch.equal(mixed, exact.bfloat16())  # the product in float32, rounded once at the end
    assert not torch.equal(in_bf16, exact.bfloat16())  # what autocast alone would have computed
