"""Contract tests: the fake tree and the backend against upstream_manifest.json, and the four
ways upstream at ace7c47 breaks under transformers 5.x / torchaudio >= 2.9 (dtype, decode mask,
prompt audio, stop ids in the minimum-length window).

The fake imitates upstream's behaviour, bugs included (bf16 BlankEN loaded without a dtype, a
(1, 1) decode mask, ``torchaudio.load(backend='soundfile')``, ``ignore_eos`` masking only sos), so
these tests fail unless the backend's own fixes are in place.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors import safe_open

from voxledger.schemas.errors import SynthesisError
from voxledger.tasks.backends.cosyvoice3 import upstream
from voxledger.tasks.backends.cosyvoice3.backend import CosyVoice3Backend
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.backends.cosyvoice3.manifest import check_sources, load_manifest

from .fake_model import FAKE_TREE

DECLARED_LM_DTYPE = torch.float32  # the backend's policy (upstream.LM_DTYPE): the LM is held in fp32
MANIFEST = load_manifest()


def _greedy(weighted_scores: torch.Tensor, decoded_tokens: list[int], sampling: int) -> int:
    return int(weighted_scores.argmax())


@pytest.fixture(scope="module")
def base_llm(fake_config: CosyVoice3Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[torch.nn.Module]:
    """The CosyVoice3LM inside upstream's CosyVoice3, loaded through the backend (runtime base)."""
    loaded = CosyVoice3Backend(fake_config).load_for_inference(None, tmp_path_factory.mktemp("cv3-base"), "base")
    yield loaded.cosy.model.llm


def _lm_input(llm: torch.nn.Module, n_text: int = 9, n_prompt: int = 6) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    text = torch.randint(1000, 150000, (1, n_text), generator=gen)
    prompt = torch.randint(0, 6561, (1, n_prompt), generator=gen)
    emb = llm.speech_embedding.weight
    text, prompt = text.to(emb.device), prompt.to(emb.device)
    with torch.no_grad():
        return torch.cat([emb[llm.sos].reshape(1, 1, -1), llm.llm.model.model.embed_tokens(text), emb[llm.task_id].reshape(1, 1, -1),
                          llm.speech_embedding(prompt)], dim=1)  # fmt: skip


