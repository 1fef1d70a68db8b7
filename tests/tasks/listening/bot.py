"""A scripted rater that answers from the signal only: no key, no listening.

It is the strongest cheap script we could write against our own packets, knowing the code:

- **Attention checks.** It matches every ACR item against espeak renders of every instruction the
  generator can say (every wording, answer and wrong number, without fillers, plus the old fixed
  sentence) by subsequence dynamic time warping on normalised cepstra. An item whose best match
  is far better than its median match is taken for an instruction and answered with the best
  match's number.
- **Everything else in ACR.** A quality proxy (spectral flatness, high-frequency roll-off and
  spectral flux, z-scored within the packet) mapped to the scale by rank: extremes get the end
  points, so a clearly degraded or clearly clean clip gets 1 or 5.
- **MUSHRA.** The anchor is the file with the lowest roll-off (0; it also correlates with the
  reference best), the hidden reference the other file most correlated with the open reference
  (100), the rest by the proxy.
- **A/B.** The sign of the proxy difference.
"""

from __future__ import annotations

import io
from functools import cache
from pathlib import Path

import librosa
import numpy as np
import soundfile as sf

from voxledger.schemas.listening import KeyEntry, PacketManifest, PacketTrial, Scale
from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize
from voxledger.tasks.listening.leakcheck import max_correlation

RATE = 16000
OUTLIER_Z = -1.5  # a quality proxy this far below the packet's mean: a degraded clip
MATCH_RATIO = 0.3  # best / median bank cost below this: an instruction (the old fixed sentence: <= 0.06; speech: >= 0.6)
LEGACY = "Attention check: select {v}."  # the fixed sentence of the previous rendering


def _mfcc(audio: np.ndarray) -> np.ndarray:
    m = librosa.feature.mfcc(y=audio.astype(np.float32), sr=RATE, n_mfcc=13, n_fft=512, hop_length=320)[1:]
    loud = librosa.feature.rms(y=audio.astype(np.float32), frame_length=512, hop_length=320)[0]
    keep = loud[: m.shape[1]] > 0.1 * loud.max()
    m = m[:, keep] if keep.sum() > 5 else m
    return (m - m.mean(axis=1, keepdims=True)) / (m.std(axis=1, keepdims=True) + 1e-6)


def subsequence_cost(template: np.ndarray, clip: np.ndarray) -> float:
    """Cost of the best match of ``template`` anywhere inside ``clip`` (subsequence DTW), per template frame."""
    d = librosa.sequence.dtw(X=template, Y=clip, metric="cosine", subseq=True, backtrack=False)
    return float(d[-1].min() / template.shape[1])


def _sayings(v: int, label: str | None, values: tuple[int, ...]) -> list[str]:
    """Every way the generator can ask for ``v`` (``instructions._cores`` with each draw spelled out)."""
    out = [f"select {v}", f"answer one more than {v - 1}", f"answer one less than {v + 1}"]
    out += [f"choose the number between {v - 1} and {v + 1}"] + ([f"choose the option labelled {label}"] if label else [])
    out += [f"choose {v}, not {d}" for d in values if d != v] + [f"not {d}, but {v}, is the answer" for d in values if d != v]
    return out + [f"pick {a} plus {v - a}" for a in range(v)]


@cache
def instruction_bank(values: tuple[int, ...], labels: tuple[tuple[int, str], ...]) -> tuple[tuple[int, np.ndarray], ...]:
    """(answer, cepstra) for every instruction the generator can say, in espeak's default voice, and the old fixed sentence."""
    names = dict(labels)
    texts = {LEGACY.format(v=v): v for v in values}
    texts |= {f"For this item, {s}.": v for v in values for s in _sayings(v, names.get(v), values)}
    return tuple((v, _mfcc(resample_synthesis(synthesize(t), RATE).audio)) for t, v in sorted(texts.items()))


def match_instruction(audio: np.ndarray, scale: Scale) -> tuple[float, int]:
    """(best bank cost / median bank cost, the best match's answer) for one clip."""
    values = tuple(range(scale.min, scale.max + 1, scale.step))
    bank = instruction_bank(values, tuple((a.value, a.label) for a in scale.anchors))
    ceps = _mfcc(audio)
    costs = sorted((subsequence_cost(c, ceps), v) for v, c in bank)
    return costs[0][0] / float(np.median([c for c, _ in costs])), costs[0][1]


def _features(audio: np.ndarray) -> dict[str, float]:
    y = audio.astype(np.float32)
    rms = librosa.feature.rms(y=y, frame_length=512, hop_length=160)[0]
    loud = rms > 0.1 * rms.max()
    flat = librosa.feature.spectral_flatness(y=y, n_fft=512, hop_length=160)[0][: loud.size][loud]
    roll = librosa.feature.spectral_rolloff(y=y, sr=RATE, n_fft=512, hop_length=160, roll_percent=0.95)[0][: loud.size][loud]
    spec = np.abs(librosa.stft(y, n_fft=512, hop_length=160))[:, : loud.size][:, loud]
    flux = np.mean(np.sum(np.diff(np.log(spec + 1e-6), axis=1) ** 2, axis=0)) if spec.shape[1] > 1 else 0.0
    return {"flatness": float(np.mean(flat)), "rolloff": float(np.mean(roll)), "flux": float(flux)}


