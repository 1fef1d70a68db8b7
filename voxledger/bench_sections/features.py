"""``features``: binding a training stage's inputs for a voice without alignment files, aligning
every clip against reading the alignments back from the home's memo (`voxledger.stores.memo`).

A training stage's cache key holds its features tree, so this binding runs on every training
command, also one then served from cache. Both passes run in a fresh process on the same home
(the second finds what the first filed) and must give the same features digest, or the section
fails; each pass also hashes the audio (the stat cache's work) as the stage does.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from voxledger.bench_sections.common import Figure, in_child
from voxledger.schemas.errors import VoxledgerError


def bind_child(home: str, corpus: str, backend_name: str) -> dict[str, Any]:
    """load + hash + features tree of ``corpus`` in ``home``, as `bind_inputs` does it, timed."""
    from voxledger.stores.home import Home
    from voxledger.tasks.backends.base import get_backend
    from voxledger.tasks.corpus.manifests import load_corpus
    from voxledger.tasks.corpus.sources import audio_digests
    from voxledger.tasks.stages.train import _features_tree

    backend = get_backend(backend_name)  # type: ignore[arg-type]  # its imports before the clock starts
    h = Home(home)
    t0 = time.perf_counter()
    loaded = load_corpus(Path(corpus))
    digests, _ = audio_digests(loaded, h.stat_cache)
    features = _features_tree(h, loaded, backend, digests)
    wall = time.perf_counter() - t0
    s = h.memo.stats
    return {"wall_s": wall, "features": features, "hits": s.hits, "misses": s.misses, "clips": len(loaded.utterances.utterances)}


def bench_features(work: Path, quick: bool) -> list[Figure]:
    """The features binding of a newcomer-style voice (LJSpeech layout, no alignment files): first
    pass against a memo pass, each in its own process."""
    from voxledger.schemas.training import DEFAULT_BACKEND
    from voxledger.tasks.corpus.demo import build_voice_corpus

    corpus, clips = build_voice_corpus(work / "features-voice", size="tiny" if quick else "full")
    home, backend = str(work / "features-home"), DEFAULT_BACKEND  # the demo's: it aligns clips without alignment files
    first = in_child(bind_child, home, str(corpus), backend)
    memo = in_child(bind_child, home, str(corpus), backend)
    if memo["features"] != first["features"]:
        raise VoxledgerError(f"the memo pass bound features {memo['features']}, aligning bound {first['features']}")
    if (first["misses"], memo["hits"]) != (clips, clips):
        raise VoxledgerError(f"expected {clips} alignments then {clips} memo hits, got {first['misses']} and {memo['hits']}")
    label = f"bind a training stage's features, {clips} clips without alignment files"
    return [
        Figure(f"{label}: aligning every clip", first["wall_s"], "s"),
        Figure(f"{label}: from the home's memo", memo["wall_s"], "s"),
        Figure("features binding: memo pass speed-up", first["wall_s"] / memo["wall_s"], "x"),
        Figure("features binding: aligning, per clip", 1000 * first["wall_s"] / clips, "ms/clip"),
        Figure("features binding: from the memo, per clip", 1000 * memo["wall_s"] / clips, "ms/clip"),
    ]