def _decode(
    llm: torch.nn.Module, lm_input: torch.Tensor, min_len: int, max_len: int, bias: dict[int, float] | None = None
) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens from upstream's decode loop, and the logits it saw at each step."""
    seen: list[torch.Tensor] = []

    def hook(module: torch.nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        for token, value in (bias or {}).items():
            out[..., token] += value
        seen.append(out.detach().clone())
        return out

    handle, sampling = llm.llm_decoder.register_forward_hook(hook), llm.sampling
    llm.sampling = _greedy
    try:
        tokens = list(llm.inference_wrapper(lm_input, 25, min_len, max_len, "contract"))
    finally:
        handle.remove()
        llm.sampling = sampling
    return tokens, seen


def test_fake_tree_and_model_folder_are_upstream_as_the_manifest_records_it(fake_config: CosyVoice3Config) -> None:
    assert check_sources(FAKE_TREE) == []
    folder = fake_config.model_dir
    qwen = folder / str(MANIFEST.model_folder["qwen_dir"])
    files = [*MANIFEST.folder_list("files"), *(f"{qwen.name}/{f}" for f in MANIFEST.folder_list("qwen_files"))]
    assert len(files) == 11 and all((folder / f).is_file() for f in files)
    dtypes: dict[str, str] = MANIFEST.model_folder["weight_dtypes"]  # type: ignore[assignment]
    with safe_open(str(qwen / "model.safetensors"), "pt") as f:
        assert {str(f.get_tensor(k).dtype) for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict) == {f"torch.{dtypes['CosyVoice-BlankEN/model.safetensors']}"}
    assert upstream.qwen_config_dtype(qwen) == "bfloat16"  # a 4.x config.json: "torch_dtype"
    assert {str(v.dtype) for v in upstream.read_llm_state(folder / "llm.pt").values()} == {f"torch.{dtypes['llm.pt']}"}
    yaml = (folder / "cosyvoice3.yaml").read_text()
    assert all(re.search(rf"^{k}:", yaml, flags=re.MULTILINE) for k in MANIFEST.folder_list("yaml_keys"))
    targets: dict[str, str] = MANIFEST.model_folder["yaml_targets"]  # type: ignore[assignment]
    assert all(f"!new:{t}" in yaml or f"!name:{t}" in yaml for t in targets.values())
    llm, _ = upstream.build_llm(fake_config)
    ids = {"sos": llm.sos, "eos": llm.eos_token, "task_id": llm.task_id, "fill": llm.fill_token, "speech_token_size": llm.speech_token_size}
    assert ids == {k: MANIFEST.token(k) for k in ids}
    assert list(llm.stop_token_ids) == list(MANIFEST.stop_token_ids) and llm.llm_decoder.out_features == MANIFEST.token("speech_vocab")
    from cosyvoice.cli.model import CosyVoice3Model

    assert CosyVoice3Model(None, None, None).silent_tokens == MANIFEST.tokens["silent_tokens"]


def test_backend_constants_come_from_the_manifest() -> None:
    assert set(MANIFEST.folder_list("files")) <= set(upstream.MODEL_FILES) | {"campplus.onnx", "speech_tokenizer_v3.onnx"}
    assert set(MANIFEST.folder_list("qwen_files")) == set(upstream.TOKENIZER_FILES)  # model.safetensors required too
    assert upstream.LM_DTYPE == DECLARED_LM_DTYPE


def test_lm_parameters_share_the_declared_dtype_after_build_and_after_load(
    fake_config: CosyVoice3Config, base_llm: torch.nn.Module
) -> None:
    llm, _ = upstream.build_llm(fake_config)
    assert {p.dtype for p in llm.parameters()} == {DECLARED_LM_DTYPE}
    state = upstream.read_llm_state(fake_config.model_dir / "llm.pt")
    upstream.load_llm_strict(llm, state, fake_config.model_dir / "llm.pt")
    own = llm.state_dict()
    assert all(torch.equal(own[k], v) for k, v in state.items())  # nothing rounded on the way in
    hidden, _ = llm.llm(llm.speech_embedding(torch.tensor([[1, 2, 3]])), torch.tensor([3]))  # bf16 vs fp32: "mat1 and mat2"
    assert hidden.dtype == DECLARED_LM_DTYPE
    # the inference path: upstream's CosyVoice3Model.load put llm.pt into its own module
    assert {p.dtype for p in base_llm.parameters()} == {DECLARED_LM_DTYPE}
    loaded = base_llm.state_dict()
    assert all(torch.equal(loaded[k].cpu(), v) for k, v in state.items())


def test_cached_greedy_decoding_equals_an_uncached_forward(base_llm: torch.nn.Module) -> None:
    steps = 8
    lm_input = _lm_input(base_llm)
    tokens, cached = _decode(base_llm, lm_input, steps, steps)
    assert len(tokens) == steps
    with torch.inference_mode():
        seq = torch.cat([lm_input, base_llm.speech_embedding.weight[tokens[:-1]].unsqueeze(0)], dim=1)
        hidden = base_llm.llm.model(inputs_embeds=seq, output_hidden_states=True, logits_to_keep=1).hidden_states[-1]
        reference = base_llm.llm_decoder(hidden[:, lm_input.shape[1] - 1 :])[0]
    ours = torch.cat(cached, dim=0)
    rel = float((ours - reference).abs().max() / reference.abs().max())
    assert rel <= 1e-4, f"cached vs uncached logits differ by {rel:.3g} (relative) over {steps} steps"


@pytest.mark.parametrize("stop_id", [MANIFEST.token("eos"), 6600, MANIFEST.token("sos")])
def test_minimum_length_window_never_emits_a_stop_token(base_llm: torch.nn.Module, stop_id: int) -> None:
    lm_input = _lm_input(base_llm)
    tokens, _ = _decode(base_llm, lm_input, 5, 20, bias={stop_id: 1e4})  # the stop id wins every arg-max
    assert len(tokens) == 5 and all(t < MANIFEST.token("speech_token_size") for t in tokens)


def _write(path: Path, rate: int, channels: int) -> Path:
    t = np.arange(int(1.5 * rate)) / rate
    left, right = 0.3 * np.sin(2 * np.pi * 220 * t), 0.2 * np.sin(2 * np.pi * 330 * t)
    sf.write(path, np.stack([left, right][:channels], axis=1).astype(np.float32), rate)
    return path


def test_prompt_audio_loads_through_the_backends_path(fake_config: CosyVoice3Config, base_llm: torch.nn.Module, tmp_path: Path) -> None:
    backend = CosyVoice3Backend(fake_config)
    loaded = backend.load_for_inference(None, tmp_path, "base")
    stereo = _write(tmp_path / "stereo.wav", 24000, 2)
    settings = {"prompt_wav": str(stereo), "prompt_text": "A short prompt."}
    wav, rate = backend.synthesize(loaded, "Hello there, this is a test.", "any", 0, settings)
    assert rate == 24000 and wav.size > 0
    from cosyvoice.cli import frontend

    data, _ = sf.read(stereo, dtype="float32", always_2d=True)
    assert torch.allclose(frontend.load_wav(str(stereo), 24000), torch.from_numpy(data.mean(axis=1)).unsqueeze(0))  # channel mean
    narrow = _write(tmp_path / "narrow.wav", 8000, 1)
    with pytest.raises(SynthesisError, match="16000"):
        backend.synthesize(loaded, "Hello there.", "any", 0, {**settings, "prompt_wav": str(narrow)})
