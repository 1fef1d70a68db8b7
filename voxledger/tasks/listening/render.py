"""Turn the design's audio sources into the clips raters hear, all rendered the same way.

A source is a stimulus (``stim:<prompt>:<candidate>``), a MUSHRA low anchor
(``anchor:<prompt>:<cutoff>``), a degraded gold item (``gold_bad:<prompt>``, the reference
scrambled: ``instructions.scramble``) or a spoken attention check (``attention:<rater>:<n>``, its
wording and voice drawn per item: ``instructions.personalise_attention``). Every source goes through one chain, so nothing but the
speech itself tells candidates apart:

1. DC removal and one zero-phase high-pass (``blinding.high_pass_hz``): recordings carry DC
   offsets and rumble that synthesis does not;
2. leading and trailing silence trimmed (frames ``trim_threshold_db`` below the loudest) and
   replaced by ``edge_silence_s`` of silence in front: no source keeps its own lead-in;
3. one gain per source to a single loudness (the protocol's target, lowered for every clip alike
   if one would pass the peak ceiling), then trailing silence to the longest clip of its prompt,
   rounded up to the duration bucket;
4. per copy handed to a rater: an independent white noise floor at ``noise_floor_dbfs`` under the
   whole clip (no digital silence anywhere) and +-1 LSB TPDF dither before 16-bit rounding.

The MUSHRA hidden reference is the reference delayed by ``hidden_reference_delay_samples`` (a
linear-phase fractional delay) at ``hidden_reference_gain_db``: with its own noise floor it is
never sample-identical to the open reference. It still sounds (and correlates) like the
reference: MUSHRA raters are told it is there (measured numbers in docs/listening.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from voxledger.schemas.errors import BlobMissingError, PacketError
from voxledger.schemas.listening import ListeningProtocol, Stimulus
from voxledger.schemas.listening_receipts import LoudnessReport
from voxledger.stores.home import Home
from voxledger.tasks.listening import audio as au
from voxledger.tasks.listening.instructions import Instruction, scramble


@dataclass(frozen=True)
class Rendered:
    """A source after blinding: gain applied, padded; ``sha256`` is its undithered source blob."""

    audio: np.ndarray
    source_sha256: str


def _seed(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


class AudioRenderer:
    """Loads, levels and pads every source once; ``wav`` makes one rater's dithered copy."""

    def __init__(
        self,
        home: Home,
        protocol: ListeningProtocol,
        stimuli: dict[tuple[str, str], Stimulus],
        sources: set[str],
        instructions: dict[str, Instruction] | None = None,
        applied_lufs: float | None = None,
    ) -> None:
        """``applied_lufs``: the loudness every clip gets (``packets extend``: the first export's, so
        packets added later sound as loud as the first ones); by default the protocol's target,
        lowered for every clip alike when one would pass the peak ceiling."""
        self.home, self.protocol, self.rate = home, protocol, protocol.sample_rate_hz
        self.stimuli, self.instructions = stimuli, instructions or {}
        loaded = {src: self._prepared(src) for src in sorted(sources)}
        lengths = self._lengths({src: a.size for src, (a, _) in loaded.items()})
        padded = {src: au.pad(a, lengths[src]) for src, (a, _) in loaded.items()}  # measured as heard
        loudness = {src: au.integrated_loudness(a, self.rate) for src, a in padded.items()}
        b = protocol.blinding
        self.applied_lufs = (
            applied_lufs
            if applied_lufs is not None
            else au.common_target(
                list(loudness.values()), [au.peak_dbfs(a) for a in padded.values()], b.target_loudness_lufs, b.peak_ceiling_dbfs
            )
        )
        self.sources = {src: Rendered(au.set_loudness(a, loudness[src], self.applied_lufs), loaded[src][1]) for src, a in padded.items()}
        out_lufs = [au.integrated_loudness(r.audio, self.rate) for r in self.sources.values()]
        self.report = LoudnessReport(
            target_lufs=b.target_loudness_lufs,
            applied_lufs=round(self.applied_lufs, 3),
            input_lufs_min=round(min(loudness.values()), 3),
            input_lufs_max=round(max(loudness.values()), 3),
            output_lufs_spread=round(max(out_lufs) - min(out_lufs), 4),
            pad_to=b.pad_to,
            durations_s=tuple(sorted({round(n / self.rate, 4) for n in lengths.values()})),
        )

    def _stimulus(self, prompt: str, candidate: str) -> tuple[np.ndarray, str]:
        s = self.stimuli[(prompt, candidate)]
        try:
            data = self.home.blobs.get_bytes(s.audio_sha256)
        except BlobMissingError as exc:
            raise BlobMissingError(f"stimulus {prompt}/{candidate}: audio {s.audio_sha256} is not in the store; put it first") from exc
        return au.read_wav(data, name=f"stimulus {prompt}/{candidate}", sample_rate_hz=self.rate), s.audio_sha256

    def _load(self, source: str) -> tuple[np.ndarray, str]:
        kind, _, rest = source.partition(":")
        ref = self.protocol.reference_candidate
        if kind == "stim":
            prompt, _, candidate = rest.partition(":")
            return self._stimulus(prompt, candidate)
        if kind == "anchor":
            prompt, _, cutoff = rest.rpartition(":")
            audio, sha = self._stimulus(prompt, ref)
            return au.low_pass(audio, self.rate, float(cutoff)), sha
        if kind == "gold_bad":
            audio, sha = self._stimulus(rest, ref)
            return scramble(audio, self.rate, _seed(source)), sha
        if kind == "attention" and source in self.instructions:
            return self._attention(self.instructions[source])
        raise PacketError(f"unknown audio source {source!r}")

    def _attention(self, item: Instruction) -> tuple[np.ndarray, str]:
        from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize

        parts: list[np.ndarray] = []
        for i, (text, voice, rate_wpm, pitch) in enumerate(item.pieces):
            said = resample_synthesis(synthesize(text, voice=voice, pitch=pitch, rate_wpm=rate_wpm), self.rate).audio
            if i:
                parts.append(np.zeros(round(item.gaps_s[i - 1] * self.rate)))
            start, end = au.speech_bounds(said.astype(np.float64), self.rate, -40.0)
            parts.append(said[start:end].astype(np.float64))
        speech = np.concatenate(parts)
        babble = np.zeros(speech.size)
        for text, voice in item.babble:  # backwards speech: no words to follow, a spectrum like the instruction's
            said = resample_synthesis(synthesize(text, voice=voice), self.rate).audio.astype(np.float64)[::-1]
            babble += np.resize(said, speech.size)
        if item.babble and np.any(babble):
            gain = np.sqrt(np.mean(speech**2) / np.mean(babble**2)) * 10 ** (-item.babble_snr_db / 20)
            speech = speech + gain * babble
        sha = self.home.blobs.put_bytes(au.encode_pcm16(speech, self.rate))
        return speech, sha

    def _prepared(self, source: str) -> tuple[np.ndarray, str]:
        audio, sha = self._load(source)
        b = self.protocol.blinding
        clean = au.high_pass(audio, self.rate, b.high_pass_hz)
        trimmed = au.trim_silence(clean, self.rate, b.trim_threshold_db, b.edge_silence_s)
        # the high-pass leaves the whole clip at zero mean, not the part kept after trimming: what a
        # source's waveform shape leaves there is a DC channel (measured: AUC 1.0 between tiny-model
        # output and recordings); zero it on exactly the samples that are played
        return trimmed - float(np.mean(trimmed)) if trimmed.size else trimmed, sha

    def _lengths(self, sizes: dict[str, int]) -> dict[str, int]:
        b = self.protocol.blinding
        edge = round(b.edge_silence_s * self.rate)  # at least this much silence after the speech, too
        if b.pad_to == "none":
            return {src: n + edge for src, n in sizes.items()}
        groups: dict[str, int] = {}
        for src, n in sizes.items():
            group = self._group(src)
            groups[group] = max(groups.get(group, 0), n + edge)
        return {src: au.padded_length(groups[self._group(src)], self.rate, b.pad_bucket_s) for src in sizes}

    @staticmethod
    def _group(source: str) -> str:
        kind, _, rest = source.partition(":")
        if kind in ("stim", "anchor"):
            return "prompt:" + rest.split(":")[0]
        return "prompt:" + rest if kind == "gold_bad" else source

    def samples(self, source: str, copy_key: str, *, hidden_reference: bool = False) -> np.ndarray:
        """One rater's copy of a source as 16-bit sample values: own noise floor and dither.

        ``hidden_reference`` applies the hidden reference's sub-sample delay and gain change.
        """
        b = self.protocol.blinding
        rng = np.random.default_rng(_seed(copy_key))
        audio = self.sources[source].audio
        if hidden_reference:
            audio = au.fractional_delay(audio, self.rate, b.hidden_reference_delay_samples) * 10 ** (b.hidden_reference_gain_db / 20)
        floor = rng.normal(0.0, 10 ** (b.noise_floor_dbfs / 20), audio.size)
        lsb = 1.0 / 32767.0
        dither = (rng.random(audio.size) - rng.random(audio.size)) * lsb
        return au.to_pcm16(audio + floor + dither)

    def wav(self, source: str, copy_key: str, *, hidden_reference: bool = False) -> bytes:
        """One rater's copy of a source as a bare PCM WAV (see ``samples``)."""
        return au.encode_int16(self.samples(source, copy_key, hidden_reference=hidden_reference), self.rate)
