"""Read corpora into ``UtteranceSet``: voxledger JSONL, Kaldi directories, and the public layouts
(LJSpeech, LibriTTS, VCTK, Hugging Face audiofolder, lhotse manifests); write them back to Kaldi.

``load_corpus`` decides the layout by looking at file names only (never by trying readers until
one works), so an unknown layout is one clear error listing what was looked for.
"""

from __future__ import annotations

import json
from pathlib import Path

from voxledger.schemas.errors import CorpusError
from voxledger.tasks.corpus.importers import IMPORTERS, ImportFormat, detect_layout
from voxledger.tasks.corpus.kaldi import KALDI_FILES, is_kaldi_dir, load_kaldi, write_kaldi
from voxledger.tasks.corpus.paths import normalise_roots
from voxledger.tasks.corpus.records import LoadedCorpus, ManifestIssue, RecordSink

Layout = ImportFormat | str  # "auto", "jsonl", "kaldi" or an importer name
__all__ = ["KALDI_FILES", "LoadedCorpus", "ManifestIssue", "load_corpus", "write_jsonl", "write_kaldi"]


def load_corpus(path: Path, *, audio_roots: tuple[Path, ...] = (), layout: Layout = "auto") -> LoadedCorpus:
    """Detect the layout of ``path`` (or use ``layout``) and read it.

    Layouts: a directory with ``manifest.jsonl``; a ``.jsonl`` file (root = its folder); a Kaldi
    directory (``wav.scp``, ``text``, ``utt2spk``; split = folder name); a folder whose
    sub-folders are Kaldi directories, one per split; or one of the public layouts in
    ``importers.IMPORTERS``.

    Args:
        audio_roots: folders outside the corpus that manifest paths may point into (absolute
            paths, ``..``); used to resolve audio, never part of any identity.

    Raises:
        CorpusError: no known layout, a required file or column is missing, or a pipe command.
        UnsafePathError: an audio root is not a folder.
    """
    path = path.absolute()
    roots = normalise_roots(audio_roots)
    if layout == "auto":
        layout = _detect(path)
    if layout == "jsonl":
        manifest = path if path.is_file() else path / "manifest.jsonl"
        return _load_jsonl(manifest, manifest.parent, roots)
    if layout == "kaldi":
        if is_kaldi_dir(path):
            return load_kaldi([path], path, roots)
        return load_kaldi(sorted(p for p in path.iterdir() if is_kaldi_dir(p)), path, roots)
    if layout not in IMPORTERS:
        raise CorpusError(f"unknown corpus layout {layout!r}; choose one of auto, jsonl, kaldi, {', '.join(IMPORTERS)}")
    loaded = IMPORTERS[layout](path)
    return LoadedCorpus(loaded.root, loaded.manifest_files, loaded.utterances, loaded.issues, roots, loaded.origins, loaded.split_rule)


def _detect(path: Path) -> str:
    if path.is_file() and path.suffix == ".jsonl" and detect_layout(path) is None:
        return "jsonl"
    if (path / "manifest.jsonl").is_file():
        return "jsonl"
    if is_kaldi_dir(path) or (path.is_dir() and any(is_kaldi_dir(p) for p in path.iterdir())):
        return "kaldi"
    found = detect_layout(path)
    if found is None:
        raise CorpusError(
            f"{path}: no corpus found; expected manifest.jsonl, a .jsonl file, Kaldi files ({', '.join(KALDI_FILES)}) in the folder "
            f"or its per-split sub-folders, or a public layout ({', '.join(IMPORTERS)}); name it with --layout if it is one of those"
        )
    return found


def _load_jsonl(manifest: Path, root: Path, audio_roots: tuple[Path, ...]) -> LoadedCorpus:
    sink = RecordSink(root)
    name = manifest.name
    with open(manifest, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                sink.issue("manifest_unreadable_line", name, lineno, f"not UTF-8 at byte {exc.start}; re-encode the file as UTF-8")
                continue
            except json.JSONDecodeError as exc:
                sink.issue("manifest_unreadable_line", name, lineno, f"not valid JSON ({exc.msg} at column {exc.colno})")
                continue
            if not isinstance(record, dict):
                sink.issue("manifest_invalid_record", name, lineno, "a manifest line must be a JSON object")
                continue
            sink.add(record, name, lineno)
    return sink.build((manifest,), audio_roots=audio_roots)


def write_jsonl(loaded: LoadedCorpus, out: Path) -> Path:
    """Write ``loaded``'s utterances as a voxledger ``manifest.jsonl`` at ``out``; refuse to overwrite.

    Audio paths are rewritten relative to ``out``'s folder (they may climb out of it with ``..``:
    audit it then with the source folder as an audio root). Written to a temporary name and
    renamed, so a failure leaves nothing behind.
    """
    import os

    if out.exists():
        raise CorpusError(f"{out} exists; choose a new file name (nothing overwritten)")
    out.parent.mkdir(parents=True, exist_ok=True)
    base = out.parent.absolute()
    lines = []
    for u in loaded.utterances.utterances:
        src = u.audio if u.audio.startswith("/") else os.path.abspath(loaded.root / u.audio)
        record = u.model_copy(update={"audio": Path(os.path.relpath(src, base)).as_posix()}).to_record()
        lines.append(json.dumps(record, ensure_ascii=False, sort_keys=False) + "\n")
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text("".join(lines), encoding="utf-8")
    os.replace(tmp, out)
    return out