class SignalBot:
    """Answers one packet from its audio files alone (see the module docstring)."""

    def __init__(self, packet_dir: Path) -> None:
        self.manifest = PacketManifest.model_validate_json((packet_dir / "packet.json").read_bytes())
        files = {a.id: packet_dir / a.file for a in self.manifest.audio}
        self.audio = {k: sf.read(io.BytesIO(p.read_bytes()), dtype="float64")[0] for k, p in files.items()}
        feats = {k: _features(a) for k, a in self.audio.items()}
        z = {n: self._z({k: np.log(f[n]) for k, f in feats.items()}) for n in ("flatness", "flux")}
        self.proxy = {k: -z["flatness"][k] - 0.5 * z["flux"][k] for k in feats}
        self.rolloff = {k: f["rolloff"] for k, f in feats.items()}
        self.answers: dict[tuple[str, str], int] = {}
        self.match_costs: dict[str, float] = {}
        self._acr()

    @staticmethod
    def _z(values: dict[str, float]) -> dict[str, float]:
        arr = np.array(list(values.values()))
        sd = float(arr.std()) or 1.0
        return {k: (v - float(arr.mean())) / sd for k, v in values.items()}

    def _scale(self, trial: PacketTrial) -> Scale:
        return next(c.scale for c in self.manifest.criteria if c.name == trial.criteria[0])

    def _acr(self) -> None:
        acr = [t for t in self.manifest.trials if t.task == "acr"]
        if not acr:
            return
        ids = [t.stimuli[0] for t in acr]
        scale = self._scale(acr[0])
        values = tuple(range(scale.min, scale.max + 1, scale.step))
        # a clear outlier of the quality proxy is "bad"; the rest are "good" or "excellent" by rank
        # (gold items are the clean reference or a degraded copy; this mix keeps the variance up)
        ranked = sorted((k for k in ids if self.proxy[k] >= OUTLIER_Z), key=lambda k: self.proxy[k])
        for k in ids:
            self.answers[(k, "acr")] = values[0]
        for i, k in enumerate(ranked):
            self.answers[(k, "acr")] = values[-1] if 2 * i >= len(ranked) else values[-2]
        for k in ids:
            self.match_costs[k], v = match_instruction(self.audio[k], scale)
            if self.match_costs[k] < MATCH_RATIO:  # close to one sentence of the bank: an instruction
                self.answers[(k, "acr")] = v

    def score(self, e: KeyEntry, criterion: str, trial: PacketTrial, versus: KeyEntry | None) -> int:
        """A factory ``Scorer``: only the pseudonym of ``e`` is used (never its role or candidate)."""
        k = e.pseudonym
        if trial.task == "acr":
            return self.answers[(k, "acr")]
        if trial.task == "mushra":
            assert trial.reference is not None
            anchor = min(trial.stimuli, key=lambda s: self.rolloff[s])  # the low-pass anchor: least high end
            if k == anchor:
                return 0
            corr = {s: max_correlation(self.audio[s], self.audio[trial.reference]) for s in trial.stimuli if s != anchor}
            if k == max(corr, key=lambda s: corr[s]):
                return 100
            return int(np.clip(60 + 15 * self.proxy[k], 20, 90))
        a, b = trial.stimuli
        diff = self.proxy[b] - self.proxy[a]
        return int(np.clip(round(diff), -3, 3)) or (1 if diff > 0 else -1)


def measure(sets: int, attention_checks: int, root: Path) -> tuple[int, int, int, int]:
    """Export ``sets`` demo packet sets (6 raters each), let the bot rate every packet, aggregate.

    Returns (bot packets included by screening, bot packets, attention items answered right,
    attention items). Each set has its own home secret and packet-set id, so its own instructions.
    """
    from tests.tasks.listening.conftest import DEMO_PLAN
    from tests.tasks.listening.factory import make_stimuli, simulate_submission, write_json
    from voxledger.schemas.listening import ListeningProtocol
    from voxledger.stores.home import Home
    from voxledger.tasks.listening.keys import open_sealed_key
    from voxledger.tasks.plans import load_plan
    from voxledger.tasks.stages.packets import export_packets
    from voxledger.tasks.stages.ratings import aggregate_ratings

    demo = load_plan(DEMO_PLAN, ListeningProtocol)
    protocol = demo.model_copy(update={"design": demo.design.model_copy(update={"attention_checks": attention_checks})})
    included = packets = right = asked = 0
    for n in range(sets):
        home = Home(root / f"set{n}" / "home")
        out = export_packets(home, protocol, make_stimuli(home), root / f"set{n}" / "packets", protocol_name="listening-bot.yaml")
        key_doc, _ = open_sealed_key(home, out.receipt.parameters.key_commitment_sha256)
        key = {e.pseudonym: e for e in key_doc.entries}
        files = []
        for rater, folder in sorted(out.packet_dirs.items()):
            bot = SignalBot(folder)
            checks = [e for e in key.values() if e.rater_id == rater and e.role == "attention"]
            right += sum(bot.answers[(e.pseudonym, "acr")] == e.expected for e in checks)
            asked += len(checks)
            doc = simulate_submission(folder, key, bot.score, session=f"{n:016x}{int(rater[1:]):016x}")
            files.append(write_json(root / f"set{n}" / f"{rater}.json", doc))
        result = aggregate_ratings(home, out.receipt_id, files).receipt.result
        included += sum(s.included for s in result.screening)
        packets += len(result.screening)
    return included, packets, right, asked


if __name__ == "__main__":  # python -m tests.tasks.listening.bot SETS ATTENTION_CHECKS
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        inc, pk, ok, n = measure(int(sys.argv[1]), int(sys.argv[2]), Path(tmp))
    print(f"bot packets included by screening: {inc} of {pk}; attention checks answered right: {ok} of {n}")
