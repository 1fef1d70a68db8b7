"""Small helpers the importers share: UTF-8 text files and manifest-relative labels."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from voxledger.schemas.errors import CorpusError
from voxledger.tasks.corpus.records import LoadedCorpus

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".opus", ".mp3")


def label(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` for messages and origins."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def read_text(path: Path, root: Path) -> str | None:
    """A transcript file's text, stripped; None when it is not UTF-8 (reported by the caller)."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        return None


def require_folder(src: Path, what: str) -> Path:
    if not src.is_dir():
        raise CorpusError(f"{src} is not a folder; {what}")
    return src


SPLIT_RULE = "voxledger-split/v1"
"""How `assign_splits` splits a corpus that names no splits (recorded in init's plans and summary)."""


def assign_splits(loaded: LoadedCorpus, *, fraction: float = 0.1, low: int = 5, high: int = 20) -> LoadedCorpus:
    """Give a corpus that names no splits a deterministic ``train`` / ``dev`` / ``test`` split.

    Utterances that share a recording or a normalised sentence form one group (union-find), so no
    recording and no sentence crosses splits: the audit's leakage rules hold by construction. Groups
    are ranked by the sha256 of their smallest member id; the first ones go to ``test``, the next to
    ``dev``, each taking ``fraction`` of the utterances bounded to [``low``, ``high``], and the rest
    to ``train``. The result depends on the corpus only (not on file order, time or machine). A
    corpus too small to hold out two splits of ``low`` utterances and keep half for training is
    returned unchanged (``init`` then says what is missing).
    """
    from voxledger.tasks.metrics.normalise import basic

    utts = loaded.utterances.utterances
    per_split = min(high, max(low, round(fraction * len(utts))))
    if len(utts) < 4 * per_split:
        return loaded
    parent = list(range(len(utts)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[tuple[str, str], int] = {}
    for i, u in enumerate(utts):
        for key in (("recording", u.recording_id or u.id), ("text", basic(u.text))):
            if key[1] and key in first:
                parent[find(i)] = find(first[key])
            elif key[1]:
                first[key] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(utts)):
        groups.setdefault(find(i), []).append(i)
    ranked = sorted(groups.values(), key=lambda g: hashlib.sha256(min(utts[i].id for i in g).encode()).hexdigest())
    split_of: dict[int, str] = {}
    counts = {"test": 0, "dev": 0}
    for members in ranked:
        role = next((r for r in ("test", "dev") if counts[r] < per_split), "train")
        if role != "train":
            counts[role] += len(members)
        split_of.update(dict.fromkeys(members, role))
    kept = tuple(u.model_copy(update={"split": split_of[i]}) for i, u in enumerate(utts))
    rule = (
        f"{SPLIT_RULE}: groups sharing a recording or sentence ranked by sha256 of their first id; "
        f"test {counts['test']}, dev {counts['dev']}, train {len(utts) - counts['test'] - counts['dev']} utterances"
    )
    return replace(loaded, utterances=loaded.utterances.model_copy(update={"utterances": kept}), split_rule=rule)
