"""CosyVoice3 synthesis split into its components, for packaging probes and stage attribution.

Upstream's ``CosyVoice3.inference_*`` generators yield only the final waveform: the speech
tokens and the mel stay inside ``CosyVoice3Model.tts``. This module runs the same data flow
one component at a time, calling upstream's own objects in upstream's order:

1. ``speech_tokens`` (tokens): the front end's ``frontend_zero_shot`` / ``frontend_instruct2``
   for each normalised text segment, then ``CosyVoice3Model.llm_job`` (LLM sampling plus
   upstream's cut of long silent-token runs), called in this thread instead of upstream's
   background thread, so a failure raises here;
2. ``llm_logits`` (logits): the LLM's log-probabilities over the speech vocabulary at every
   emitted position, teacher-forced over the speech tokens (one uncached forward of
   upstream's ``lm_input`` plus the tokens' embeddings): the LLM's numerics, free of sampling;
3. ``mel`` (frames x 80): ``flow.inference`` with ``finalize=True`` as ``token2wav`` calls it
   (``speed`` applied to the mel as upstream does);
4. ``pcm``: ``hift.inference(speech_feat=mel, finalize=True)``.

Seeds: python's, numpy's and torch's generators are seeded once, right before the first
segment, as `synth.synthesize` does before upstream's generator, and the draws happen in the
same order (LLM sampling; at ace7c47 the causal flow and HiFT draw nothing at inference: their
noise buffers are drawn when the model is built). So the last stage equals the waveform
`synth.synthesize` returns, bit for bit; the packaging probe checks that on every package.

``feed`` replaces a stage's output by another runtime's before the next stage uses it
(attribution). A text upstream's front end splits into more than one segment cannot be fed
(the fed arrays carry no segment boundaries): that is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from voxledger.schemas.errors import SynthesisError, validation_lines
from voxledger.tasks.backends.base import SynthesisStage
from voxledger.tasks.backends.cosyvoice3 import synth

STAGES: tuple[SynthesisStage, ...] = (
    SynthesisStage(name="speech_tokens", kind="tokens", dump="tokens"),
    SynthesisStage(name="llm_logits", kind="logits", dump="logits"),
    SynthesisStage(name="mel", kind="mel", dump="mel"),
    SynthesisStage(name="pcm", kind="pcm", dump="pcm"),
)


def _lm_prefix(llm: Any, model_input: dict[str, torch.Tensor], device: torch.device) -> torch.Tensor:
    """Upstream's ``lm_input`` of ``Qwen2LM.inference`` for CosyVoice3: sos, prompt text + text, task id, prompt speech tokens."""
    text = torch.concat([model_input["prompt_text"], model_input["text"]], dim=1).to(device)
    text_emb = llm.llm.model.model.embed_tokens(text)
    sos = llm.speech_embedding.weight[llm.sos].reshape(1, 1, -1)
    task = llm.speech_embedding.weight[llm.task_id].reshape(1, 1, -1)
    prompt_tokens = model_input.get("llm_prompt_speech_token", torch.zeros(1, 0, dtype=torch.int32))
    if prompt_tokens.shape[1]:
        prompt_emb = llm.speech_embedding(prompt_tokens.to(device))
    else:
        prompt_emb = torch.zeros(1, 0, text_emb.shape[-1], dtype=text_emb.dtype, device=device)
    return torch.concat([sos, text_emb, task, prompt_emb], dim=1)


@torch.inference_mode()
def teacher_forced_logits(llm: Any, model_input: dict[str, torch.Tensor], tokens: np.ndarray, device: torch.device) -> np.ndarray:
    """Log-probabilities (len(tokens) + 1 rows x speech vocabulary) the LLM gives at each emitted position
    and at the stop after the last token, from one causal forward over prefix + tokens."""
    prefix = _lm_prefix(llm, model_input, device)
    ids = torch.from_numpy(tokens.astype(np.int64)).reshape(1, -1).to(device)
    x = torch.concat([prefix, llm.speech_embedding(ids)], dim=1)
    out = llm.llm.model(inputs_embeds=x, output_hidden_states=True, return_dict=True)
    hidden = out.hidden_states[-1][:, prefix.shape[1] - 1 :]
    logp = llm.llm_decoder(hidden).log_softmax(dim=-1)
    result: np.ndarray = logp[0].float().cpu().numpy().astype(np.float32)
    return result


