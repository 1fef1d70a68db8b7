"""The audio a corpus names, by content: per-utterance file digests and the audio tree.

Audio roots only resolve paths here; the tree names files by the manifest's own path
(``paths.tree_name``), so neither digest depends on where the roots are declared.
"""

from __future__ import annotations

from pathlib import Path

from voxledger.schemas.errors import UnsafePathError
from voxledger.stores.hashing import StatCache, hash_files
from voxledger.stores.trees import TreeEntry, TreeManifest
from voxledger.tasks.corpus.paths import AudioPathResolver, tree_name
from voxledger.tasks.corpus.records import LoadedCorpus


def audio_files(corpus: LoadedCorpus) -> dict[str, Path]:
    """Utterance id -> its audio file, for every utterance whose path resolves to a file."""
    paths: dict[str, Path] = {}
    resolve = AudioPathResolver(corpus.root, corpus.audio_roots)
    for u in corpus.utterances.utterances:
        try:
            p = resolve(u.audio)
        except UnsafePathError:
            continue
        if p.is_file():
            paths[u.id] = p
    return paths


def audio_digests(corpus: LoadedCorpus, cache: StatCache | None = None) -> tuple[dict[str, str], dict[str, Path]]:
    """(utterance id -> digest of its audio file, utterance id -> path); segments share their recording's digest."""
    paths = audio_files(corpus)
    by_path = hash_files(sorted(set(paths.values())), cache=cache)
    return {uid: by_path[p] for uid, p in paths.items()}, paths


def audio_tree(corpus: LoadedCorpus, digests: dict[str, str], paths: dict[str, Path]) -> TreeManifest:
    """The audio files as a tree manifest, each named by ``tree_name`` of its manifest path."""
    entries = {
        tree_name(u.audio): TreeEntry(
            path=tree_name(u.audio), size_bytes=paths[u.id].stat().st_size, sha256=digests[u.id], executable=False
        )
        for u in corpus.utterances.utterances
        if u.id in digests
    }
    return TreeManifest(entries=tuple(entries[k] for k in sorted(entries)))
