"""Integration with a real CosyVoice checkout and Fun-CosyVoice3-0.5B weights (skipped without them).

Point ``VOXLEDGER_COSYVOICE_DIR`` at a checkout (``git clone --recursive``) whose
``pretrained_models/Fun-CosyVoice3-0.5B`` holds the weights (or set
``VOXLEDGER_COSYVOICE_MODEL_DIR``), with upstream's requirements installed in this environment.
The run happens in a subprocess because this test session has already imported the fake
``cosyvoice`` package from tests/fixtures.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from voxledger.tasks.backends.cosyvoice3.config import ENV_CHECKOUT, CosyVoice3Config
from voxledger.tasks.backends.cosyvoice3.upstream import MODEL_FILES

ROOT = Path(__file__).resolve().parents[4]


def _skip_reason() -> str | None:
    if not os.environ.get(ENV_CHECKOUT):
        return f"{ENV_CHECKOUT} is not set: no real CosyVoice checkout and weights on this machine"
    cfg = CosyVoice3Config.from_env()
    missing = [str(cfg.model_dir / f) for f in MODEL_FILES if not (cfg.model_dir / f).is_file()]
    return f"Fun-CosyVoice3-0.5B weights are missing: {missing}" if missing else None


SCRIPT = """
import sys
from pathlib import Path
import numpy as np
import torch
from tests.corpus_factory import build_small_corpus
from voxledger.schemas.training import LoraSettings, OptimSettings, TrainingPlan
from voxledger.tasks.backends.cosyvoice3 import features
from voxledger.tasks.backends.cosyvoice3.backend import CosyVoice3Backend

work = Path(sys.argv[1])
try:
    import whisper  # upstream's feature code, when installed: ours must match it
    t = torch.arange(48000) / 16000
    speech = (0.3 * torch.sin(2 * torch.pi * 220 * t) + 0.01 * torch.randn(48000)).unsqueeze(0)
    ours, theirs = features.whisper_log_mel(speech), whisper.log_mel_spectrogram(speech, n_mels=128)
    assert ours.shape == theirs.shape and float((ours - theirs).abs().max()) < 1e-3, float((ours - theirs).abs().max())
except ImportError:
    print("whisper not installed: log-mel parity not checked")
corpus = build_small_corpus(work / "corpus")
backend = CosyVoice3Backend()
plan = TrainingPlan(name="real", backend="cosyvoice3", mode="lora", train_splits=("target_train",), cv_splits=("target_dev",),
                    speakers=("spk_t",), new_speaker="spk_t", lora=LoraSettings(r=8, alpha=16), frames_per_batch=2000,
                    optim=OptimSettings(peak_lr=1e-4, warmup_steps=0))
setup = backend.setup(corpus, plan, None)
opt = torch.optim.AdamW([p for p in setup.model.parameters() if p.requires_grad], lr=1e-4)
before = backend.cv_loss(setup.model, setup.cv_batches)
for batch in backend.epoch_batches(0, 0)[:2]:
    out = backend.train_step(setup.model, batch, opt, 1e-4, 1.0)
    assert np.isfinite(out["loss"]), out
print("cv before", before, "after", backend.cv_loss(setup.model, setup.cv_batches))
backend.export(setup.model, work / "export")
loaded = backend.load_for_inference(None, work / "export", "adapter")
wav, rate = backend.synthesize(loaded, "The boat drifted toward the shore.", "spk_t", 0, {})
assert rate == 24000 and wav.size > 0.5 * rate, wav.size
print("ok", wav.size / rate)
"""


@pytest.mark.slow
@pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))
def test_real_checkout_trains_exports_and_speaks(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=3600, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "ok" in proc.stdout


GPU_SCRIPT = """
import numpy as np
import torch
from pathlib import Path
import sys
from tests.tasks.backends.cosyvoice3.test_contract import _decode, _lm_input
from voxledger.tasks.backends.cosyvoice3 import compat
from voxledger.tasks.backends.cosyvoice3.backend import CosyVoice3Backend

torch.backends.cuda.matmul.allow_tf32 = False  # TF32 alone moves fp32 logits by ~1e-3
torch.backends.cudnn.allow_tf32 = False
backend = CosyVoice3Backend()
loaded = backend.load_for_inference(None, Path(sys.argv[1]), "base")
llm = loaded.cosy.model.llm
assert compat.lm_dtypes(llm) == {compat.LM_DTYPE}, compat.lm_dtypes(llm)
lm_input = _lm_input(llm).to(next(llm.parameters()).device)
tokens, cached = _decode(llm, lm_input, 16, 16)
with torch.inference_mode():
    seq = torch.cat([lm_input, llm.speech_embedding.weight[tokens[:-1]].unsqueeze(0)], dim=1)
    hidden = llm.llm.model(inputs_embeds=seq, output_hidden_states=True, logits_to_keep=1).hidden_states[-1]
    ref = llm.llm_decoder(hidden[:, lm_input.shape[1] - 1:])[0]
rel = float((torch.cat(cached) - ref).abs().max() / ref.abs().max())
print("cached_vs_uncached_rel", rel)
assert len(tokens) == 16 and rel <= 1e-4, (len(tokens), rel)
short, _ = _decode(llm, lm_input, 5, 30, bias={6562: 1e4})
assert len(short) == 5, short
wav, rate = backend.synthesize(loaded, "The boat drifted toward the shore.", "any", 0,
                               {"prompt_wav": sys.argv[2], "prompt_text": "You are a helpful assistant.<|endofprompt|>" + sys.argv[3]})
print("seconds", wav.size / rate)
assert rate == 24000 and wav.size > 0.5 * rate
"""


def _gpu_skip_reason() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    if not os.environ.get("VOXLEDGER_COSYVOICE_PROMPT_WAV"):
        return "VOXLEDGER_COSYVOICE_PROMPT_WAV (a >= 16 kHz prompt) and VOXLEDGER_COSYVOICE_PROMPT_TEXT (its transcript) are not set"
    return _skip_reason()


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_skip_reason() is not None, reason=str(_gpu_skip_reason()))
def test_real_model_on_gpu_meets_the_contract(tmp_path: Path) -> None:
    """The real Fun-CosyVoice3-0.5B on CUDA: fp32 LM, cached decode == uncached (<= 1e-4), no stop
    id in the minimum-length window, and a zero-shot sentence of more than 0.5 s."""
    args = [str(tmp_path), os.environ["VOXLEDGER_COSYVOICE_PROMPT_WAV"], os.environ.get("VOXLEDGER_COSYVOICE_PROMPT_TEXT", "")]
    proc = subprocess.run([sys.executable, "-c", GPU_SCRIPT, *args], cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "cached_vs_uncached_rel" in proc.stdout
