"""Speaker embeddings and speech tokens, computed the way upstream's tools do.

``tools/extract_embedding.py``: audio at 16 kHz, first channel -> Kaldi fbank (80 bins, dither 0) -> minus its
time mean -> campplus ONNX -> 192 floats. ``tools/extract_speech_token.py``: audio at
16 kHz, channel mean -> whisper log-mel (128 bins) -> speech-tokenizer ONNX (features, length) -> 25 Hz codes;
audio over 30 s gets no tokens (upstream refuses it). Resampling uses torchaudio's default
``Resample`` kernel, as upstream does.

The whisper log-mel is implemented here (upstream imports the ``whisper`` package, which
voxledger does not depend on): STFT n_fft 400, hop 160, Hann window, power, drop the last
frame, librosa slaney mel filters (128), log10 clamped at 1e-10, floored at max - 8, then
``(x + 4) / 4``, which is ``whisper.audio.log_mel_spectrogram``'s recipe (its filters were made
with ``librosa.filters.mel(sr=16000, n_fft=400, n_mels=128)``).
"""

from __future__ import annotations

import io
from functools import cache
from pathlib import Path

import librosa
import numpy as np
import onnxruntime
import soundfile as sf
import torch
import torchaudio.functional as AF
from torchaudio.compliance import kaldi

from voxledger.schemas.errors import CorpusError, UpstreamError

SAMPLE_RATE_16K = 16000
MAX_TOKEN_AUDIO_S = 30.0
EMBEDDING_DIM = 192
FEATURES_VERSION = "cosyvoice3-features/1"


