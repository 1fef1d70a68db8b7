"""Fixes for upstream CosyVoice (ace7c47) running under transformers 5.x, torch 2.13, torchaudio >= 2.9.

Upstream's code is never edited; each fix is applied to the loaded objects or modules of this
process and named in `PATCHES` (the names are recorded in the training and adapter metadata):

- ``lm-dtype-fp32``: one dtype for the whole LM, float32, in training and inference. Upstream's
  ``Qwen2Encoder`` loads ``CosyVoice-BlankEN`` without a dtype; transformers 5.x then keeps the
  checkpoint's bf16 while ``speech_embedding`` / ``llm_decoder`` stay fp32, and the first
  forward fails ("mat1 and mat2 must have the same dtype"). The LM is cast to fp32 *before*
  ``llm.pt`` (fp32) is loaded, so nothing is rounded. No autocast anywhere.
- ``decode-full-mask``: upstream's ``forward_one_step`` passes ``masks[:, -1, :]``, a (1, 1)
  mask after the first step, which transformers 5.x pads with False up to the cache length:
  every new token would attend to position 0 only. The replacement passes an all-True mask
  covering the cache and the new positions (batch 1, no padding: what upstream means).
- ``min-window-stop-ids``: upstream's ``sampling_ids(ignore_eos=True)`` masks only id
  ``speech_token_size`` (sos 6561 in CosyVoice3LM); eos 6562 and the rest of the 200 stop ids
  could still end speech inside the minimum-length window. The replacement masks every stop id.
- ``load-wav-soundfile``: upstream's ``load_wav`` calls ``torchaudio.load(backend='soundfile')``,
  which torchaudio >= 2.9 routes through TorchCodec (ImportError without it). The replacement
  reads with soundfile and keeps upstream's semantics: channel mean, torchaudio's ``Resample``,
  and a refusal of audio below 16 kHz (upstream's ``min_sr``), raised as ``ValueError``.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

import numpy as np
import soundfile as sf
import torch
import torchaudio

from voxledger.tasks.backends.cosyvoice3.manifest import load_manifest

LM_DTYPE = torch.float32
PATCHES = ("lm-dtype-fp32", "decode-full-mask", "min-window-stop-ids", "load-wav-soundfile")
MIN_SAMPLE_RATE_HZ = int(str(load_manifest().behaviour["min_sample_rate_hz"]))


def to_lm_dtype(llm: torch.nn.Module) -> torch.nn.Module:
    """Cast every floating parameter and buffer of the LM to `LM_DTYPE` (in place; returned)."""
    return llm.to(LM_DTYPE)


def lm_dtypes(llm: torch.nn.Module) -> set[torch.dtype]:
    """The dtypes of the LM's parameters (one element when the policy holds)."""
    return {p.dtype for p in llm.parameters()}


def _cache_kwarg(model: torch.nn.Module) -> str:
    """``cache`` (transformers >= 5) or ``past_key_values`` (4.x), whichever ``forward`` names."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _forward_one_step(self: Any, xs: torch.Tensor, masks: torch.Tensor, cache: Any = None) -> tuple[torch.Tensor, Any]:
    past = 0 if cache is None else int(cache.get_seq_length())
    full = torch.ones((xs.shape[0], past + xs.shape[1]), dtype=torch.bool, device=xs.device)
    outs = self.model(
        inputs_embeds=xs,
        attention_mask=full,
        output_hidden_states=True,
        return_dict=True,
        use_cache=True,
        logits_to_keep=1,
        **{_cache_kwarg(self.model): cache},
    )
    new_cache = getattr(outs, "cache", None)
    return outs.hidden_states[-1], outs.past_key_values if new_cache is None else new_cache


def _sampling_ids(self: Any, weighted_scores: torch.Tensor, decoded_tokens: list[int], sampling: int, ignore_eos: bool = True) -> int:
    if ignore_eos:
        weighted_scores[self.stop_token_ids] = -float("inf")
    return int(self.sampling(weighted_scores, decoded_tokens, sampling))


def patch_decoding(llm: torch.nn.Module) -> None:
    """Replace ``forward_one_step`` and ``sampling_ids`` on this LM instance (upstream's class is kept)."""
    encoder = llm.get_submodule("llm")
    setattr(encoder, "forward_one_step", types.MethodType(_forward_one_step, encoder))  # noqa: B010 (an instance attribute on purpose)
    setattr(llm, "sampling_ids", types.MethodType(_sampling_ids, llm))  # noqa: B010


def load_wav(wav: str, target_sr: int, min_sr: int = MIN_SAMPLE_RATE_HZ) -> torch.Tensor:
    """(1, N) float32 audio at ``target_sr``: soundfile, channel mean, torchaudio ``Resample`` (as upstream).

    Raises:
        ValueError: the file is below ``min_sr`` and would need resampling (upstream asserts).
    """
    data, rate = sf.read(wav, dtype="float32", always_2d=True)
    speech = torch.from_numpy(np.ascontiguousarray(data.mean(axis=1))).unsqueeze(0)
    if rate != target_sr:
        if rate < min_sr:
            raise ValueError(
                f"prompt audio {wav} is {rate} Hz; CosyVoice3 needs at least {min_sr} Hz: use a {min_sr} Hz or better recording"
            )
        speech = torchaudio.transforms.Resample(orig_freq=rate, new_freq=target_sr)(speech)
    return speech


def patch_audio_loading() -> None:
    """Point upstream's ``load_wav`` (and the frontend's by-name import of it) at `load_wav`."""
    for name in ("cosyvoice.utils.file_utils", "cosyvoice.cli.frontend"):
        module = sys.modules.get(name)
        if module is None:
            module = __import__(name, fromlist=["load_wav"])
        module.load_wav = load_wav  # type: ignore[attr-defined]
