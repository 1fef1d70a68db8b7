"""The demo corpus's text: the 720 Harvard sentences (IEEE 1969, public domain).

They are short, natural and phonetically balanced, which keeps espeak-ng intelligible to Whisper
and makes a fair evaluation prompt set. ``demo_order`` fixes one order for splitting that never
depends on a random generator's version: sentences sorted by a salted sha256 of their text.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources

SENTENCES_FILE = "data/harvard_sentences.txt"
ORDER_SALT = "voxledger-demo-corpus"


@cache
def harvard_sentences() -> tuple[str, ...]:
    """All 720 sentences, in file order (index = position, used in utterance ids)."""
    path = resources.files("voxledger.tasks.corpus").joinpath(SENTENCES_FILE)
    lines = path.read_text(encoding="utf-8").splitlines()
    return tuple(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def demo_order() -> list[int]:
    """Sentence indices in the fixed pseudo-random order the demo splits are cut from."""
    sentences = harvard_sentences()

    def key(index: int) -> str:
        return hashlib.sha256(f"{ORDER_SALT}:{sentences[index]}".encode()).hexdigest()

    return sorted(range(len(sentences)), key=key)