def read_channels(path_or_bytes: Path | bytes) -> tuple[torch.Tensor, int]:
    """(channels, N) float32 audio and its sample rate."""
    source = io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, bytes) else path_or_bytes
    try:
        data, sr = sf.read(source, dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise CorpusError(f"cannot read audio {path_or_bytes if isinstance(path_or_bytes, Path) else '<bytes>'}: {exc}") from exc
    return torch.from_numpy(np.ascontiguousarray(data.T)), int(sr)


def read_mono(path_or_bytes: Path | bytes) -> tuple[torch.Tensor, int]:
    """(1, N) float32 mono audio (channel mean) and its sample rate."""
    channels, sr = read_channels(path_or_bytes)
    return channels.mean(dim=0, keepdim=True), sr


def embedding_input_16k(channels: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """The campplus input audio as ``tools/extract_embedding.py`` makes it: resampled, then the
    first channel (Kaldi fbank of a multi-channel tensor reads channel 0)."""
    return to_16k(channels, sample_rate)[:1]


def token_input_16k(channels: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """The speech-tokenizer input as ``tools/extract_speech_token.py`` makes it: resampled, then the channel mean."""
    return to_16k(channels, sample_rate).mean(dim=0, keepdim=True)


def to_16k(speech: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """Resample with torchaudio's default windowed-sinc kernel (upstream's ``Resample``)."""
    return AF.resample(speech, sample_rate, SAMPLE_RATE_16K) if sample_rate != SAMPLE_RATE_16K else speech


@cache
def _mel_filters(n_mels: int) -> torch.Tensor:
    return torch.from_numpy(librosa.filters.mel(sr=SAMPLE_RATE_16K, n_fft=400, n_mels=n_mels)).float()


def whisper_log_mel(speech_16k: torch.Tensor, n_mels: int = 128) -> torch.Tensor:
    """(1, n_mels, frames) whisper log-mel of (1, N) 16 kHz audio (100 frames per second)."""
    stft = torch.stft(speech_16k, 400, 160, window=torch.hann_window(400), return_complex=True)
    power = stft[..., :-1].abs() ** 2
    log_spec = torch.clamp(_mel_filters(n_mels) @ power, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def campplus_fbank(speech_16k: torch.Tensor) -> torch.Tensor:
    """(frames, 80) mean-normalised Kaldi fbank, the campplus input."""
    feat = kaldi.fbank(speech_16k, num_mel_bins=80, dither=0, sample_frequency=SAMPLE_RATE_16K)
    out: torch.Tensor = feat - feat.mean(dim=0, keepdim=True)
    return out


# What upstream feeds each graph, by position (``cli/frontend.py``, ``tools/extract_*.py``):
# (onnxruntime element type, rank) per input, and how many outputs it reads at least.
ONNX_SIGNATURES: dict[str, tuple[tuple[tuple[str, int], ...], int]] = {
    "campplus": ((("tensor(float)", 3),), 1),  # fbank (1, T, 80) -> embedding
    "speech_tokenizer": ((("tensor(float)", 3), ("tensor(int32)", 1)), 1),  # log-mel (1, 128, T), length (1,) -> codes
}
ONNX_FIX = "use the file shipped with Fun-CosyVoice3-0.5B (campplus.onnx / speech_tokenizer_v3.onnx), or point VOXLEDGER_COSYVOICE_{} at it"


def onnx_signature_problems(session: onnxruntime.InferenceSession, kind: str, path: Path) -> list[str]:
    """How an ONNX graph's inputs / outputs differ from what upstream feeds a ``kind`` model (empty: it fits)."""
    wanted, min_outputs = ONNX_SIGNATURES[kind]
    inputs = [(i.name, i.type, len(i.shape)) for i in session.get_inputs()]
    problems = []
    if [(t, r) for _, t, r in inputs] != list(wanted):
        got = ", ".join(f"{n}: {t} rank {r}" for n, t, r in inputs) or "none"
        want = ", ".join(f"{t} rank {r}" for t, r in wanted)
        problems.append(f"{path} has {len(inputs)} input(s) ({got}); upstream feeds a {kind} model {len(wanted)} ({want})")
    if len(session.get_outputs()) < min_outputs:
        problems.append(f"{path} has {len(session.get_outputs())} outputs; upstream reads {min_outputs}")
    return problems


SPEAKER_EMBEDDING_DIM = 192  # upstream flattens campplus's first output into the LM's spk_embed_dim (cosyvoice3.yaml)
SPEECH_CODES = 6561  # FSQ codes of speech_tokenizer_v3: the LM's speech vocabulary before its 200 special ids
PROBE_FRAMES = 100  # one second of features: 100 fbank / log-mel frames, 25 speech tokens


def onnx_output_problems(session: onnxruntime.InferenceSession, kind: str, path: Path) -> list[str]:
    """How a graph's *outputs* on one second of fixed features differ from what upstream reads (empty: they fit):
    campplus must give 192 floats (upstream flattens it into the LM's 192-wide speaker embedding), the speech
    tokenizer integer codes in [0, 6561)."""
    feats = np.random.default_rng(0).standard_normal((1, PROBE_FRAMES, 80) if kind == "campplus" else (1, 128, PROBE_FRAMES))
    names = [i.name for i in session.get_inputs()]
    feed: dict[str, np.ndarray] = {names[0]: feats.astype(np.float32)}
    if kind == "speech_tokenizer":
        feed[names[1]] = np.array([PROBE_FRAMES], dtype=np.int32)
    try:
        out = np.asarray(session.run(None, feed)[0])
    except Exception as exc:  # noqa: BLE001  (onnxruntime's own untyped errors)
        return [f"{path} fails on one second of {kind} features ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"]
    shape = "x".join(map(str, out.shape))
    if kind == "campplus":
        if not np.issubdtype(out.dtype, np.floating) or out.size != SPEAKER_EMBEDDING_DIM:
            return [f"{path} returns {out.dtype} {shape}; upstream reads a speaker embedding of {SPEAKER_EMBEDDING_DIM} floats (1x192)"]
        return []
    if not np.issubdtype(out.dtype, np.integer):
        return [f"{path} returns {out.dtype} {shape} (not integer codes); upstream reads speech tokens as integers in [0, {SPEECH_CODES})"]
    if out.size == 0 or int(out.min()) < 0 or int(out.max()) >= SPEECH_CODES:
        lo, hi = (int(out.min()), int(out.max())) if out.size else (None, None)
        return [f"{path} returns codes in [{lo}, {hi}] ({shape}); upstream's speech vocabulary is [0, {SPEECH_CODES})"]
    return []


def open_onnx(path: Path, kind: str, option: onnxruntime.SessionOptions, providers: list[str]) -> onnxruntime.InferenceSession:
    """An onnxruntime session whose inputs and outputs are what upstream feeds and reads.

    Raises:
        UpstreamError: the file does not load, or its signature is not upstream's for ``kind``.
    """
    env = "CAMPPLUS_ONNX" if kind == "campplus" else "SPEECH_TOKENIZER_ONNX"
    try:
        session = onnxruntime.InferenceSession(str(path), sess_options=option, providers=providers)
    except Exception as exc:  # noqa: BLE001  (onnxruntime raises its own untyped Fail / InvalidGraph)
        raise UpstreamError(f"{kind} ONNX {path} does not load ({type(exc).__name__}: {exc}); {ONNX_FIX.format(env)}") from exc
    problems = onnx_signature_problems(session, kind, path) or onnx_output_problems(session, kind, path)
    if problems:
        raise UpstreamError(f"{'; '.join(problems)}; {ONNX_FIX.format(env)}")
    return session


class FeatureExtractor:
    """The two ONNX models of the model folder, run with onnxruntime (one intra-op thread)."""

    def __init__(self, campplus: Path, speech_tokenizer: Path, device: torch.device | None = None) -> None:
        """The speech tokenizer runs on CUDA where the stages' ``device`` is CUDA and onnxruntime has it (as upstream's
        front end does), else on the CPU; campplus on the CPU (upstream's choice). ``providers`` is part of the data's key."""
        option = onnxruntime.SessionOptions()
        option.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        option.intra_op_num_threads = 1
        cuda = device is not None and device.type == "cuda" and "CUDAExecutionProvider" in onnxruntime.get_available_providers()
        self.providers = ["CUDAExecutionProvider"] if cuda else ["CPUExecutionProvider"]
        self._campplus = open_onnx(campplus, "campplus", option, ["CPUExecutionProvider"])
        self._tokenizer = open_onnx(speech_tokenizer, "speech_tokenizer", option, self.providers)

    def embedding(self, speech_16k: torch.Tensor) -> np.ndarray:
        """(192,) float32 campplus speaker embedding."""
        feat = campplus_fbank(speech_16k).unsqueeze(0).numpy()
        out = self._campplus.run(None, {self._campplus.get_inputs()[0].name: feat})[0]
        return np.asarray(out, dtype=np.float32).reshape(-1)

    def speech_tokens(self, speech_16k: torch.Tensor) -> list[int]:
        """25 Hz speech codes; empty for audio over 30 s (upstream's limit)."""
        if speech_16k.shape[1] / SAMPLE_RATE_16K > MAX_TOKEN_AUDIO_S:
            return []
        feat = whisper_log_mel(speech_16k)
        inputs = self._tokenizer.get_inputs()
        out = self._tokenizer.run(None, {inputs[0].name: feat.numpy(), inputs[1].name: np.array([feat.shape[2]], dtype=np.int32)})[0]
        return [int(t) for t in np.asarray(out).reshape(-1)]
