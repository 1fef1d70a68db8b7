"""Simulated honest raters with rating noise, and a scripted rater that passed screening.

``noisy_scorer``: a listener whose score is the candidate's quality (``factory.QUALITY``) plus
their own offset, a per-prompt difficulty shared by every rater, and noise of their own, drawn
from a generator seeded by (seed, rater) (the global RNG is never touched), rounded to the scale;
checks answered as a listener would. ``screened_bot``: the signal-only bot of ``bot.py`` on every
candidate item, with the screening items answered right, the worst case a bot that reads the
spoken checks and finds the gold items (issue: 3 to 5 of 12 such bots passed screening).
"""

from __future__ import annotations

import zlib

import numpy as np

from tests.tasks.listening.bot import OUTLIER_Z, SignalBot
from tests.tasks.listening.factory import QUALITY, Scorer
from voxledger.schemas.listening import KeyEntry, PacketTrial

PROMPT_SD = 0.3  # prompt difficulty, in ACR points
NOISE_SD = 0.7  # a listener's own noise per rating, in ACR points


def noisy_scorer(seed: int, rater: str, bias: float = 0.0) -> Scorer:
    """A careful but noisy listener (module docstring); deterministic in (seed, rater)."""
    rng = np.random.default_rng([seed, zlib.crc32(rater.encode())])
    prompts: dict[str, float] = {}

    def difficulty(prompt: str) -> float:
        if prompt not in prompts:  # shared by every rater of one seed: drawn from (seed, prompt)
            prompts[prompt] = float(np.random.default_rng([seed, zlib.crc32(prompt.encode())]).normal(0, PROMPT_SD))
        return prompts[prompt]

    def score(e: KeyEntry, criterion: str, trial: PacketTrial, versus: KeyEntry | None) -> int:
        if e.expected is not None:
            return e.expected
        truth = QUALITY.get(e.role, 3.0) if e.role.endswith("anchor") else QUALITY.get(e.candidate, 3.0)  # an anchor: its own quality
        q = truth + bias + difficulty(e.prompt_id) + float(rng.normal(0, NOISE_SD))
        if trial.task == "acr":
            return int(min(5, max(1, round(q))))
        if trial.task == "mushra":
            return 100 if e.role == "hidden_reference" else int(min(100, max(0, round(20 * q))))
        assert versus is not None
        return int(max(-3, min(3, round(q - QUALITY.get(versus.candidate, 3.0) - bias - difficulty(e.prompt_id)))))

    return score


class CandidateBot(SignalBot):
    """``SignalBot`` without its instruction matcher (``screened_bot`` answers the checks): ACR candidates by the proxy's rank."""

    def _acr(self) -> None:
        acr = [t for t in self.manifest.trials if t.task == "acr"]
        if not acr:
            return
        ids = [t.stimuli[0] for t in acr]
        values = tuple(range(self._scale(acr[0]).min, self._scale(acr[0]).max + 1, self._scale(acr[0]).step))
        ranked = sorted((k for k in ids if self.proxy[k] >= OUTLIER_Z), key=lambda k: self.proxy[k])
        for k in ids:
            self.answers[(k, "acr")] = values[0]
        for i, k in enumerate(ranked):
            self.answers[(k, "acr")] = values[-1] if 2 * i >= len(ranked) else values[-2]


def screened_bot(bot: SignalBot, honest: Scorer) -> Scorer:
    """The bot's answers on candidate items; screening items (gold, attention, hidden reference, anchor) as ``honest``."""

    def score(e: KeyEntry, criterion: str, trial: PacketTrial, versus: KeyEntry | None) -> int:
        if e.role != "stimulus" or (versus is not None and versus.role != "stimulus"):
            return honest(e, criterion, trial, versus)
        return bot.score(e, criterion, trial, versus)

    return score
