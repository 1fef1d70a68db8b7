"""The tiny TTS network: phonemes + speaker -> durations -> frames -> Qwen2 backbone -> log-mel.

Phoneme and speaker embeddings feed a residual Conv1d encoder over phonemes. A small duration
predictor reads the (detached) encoder states and predicts ``log(1 + frames)`` per phoneme. The
encoder states are repeated by the durations (ground truth in training, predicted or espeak's at
synthesis), position-within-phoneme features are added, a frame-level convolution mixes
neighbours, and a `transformers.Qwen2Model` called with ``inputs_embeds`` models the frame
sequence. A linear layer maps to 80 normalised log-mel bins and a residual conv postnet refines
them. The Qwen2 attention projections keep their names (``q_proj``, ``k_proj``, ``v_proj``,
``o_proj``) so PEFT LoRA targets them exactly as it does in larger Qwen2-based TTS models.

Attention is bidirectional by default (a 4-D padding mask handed to the backbone per layer
type); ``bidirectional=False`` restores Qwen2's causal mask. Under CPU bfloat16 autocast (bf16
training) the attention product itself runs in float32 (`SDPA_FP32_UNDER_AUTOCAST`): PyTorch's CPU
flash-attention backward is about 3x slower in bf16 than in fp32 (1.02 s against 0.31 s over one
demo epoch, torch 2.13, Xeon with AMX), while the projections around it stay in bf16.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Literal, cast

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open
from torch import nn
from transformers import AttentionInterface, Qwen2Config, Qwen2Model
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from voxledger.tasks.backends.tiny.audio import NormStats
from voxledger.tasks.backends.tiny.config import PAD_ID, TinyTTSConfig
from voxledger.tasks.tensorio import save_deterministic

STRESS_MARKS = ("'", ",")
FORMAT = "voxledger-tiny-tts/1"
NORM_MEAN_KEY = "norm_stats.mean"
NORM_STD_KEY = "norm_stats.std"


def split_stress(phoneme: str) -> tuple[str, int]:
    """espeak stress prefix as (bare phoneme, 0 none / 1 primary ``'`` / 2 secondary ``,``)."""
    if len(phoneme) > 1 and phoneme[0] in STRESS_MARKS:
        return phoneme[1:], STRESS_MARKS.index(phoneme[0]) + 1
    return phoneme, 0


class PhonemeEmbedding(nn.Module):
    """Per-token embedding, optionally plus shared bare-phoneme and stress embeddings.

    espeak writes stress into the phoneme name (``'a``, ``,a``, ``a``), which splits each vowel's
    examples three ways; the shared parts let the stressed variants learn from each other.
    """

    def __init__(self, phonemes: tuple[str, ...], size: int, shared: bool) -> None:
        super().__init__()
        self.token = nn.Embedding(len(phonemes) + 1, size, padding_idx=PAD_ID)
        self.shared = shared
        if shared:
            split = [split_stress(p) for p in phonemes]
            bare = sorted({b for b, _ in split})
            self.register_buffer("bare_ids", torch.tensor([PAD_ID] + [bare.index(b) + 1 for b, _ in split]), persistent=False)
            self.register_buffer("stress_ids", torch.tensor([0] + [s for _, s in split]), persistent=False)
            self.bare = nn.Embedding(len(bare) + 1, size, padding_idx=PAD_ID)
            self.stress = nn.Embedding(3, size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x: torch.Tensor = self.token(ids)
        if self.shared:
            bare_ids, stress_ids = cast(torch.Tensor, self.bare_ids), cast(torch.Tensor, self.stress_ids)
            x = x + self.bare(bare_ids[ids]) + self.stress(stress_ids[ids])
        return x


class ConvBlock(nn.Module):
    """Residual ``x + dropout(LayerNorm(GELU(conv(x))))`` over ``(B, C, L)``, padding kept zero."""

    def __init__(self, channels: int, kernel: int, dropout: float) -> None:
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, kernel, padding=kernel // 2)
        self.norm = nn.LayerNorm(channels)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y = nn.functional.gelu(self.conv(x * mask))
        y = self.norm(y.transpose(1, 2)).transpose(1, 2)
        out: torch.Tensor = (x + self.dropout(y)) * mask
        return out


class Postnet(nn.Module):
    """Residual conv stack refining ``(B, T, n_mels)`` predictions."""

    def __init__(self, n_mels: int, channels: int, layers: int, kernel: int, dropout: float) -> None:
        super().__init__()
        sizes = [n_mels] + [channels] * (layers - 1) + [n_mels]
        self.convs = nn.ModuleList(nn.Conv1d(a, b, kernel, padding=kernel // 2) for a, b in pairwise(sizes))
        self.dropout = nn.Dropout(dropout)

    def forward(self, mel: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = mel.transpose(1, 2)
        for i, conv in enumerate(self.convs):
            x = conv(x * mask)
            if i < len(self.convs) - 1:
                x = self.dropout(torch.tanh(x))
        return mel + (x * mask).transpose(1, 2)


SDPA_FP32_UNDER_AUTOCAST = "voxledger_sdpa_fp32_under_autocast"


def _sdpa_fp32_under_autocast(
    module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs: object
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """transformers' SDPA attention; under CPU autocast the product runs in float32 (see the module
    docstring) and returns in the value's dtype. Without autocast it is SDPA unchanged, so fp32
    training and synthesis compute exactly what ``"sdpa"`` computes."""
    if not torch.is_autocast_enabled("cpu"):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)  # type: ignore[arg-type]
    with torch.autocast("cpu", enabled=False):
        out, weights = sdpa_attention_forward(module, query.float(), key.float(), value.float(), attention_mask, **kwargs)  # type: ignore[arg-type]
    return out.to(value.dtype), weights


AttentionInterface.register(SDPA_FP32_UNDER_AUTOCAST, _sdpa_fp32_under_autocast)


def _backbone_config(cfg: TinyTTSConfig) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=1,  # unused: the backbone is always called with inputs_embeds
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.ffn_size,
        num_hidden_layers=cfg.backbone_layers,
        num_attention_heads=cfg.attention_heads,
        num_key_value_heads=cfg.kv_heads,
        max_position_embeddings=cfg.max_frames,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        attention_dropout=0.0,
        use_cache=False,
        attn_implementation=SDPA_FP32_UNDER_AUTOCAST,  # type: ignore[call-arg]  # accepted through **kwargs; the 4-D boolean mask below relies on SDPA semantics
    )


def rounded_durations(log_durations: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Whole frame counts from predicted log durations, rounding the running total.

    Rounding each phoneme alone drifts and drops short phonemes; rounding the cumulative end
    times keeps every phoneme boundary within half a frame of the prediction (measured on the
    demo base voice spk-b1, 60 test sentences: Whisper WER 0.426 -> 0.374; espeak's own timing
    gives 0.360). Every kept phoneme gets at least one frame; padding gets none.
    """
    frames = torch.expm1(log_durations).clamp(min=0) * keep
    ends = frames.cumsum(dim=1).round()
    durations = torch.diff(ends, dim=1, prepend=torch.zeros_like(ends[:, :1]))
    return durations.clamp(min=1).long() * keep


class TinyTTS(nn.Module):
    """Non-autoregressive mel predictor; see the module docstring for the data flow."""

    def __init__(self, config: TinyTTSConfig) -> None:
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.phoneme_embedding = PhonemeEmbedding(config.phonemes, h, config.shared_stress_embedding)
        self.speaker_embedding = nn.Embedding(len(config.speakers), h)
        self.encoder = nn.ModuleList(ConvBlock(h, config.encoder_kernel, config.dropout) for _ in range(config.encoder_layers))
        self.duration_blocks = nn.ModuleList(ConvBlock(h, config.duration_kernel, config.dropout) for _ in range(config.duration_layers))
        self.duration_out = nn.Linear(h, 1)
        self.position_proj = nn.Linear(3, h)
        self.frame_speaker_proj = nn.Linear(h, h)
        self.frame_conv = ConvBlock(h, config.frame_kernel, config.dropout)
        self.backbone = Qwen2Model(_backbone_config(config))
        self.mel_out = nn.Linear(h, config.n_mels)
        self.postnet = Postnet(
            config.n_mels,
            config.postnet_channels,
            config.postnet_layers,
            config.postnet_kernel,
            config.dropout,
        )

    def speaker_index(self, speaker: str) -> int:
        """Row of ``speaker`` in the speaker table; KeyError names the known speakers."""
        if speaker not in self.config.speakers:
            raise KeyError(f"unknown speaker {speaker!r}; known: {list(self.config.speakers)}")
        return self.config.speakers.index(speaker)

    def encode(self, phoneme_ids: torch.Tensor, speaker_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder states ``(B, P, H)`` and predicted ``log(1 + frames)`` ``(B, P)``."""
        mask = (phoneme_ids != PAD_ID).unsqueeze(1).float()
        speaker = self.speaker_embedding(speaker_ids)
        x = (self.phoneme_embedding(phoneme_ids) + speaker.unsqueeze(1)).transpose(1, 2)
        for block in self.encoder:
            x = block(x, mask)
        d = x.detach() + speaker.unsqueeze(2)
        for block in self.duration_blocks:
            d = block(d, mask)
        log_durations = self.duration_out(d.transpose(1, 2)).squeeze(-1) * mask.squeeze(1)
        return x.transpose(1, 2), log_durations

    def decode(
        self, states: torch.Tensor, durations: torch.Tensor, speaker_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mel before and after the postnet ``(B, T, n_mels)`` and the frame mask ``(B, T)``."""
        durations = durations.long().clamp(min=0)
        ends = durations.cumsum(dim=1)
        lengths = ends[:, -1]
        n_frames = max(int(lengths.max()), 1)
        t = torch.arange(n_frames, device=states.device)
        idx = torch.searchsorted(ends, t.expand(len(ends), -1).contiguous(), right=True)
        idx = idx.clamp(max=durations.shape[1] - 1)
        frame_mask = t.unsqueeze(0) < lengths.unsqueeze(1)
        dur = durations.gather(1, idx).float().clamp(min=1.0)
        start = (ends - durations).gather(1, idx).float()
        frac = (t.unsqueeze(0) - start + 0.5) / dur
        positions = torch.stack([frac, 1.0 - frac, torch.log1p(dur) / 4.0], dim=-1)
        x = states.gather(1, idx.unsqueeze(-1).expand(-1, -1, states.shape[-1]))
        speaker = self.frame_speaker_proj(self.speaker_embedding(speaker_ids)).unsqueeze(1)
        x = (x + self.position_proj(positions) + speaker) * frame_mask.unsqueeze(-1)
        fmask = frame_mask.unsqueeze(1).float()
        x = self.frame_conv(x.transpose(1, 2), fmask).transpose(1, 2)
        attend = frame_mask[:, None, None, :].expand(-1, 1, n_frames, -1)
        if not self.config.bidirectional:
            attend = attend & torch.ones(n_frames, n_frames, dtype=torch.bool).tril()
        hidden = self.backbone(inputs_embeds=x, attention_mask={"full_attention": attend}, use_cache=False).last_hidden_state
        before = self.mel_out(hidden) * frame_mask.unsqueeze(-1)
        return before, self.postnet(before, fmask), frame_mask

    def forward(self, phoneme_ids: torch.Tensor, speaker_ids: torch.Tensor, durations: torch.Tensor) -> dict[str, torch.Tensor]:
        """Teacher-forced pass: ``mel_before``, ``mel_after``, ``frame_mask``, ``log_durations``."""
        states, log_durations = self.encode(phoneme_ids, speaker_ids)
        before, after, frame_mask = self.decode(states, durations, speaker_ids)
        return {
            "mel_before": before,
            "mel_after": after,
            "frame_mask": frame_mask,
            "log_durations": log_durations,
        }

    @torch.no_grad()
    def infer(
        self,
        phoneme_ids: torch.Tensor,
        speaker_ids: torch.Tensor,
        durations: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised mel ``(B, T, n_mels)`` and the durations used (predicted when None)."""
        states, log_durations = self.encode(phoneme_ids, speaker_ids)
        if durations is None:
            durations = rounded_durations(log_durations, phoneme_ids != PAD_ID)
        _, after, _ = self.decode(states, durations, speaker_ids)
        return after, durations

    def add_speaker(self, name: str, init: Literal["mean"] | str = "mean") -> int:
        """Append a speaker row (mean of existing rows, or a copy of speaker ``init``); return it."""
        if name in self.config.speakers:
            raise ValueError(f"speaker {name!r} already exists; pick a new name")
        weight = self.speaker_embedding.weight.data
        row = weight.mean(0) if init == "mean" else weight[self.speaker_index(init)]
        table = nn.Embedding(weight.shape[0] + 1, weight.shape[1])
        table.weight.data.copy_(torch.cat([weight, row.unsqueeze(0)]))
        self.speaker_embedding = table
        self.config = self.config.model_copy(update={"speakers": (*self.config.speakers, name)})
        return len(self.config.speakers) - 1


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def attach_lora(
    model: TinyTTS,
    r: int,
    alpha: float,
    dropout: float,
    targets: tuple[str, ...] = LORA_TARGETS,
    speaker_rows: tuple[int, ...] | None = None,
) -> PeftModel:
    """Wrap ``model`` in LoRA adapters on ``targets``; only adapters and speaker rows train.

    Args:
        speaker_rows: speaker-table rows that train alongside the adapters (PEFT trainable
            tokens); default: the last row, i.e. the speaker `TinyTTS.add_speaker` appended.
    """
    rows = tuple(speaker_rows) if speaker_rows is not None else (len(model.config.speakers) - 1,)
    return get_peft_model(model, lora_config(r, alpha, dropout, targets, rows))


def lora_config(r: int, alpha: float, dropout: float, targets: tuple[str, ...], speaker_rows: tuple[int, ...]) -> LoraConfig:
    """The PEFT config of a tiny adapter: LoRA on ``targets`` plus trainable speaker rows.

    The one place it is made: training (`attach_lora`) and the PEFT export
    (`TinyBackend.peft_files`) write the same config, so PEFT rebuilds the very adapter that trained.
    """
    return LoraConfig(
        r=r,
        lora_alpha=alpha,  # type: ignore[arg-type]  # peft scales by alpha/r: a float is fine
        lora_dropout=dropout,
        target_modules=list(targets),
        trainable_token_indices={"speaker_embedding": list(speaker_rows)},
    )


def merge_lora(peft_model: PeftModel) -> TinyTTS:
    """Fold adapters and trained speaker rows into a plain `TinyTTS` (the wrapper is consumed)."""
    merged = peft_model.merge_and_unload()
    if not isinstance(merged, TinyTTS):
        raise TypeError(f"merge_lora expected a wrapped TinyTTS, got {type(merged).__name__}")
    return merged


def save_tiny(path: str | Path, model: TinyTTS, norm_stats: NormStats) -> None:
    """Write weights, normalisation statistics and the config (JSON metadata) as safetensors."""
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors[NORM_MEAN_KEY] = torch.from_numpy(norm_stats.mean)
    tensors[NORM_STD_KEY] = torch.from_numpy(norm_stats.std)
    save_deterministic(tensors, path, metadata={"format": FORMAT, "config": model.config.model_dump_json()})


def load_tiny(path: str | Path) -> tuple[TinyTTS, NormStats]:
    """Read a `save_tiny` file back; strict about keys. Raises ValueError on a foreign file."""
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if meta.get("format") != FORMAT:
            raise ValueError(
                f"{path} is not a tiny TTS checkpoint (format {meta.get('format')!r}, expected {FORMAT!r}); write it with save_tiny"
            )
        names = f.keys()  # safe_open handles are not iterable
        tensors = {k: f.get_tensor(k) for k in names}
    norm = NormStats(mean=tensors.pop(NORM_MEAN_KEY).numpy(), std=tensors.pop(NORM_STD_KEY).numpy())
    model = TinyTTS(TinyTTSConfig.model_validate_json(meta["config"]))
    model.load_state_dict(tensors, strict=True)
    return model.eval(), norm