def _model_inputs(loaded: synth.CosyVoice3Loaded, text: str, s: synth.SynthesisSettings) -> list[dict[str, torch.Tensor]]:
    """The front end's model input per normalised segment, as upstream's inference_* build them."""
    wav, prompt = synth.resolve_prompt(loaded, s)
    front, rate = loaded.cosy.frontend, int(loaded.cosy.sample_rate)
    segments = front.text_normalize(text, split=True, text_frontend=s.text_frontend)
    if s.mode == "instruct2":
        return [front.frontend_instruct2(seg, prompt, wav, rate, "") for seg in segments]
    prompt = front.text_normalize(prompt, split=False, text_frontend=s.text_frontend)
    return [front.frontend_zero_shot(seg, prompt, wav, rate, "") for seg in segments]


def _speech_tokens(model: Any, mi: dict[str, torch.Tensor]) -> np.ndarray:
    uuid = "voxledger-stages"
    model.tts_speech_token_dict[uuid], model.llm_end_dict[uuid] = [], False
    try:
        model.llm_job(mi["text"], mi["prompt_text"], mi.get("llm_prompt_speech_token", torch.zeros(1, 0, dtype=torch.int32)),
                      mi["llm_embedding"], uuid)  # fmt: skip
        return np.asarray(model.tts_speech_token_dict[uuid], dtype=np.int32)
    finally:
        model.tts_speech_token_dict.pop(uuid, None)
        model.llm_end_dict.pop(uuid, None)


@torch.inference_mode()
def _mel(model: Any, mi: dict[str, torch.Tensor], tokens: np.ndarray, speed: float) -> np.ndarray:
    flow, dev = model.flow, model.device
    token = torch.from_numpy(tokens.astype(np.int32)).reshape(1, -1).to(dev)
    prompt_token, prompt_feat = mi["flow_prompt_speech_token"].to(dev), mi["prompt_speech_feat"].to(dev)
    mel, _ = flow.inference(
        token=token,
        token_len=torch.tensor([token.shape[1]], dtype=torch.int32).to(dev),
        prompt_token=prompt_token,
        prompt_token_len=torch.tensor([prompt_token.shape[1]], dtype=torch.int32).to(dev),
        prompt_feat=prompt_feat,
        prompt_feat_len=torch.tensor([prompt_feat.shape[1]], dtype=torch.int32).to(dev),
        embedding=mi["flow_embedding"].to(dev),
        streaming=False,
        finalize=True,
    )
    if speed != 1.0:
        mel = F.interpolate(mel, size=int(mel.shape[2] / speed), mode="linear")
    frames: np.ndarray = mel[0].T.float().cpu().numpy().astype(np.float32)  # frames x bins
    return frames


@torch.inference_mode()
def _pcm(model: Any, mel: np.ndarray) -> np.ndarray:
    feat = torch.from_numpy(np.ascontiguousarray(mel.T)).unsqueeze(0).to(model.device)
    speech, _ = model.hift.inference(speech_feat=feat, finalize=True)
    pcm: np.ndarray = speech[0].float().cpu().numpy().astype(np.float32)
    return pcm


def stage_outputs(
    loaded: synth.CosyVoice3Loaded, text: str, seed: int, settings: dict[str, Any], feed: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """Speech tokens (int32), LLM log-probabilities (float32, positions x vocabulary), mel (float32,
    frames x 80) and pcm (float32, 24 kHz) of one text.

    Raises:
        SynthesisError: bad settings or prompt, a text split into several segments while ``feed``
            is given, or an upstream failure in any component.
    """
    try:
        s = synth.SynthesisSettings(**settings)
    except ValidationError as exc:
        raise SynthesisError(f"invalid cosyvoice3 synthesis settings {settings}: {'; '.join(validation_lines(exc))}") from exc
    feed = feed or {}
    model = loaded.cosy.model
    out: dict[str, list[np.ndarray]] = {stage.name: [] for stage in STAGES}
    with synth.upstream_calls(text):
        inputs = _model_inputs(loaded, text, s)
        if feed and len(inputs) != 1:
            raise SynthesisError(
                f"stage attribution needs a text upstream's front end keeps in one segment; {text!r} became {len(inputs)} segments"
            )
        synth.seed_everything(seed)
        for mi in inputs:
            tokens = _speech_tokens(model, mi)
            out["speech_tokens"].append(tokens)
            tokens = feed.get("speech_tokens", tokens)
            out["llm_logits"].append(teacher_forced_logits(model.llm, mi, tokens, model.device))
            mel = _mel(model, mi, tokens, s.speed)
            out["mel"].append(mel)
            out["pcm"].append(_pcm(model, feed.get("mel", mel)))
    return {name: np.concatenate(parts, axis=0) for name, parts in out.items()}
