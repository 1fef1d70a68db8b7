"""Screening items a script cannot answer from the signal: spoken instructions and scrambled gold.

Attention checks are spoken instructions drawn per item from a generator keyed by the home's
secret, the packet set and the rater: the answer, how it is asked (plainly, beside a wrong
number, as a sum, as the number between two others, by its label), zero to two filler sentences
around it, and, for every piece of one to three words, its own espeak voice, rate and pitch, with
short gaps between pieces. The answer is carried only by the words and what they mean: a script
must recognise the speech and parse it. Matching the clip against espeak renders of every
instruction the generator can say (it could before: one fixed sentence, one voice) fails,
because no render has its voices, and keyword spotting finds two or three numbers.

The degraded gold item is the reference recording cut into 120-300 ms pieces, shuffled, every
other piece reversed, joined with 10 ms crossfades: garbled speech with the recording's own
samples, so its long-term spectrum, spectral flatness, loudness and duration are the
recording's. A listener hears nonsense; a spectral quality proxy sees a clean recording.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from voxledger.schemas.listening import Scale
from voxledger.tasks.listening.design import DesignPlan
from voxledger.tasks.listening.keys import keyed_hex

VOICES = ("en-us", "en+f3", "en+m7", "en-us+f4", "en+f2", "en+m3")
RATE_WPM = (135, 190)
PITCH = (25, 75)
GAP_S = (0.03, 0.12)  # silence between the separately spoken pieces of an instruction
# two backward-spoken sentences lie this far (dB) under the instruction: no words, a speech-like spectrum
BABBLE_SNR_DB = (6.0, 10.0)
FILLERS = (
    "Thank you for your patience.",
    "This sample is not part of the test.",
    "Please keep your headphones on.",
    "Here is a short instruction.",
    "Listen to the whole sentence.",
    "Nothing about this voice is being judged.",
    "You are doing well so far.",
    "Read nothing into the sound of this one.",
    "There is no trick in this item.",
    "Only the words matter here.",
    "Take your time.",
    "This one is easy.",
)


def _cores(v: int, label: str | None, values: list[int], rng: np.random.Generator) -> list[str]:
    """Ways of asking for ``v``: plain, beside a wrong number, as a sum, a neighbour or a label."""
    d = int(rng.choice([x for x in values if x != v]))
    a = int(rng.integers(0, v)) if v > 0 else 0
    out = [
        f"select {v}",
        f"choose {v}, not {d}",
        f"not {d}, but {v}, is the answer",
        f"answer one more than {v - 1}",
        f"answer one less than {v + 1}",
        f"pick {a} plus {v - a}",
        f"choose the number between {v - 1} and {v + 1}",
    ]
    if label:
        out.append(f"choose the option labelled {label}")
    return out


@dataclass(frozen=True)
class Instruction:
    """One spoken attention check: the pieces said (each with its own voice, rate and pitch) and the answer."""

    pieces: tuple[tuple[str, str, int, int], ...]  # (text, voice, rate_wpm, pitch)
    answer: int
    gaps_s: tuple[float, ...]
    babble: tuple[tuple[str, str], ...] = ()  # (filler, voice) spoken backwards under the instruction
    babble_snr_db: float = 6.0  # instruction over babble

    @property
    def text(self) -> str:
        """The whole instruction as one line."""
        return " ".join(p[0] for p in self.pieces)


def draw_instruction(rng: np.random.Generator, scale: Scale) -> Instruction:
    """A random instruction on ``scale``: answer, wording, fillers, and a voice, rate and pitch per piece."""
    values = list(range(scale.min, scale.max + 1, scale.step))
    answer = int(values[int(rng.integers(len(values)))])
    labels = {a.value: a.label for a in scale.anchors}
    cores = _cores(answer, labels.get(answer), values, rng)
    core = cores[int(rng.integers(len(cores)))]
    fillers = [FILLERS[int(i)] for i in rng.choice(len(FILLERS), size=int(rng.integers(0, 3)), replace=False)]
    before = int(rng.integers(0, len(fillers) + 1))
    sentence = " ".join([*fillers[:before], f"For this item, {core}.", *fillers[before:]])
    words = sentence.split()
    pieces: list[tuple[str, str, int, int]] = []
    i = 0
    while i < len(words):  # one to three words at a time, each piece in its own voice
        n = int(rng.integers(1, 4))
        voice = VOICES[int(rng.integers(len(VOICES)))]
        pieces.append(
            (" ".join(words[i : i + n]), voice, int(rng.integers(RATE_WPM[0], RATE_WPM[1] + 1)), int(rng.integers(PITCH[0], PITCH[1] + 1)))
        )
        i += n
    gaps = tuple(round(float(rng.uniform(*GAP_S)), 3) for _ in pieces[1:])
    babble = tuple((FILLERS[int(rng.integers(len(FILLERS)))], VOICES[int(rng.integers(len(VOICES)))]) for _ in range(2))
    snr = round(float(rng.uniform(*BABBLE_SNR_DB)), 2)
    return Instruction(pieces=tuple(pieces), answer=answer, gaps_s=gaps, babble=babble, babble_snr_db=snr)


def keyed_rng(secret: bytes, *parts: str) -> np.random.Generator:
    """A generator seeded by HMAC(secret, parts): unpredictable without the home's secret."""
    return np.random.default_rng(int(keyed_hex(secret, "instruction", *parts), 16))


def personalise_attention(design: DesignPlan, secret: bytes, packet_set_id: str, scale: Scale) -> dict[str, Instruction]:
    """Give every attention slot of ``design`` its own keyed instruction (in place); returns source -> instruction."""
    out: dict[str, Instruction] = {}
    for rater, plans in design.trials.items():
        n = 0
        for plan in plans:
            if not any(s.role == "attention" for s in plan.slots):
                continue
            n += 1
            source = f"attention:{rater}:{n}"
            item = draw_instruction(keyed_rng(secret, packet_set_id, rater, str(n)), scale)
            out[source] = item
            plan.slots = tuple(replace(s, source=source, expected=item.answer) if s.role == "attention" else s for s in plan.slots)
    return out


def scramble(audio: np.ndarray, rate: int, seed: int) -> np.ndarray:
    """Garble speech with its own samples: 120-300 ms pieces shuffled, every other one reversed, 10 ms crossfades."""
    rng = np.random.default_rng(seed)
    cuts = [0]
    while cuts[-1] < audio.size:
        cuts.append(min(audio.size, cuts[-1] + int(rng.integers(round(0.12 * rate), round(0.3 * rate) + 1))))
    pieces = [audio[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    order = rng.permutation(len(pieces))
    if len(pieces) > 1 and np.array_equal(order, np.arange(len(pieces))):
        order = order[::-1]
    fade = round(0.01 * rate)
    out = np.zeros(0)
    for i, k in enumerate(order):
        piece = pieces[int(k)][::-1] if i % 2 else pieces[int(k)]
        n = min(fade, out.size, piece.size)
        if n:
            ramp = np.linspace(0.0, 1.0, n)
            head = out[-n:] * ramp[::-1] + piece[:n] * ramp
            out = np.concatenate([out[:-n], head, piece[n:]])
        else:
            out = np.concatenate([out, piece])
    return out
