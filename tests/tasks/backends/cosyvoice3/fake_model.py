"""Builds a fake Fun-CosyVoice3-0.5B model folder for the fake CosyVoice tree (test fixture).

The folder has the real layout (``cosyvoice3.yaml``, ``llm.pt``, ``flow.pt``, ``hift.pt``,
``campplus.onnx``, ``speech_tokenizer_v3.onnx``, ``CosyVoice-BlankEN/``) with tiny random
weights: a 2-layer Qwen2 (hidden 32) with the real text vocabulary size (151936) and the real
special-token ids. It is not CosyVoice3 and its audio is noise.

Weights are stored as the released ones are (see ``upstream_manifest.json``):
``CosyVoice-BlankEN/model.safetensors`` in bf16 with a transformers-4.x ``config.json``
(``"torch_dtype": "bfloat16"``), and ``llm.pt`` in fp32 holding values that bf16 cannot
represent (a fine-tuned fp32 LM), so loading it into a bf16 module would round it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.backends.cosyvoice3.upstream import load_model_yaml

FAKE_TREE = Path(__file__).resolve().parents[3] / "fixtures" / "fake_cosyvoice"
ASSETS = FAKE_TREE / "fixture_assets"
TEXT_VOCAB = 151936
SPECIAL_IDS = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|endofprompt|>": 151646, "[breath]": 151647}

# a transformers-4.x style config.json, as the released CosyVoice-BlankEN ships one (tiny sizes)
QWEN_CONFIG_4X = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu",
    "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64, "max_position_embeddings": 2048, "max_window_layers": 2,
    "model_type": "qwen2", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 2048, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1", "use_cache": True, "use_sliding_window": False, "vocab_size": TEXT_VOCAB,
}  # fmt: skip

YAML = """# TEST FIXTURE: the fake CosyVoice tree's model yaml (same shape as Fun-CosyVoice3-0.5B's, tiny sizes).
__set_seed1: !apply:random.seed [1986]
__set_seed2: !apply:numpy.random.seed [1986]
__set_seed3: !apply:torch.manual_seed [1986]

sample_rate: 24000
llm_input_size: 32
llm_output_size: 32
spk_embed_dim: 192
qwen_pretrain_path: ''
token_frame_rate: 25
token_mel_ratio: 2

llm: !new:cosyvoice.llm.llm.CosyVoice3LM
    llm_input_size: !ref <llm_input_size>
    llm_output_size: !ref <llm_output_size>
    speech_token_size: 6561
    length_normalized_loss: True
    lsm_weight: 0
    mix_ratio: [5, 15]
    llm: !new:cosyvoice.llm.llm.Qwen2Encoder
        pretrain_path: !ref <qwen_pretrain_path>
    sampling: !name:cosyvoice.utils.common.ras_sampling
        top_p: 0.8
        top_k: 25
        win_size: 10
        tau_r: 0.1

flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT
    input_size: 80
    output_size: 80
    spk_embed_dim: !ref <spk_embed_dim>
    vocab_size: 6561
    input_frame_rate: !ref <token_frame_rate>
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: 3

hift: !new:cosyvoice.hifigan.generator.CausalHiFTGenerator
    in_channels: 80
    sampling_rate: !ref <sample_rate>
    hop_length: 480

hifigan:
    generator: !ref <hift>

get_tokenizer: !name:cosyvoice.tokenizer.tokenizer.get_qwen_tokenizer
    token_path: !ref <qwen_pretrain_path>
    skip_special_tokens: True
    version: cosyvoice3
allowed_special: 'all'
feat_extractor: !name:matcha.utils.audio.mel_spectrogram
    n_fft: 1920
    num_mels: 80
    sampling_rate: !ref <sample_rate>
    hop_size: 480
    win_size: 1920
    fmin: 0
    fmax: null
    center: False

train_conf:
    max_epoch: 200
    grad_clip: 5
"""


def build_fake_model_dir(model_dir: Path, work_dir: Path) -> CosyVoice3Config:
    """Write the fake model folder; return a config pointing at the fake tree and it."""
    qwen = model_dir / "CosyVoice-BlankEN"
    qwen.mkdir(parents=True)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=TEXT_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True)  # fmt: skip
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(qwen)
    (qwen / "config.json").write_text(json.dumps(QWEN_CONFIG_4X, indent=2), encoding="utf-8")
    (qwen / "vocab.json").write_text(json.dumps(SPECIAL_IDS), encoding="utf-8")
    (qwen / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    (qwen / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "Qwen2Tokenizer"}), encoding="utf-8")
    for name in ("campplus.onnx", "speech_tokenizer_v3.onnx"):
        shutil.copyfile(ASSETS / name, model_dir / name)
    (model_dir / "cosyvoice3.yaml").write_text(YAML, encoding="utf-8")
    cfg = CosyVoice3Config(checkout_dir=FAKE_TREE, model_dir=model_dir, work_dir=work_dir)
    parts = load_model_yaml(cfg, build_unused=True)
    llm = parts["llm"].float()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # fine-tuned in fp32: no longer on the bf16 grid
        for p in llm.llm.parameters():
            p.add_(1e-3 * torch.randn(p.shape, generator=gen))
    for name in ("llm", "flow", "hift"):
        torch.save({k: v.float() for k, v in parts[name].state_dict().items()}, model_dir / f"{name}.pt")
    return cfg
