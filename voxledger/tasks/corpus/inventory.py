"""Build the closed phoneme vocabularies that ``espeak.phoneme_inventory()`` serves.

How the English one is built (``python -m voxledger.tasks.corpus.inventory`` rewrites the data files):
every English espeak-ng language (``ENGLISH_VOICES``; voice variants such as ``+f2`` change the
sound, not the phoneme set) speaks every Harvard sentence plus ``COVERAGE_TEXTS`` (Wells'
lexical sets, spelled letters, numbers, loanwords). Every phoneme name the synthesizer reports
is kept, and then each vowel seen with a stress mark is added in all three stress forms
(``X``, ``'X``, ``,X``), because stress moves with context and the sentences cannot show every
vowel under every stress. The leading-silence token ``"_"`` is always present.

The Mandarin one (``data/phoneme_inventory_zh.json``): the ``cmn`` voice reads every sentence of the
Mandarin demo corpus's file plus ``COVERAGE_TEXTS_ZH`` (syllables whose finals the sentences lack),
expanded the same way. espeak-ng's Mandarin phoneme names carry no tone.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

from voxledger.tasks.corpus.espeak import LEADING_SILENCE, synthesize
from voxledger.tasks.corpus.sentences import harvard_sentences

INVENTORY_FILE = "data/phoneme_inventory.json"
ZH_INVENTORY_FILE = "data/phoneme_inventory_zh.json"
ENGLISH_VOICES = (
    "en",
    "en-us",
    "en-029",
    "en-gb-scotland",
    "en-gb-x-gbclan",
    "en-gb-x-gbcwmd",
    "en-gb-x-rp",
    "en-us-nyc",
)
STRESS_MARKS = ("'", ",")
COVERAGE_TEXTS = (
    "Kit, dress, trap, lot, strut, foot, bath, cloth, nurse, fleece, face, palm, thought.",
    "Goat, goose, price, choice, mouth, near, square, start, north, force, cure.",
    "Happy letters, horses and commas; vision, measure, beige, genre, rouge, loch, Bach.",
    "A, B, C, D, E, F, G, H, I, J, K, L, M, N, O, P, Q, R, S, T, U, V, W, X, Y, Z.",
    "One, two, three, four, five, six, seven, eight, nine, ten, 1969, 42, 3.5 percent.",
    "Hour, fire, tour, poor, year, youth, queue, huge, wheel, which, thing, thistle.",
    "Ouija, Dvorak, naive, cafe, garage, bouquet, yacht, sphinx, rhythm, schism, twelfth.",
)


MANDARIN_VOICES = ("cmn",)
COVERAGE_TEXTS_ZH = (
    "一二三四五六七八九十百千万亿零。",
    "啊哦鹅衣乌迂爱欸奥欧安恩昂鞥儿。",
    "雪月缺学约略绝靴云群军韵。",
    "窗床装双光黄庄撞况矿。",
    "熊穷兄琼用拥永勇。",
    "瓜花夸抓刷耍挖蛙。",
    "追吹水最嘴岁碎退对会贵。",
    "丢牛流九秋休修留。",
)


def build_phoneme_inventory(texts: tuple[str, ...] | None = None, voices: tuple[str, ...] = ENGLISH_VOICES) -> list[str]:
    """Synthesize ``texts`` (default: Harvard sentences + coverage texts) with ``voices``."""
    texts = texts if texts is not None else harvard_sentences() + COVERAGE_TEXTS
    seen = {LEADING_SILENCE}
    for voice in voices:
        for text in texts:
            seen.update(seg.phoneme for seg in synthesize(text, voice).phonemes)
    stressed = {name.lstrip("".join(STRESS_MARKS)) for name in seen if name[:1] in STRESS_MARKS}
    seen.update(mark + vowel for vowel in stressed for mark in ("", *STRESS_MARKS))
    return sorted(seen)


def inventory_document(phonemes: list[str]) -> dict[str, object]:
    """The JSON document stored in ``data/phoneme_inventory.json``."""
    return {
        "built_by": "python -m voxledger.tasks.corpus.inventory",
        "voices": list(ENGLISH_VOICES),
        "texts": "harvard_sentences + inventory.COVERAGE_TEXTS",
        "phonemes": phonemes,
    }


def mandarin_inventory_document() -> dict[str, object]:
    """The JSON document stored in ``data/phoneme_inventory_zh.json``."""
    from voxledger.tasks.corpus.demo_zh import mandarin_sentences

    phonemes = build_phoneme_inventory(mandarin_sentences() + COVERAGE_TEXTS_ZH, MANDARIN_VOICES)
    return {
        "built_by": "python -m voxledger.tasks.corpus.inventory",
        "voices": list(MANDARIN_VOICES),
        "texts": "demo_zh.mandarin_sentences + inventory.COVERAGE_TEXTS_ZH",
        "phonemes": phonemes,
    }


def main() -> int:
    root = resources.files("voxledger.tasks.corpus")
    for name, doc in ((INVENTORY_FILE, inventory_document(build_phoneme_inventory())), (ZH_INVENTORY_FILE, mandarin_inventory_document())):
        target = Path(str(root.joinpath(name)))
        target.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{len(doc['phonemes'])} phonemes -> {target}")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
