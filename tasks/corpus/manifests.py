"""Read corpora into ``UtteranceSet`` (JSONL or Kaldi directories) and write them back to Kaldi.

Readers never raise on a bad line: they return ``ManifestIssue``s naming the file and line, so
the audit reports every one of them as a finding and the run fails cleanly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError
from voxledger.schemas.errors import CorpusError
from voxledger.schemas.manifest import Utterance, UtteranceSet

KALDI_FILES = ("wav.scp", "text", "utt2spk")


@dataclass(frozen=True)
class ManifestIssue:
    """A line that could not become an utterance."""

    code: str  # manifest_unreadable_line | manifest_invalid_record | duplicate_id
    file: str
    line: int
    message: str


@dataclass(frozen=True)
class LoadedCorpus:
    """A corpus as read: root, manifest file(s), utterances, and the lines that failed."""

    root: Path
    manifest_files: tuple[Path, ...]
    utterances: UtteranceSet
    issues: tuple[ManifestIssue, ...]


def load_corpus(path: Path) -> LoadedCorpus:
    """Detect the layout of ``path`` and read it.

    Layouts: a directory with ``manifest.jsonl``; a ``.jsonl`` file (root = its folder); a Kaldi
    directory (``wav.scp``, ``text``, ``utt2spk``; split = folder name); or a folder whose
    sub-folders are Kaldi directories, one per split.
    """
    path = path.absolute()
    if path.is_file() and path.suffix == ".jsonl":
        return _load_jsonl(path, path.parent)
    if (path / "manifest.jsonl").is_file():
        return _load_jsonl(path / "manifest.jsonl", path)
    if (path / "wav.scp").is_file():
        return _load_kaldi([path], path)
    if path.is_dir():
        subs = sorted(p for p in path.iterdir() if (p / "wav.scp").is_file())
        if subs:
            return _load_kaldi(subs, path)
    raise CorpusError(
        f"{path}: no corpus found; expected manifest.jsonl, a .jsonl file, or Kaldi files "
        f"({', '.join(KALDI_FILES)}) in the folder or its per-split sub-folders"
    )


def _dedupe(records: list[tuple[Utterance, str, int]], issues: list[ManifestIssue]) -> list[Utterance]:
    seen: dict[str, tuple[str, int]] = {}
    kept: list[Utterance] = []
    for utt, file, line in records:
        if utt.id in seen:
            first = seen[utt.id]
            issues.append(ManifestIssue("duplicate_id", file, line, f"utterance id {utt.id!r} already used at {first[0]}:{first[1]}; ids must be unique"))
            continue
        seen[utt.id] = (file, line)
        kept.append(utt)
    return kept


def _load_jsonl(manifest: Path, root: Path) -> LoadedCorpus:
    issues: list[ManifestIssue] = []
    records: list[tuple[Utterance, str, int]] = []
    name = manifest.name
    with open(manifest, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                issues.append(ManifestIssue("manifest_unreadable_line", name, lineno, f"not UTF-8 at byte {exc.start}; re-encode the file as UTF-8"))
                continue
            except json.JSONDecodeError as exc:
                issues.append(ManifestIssue("manifest_unreadable_line", name, lineno, f"not valid JSON ({exc.msg} at column {exc.colno})"))
                continue
            if not isinstance(record, dict):
                issues.append(ManifestIssue("manifest_invalid_record", name, lineno, "a manifest line must be a JSON object"))
                continue
            try:
                records.append((Utterance.from_record(record), name, lineno))
            except ValidationError as exc:
                detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                issues.append(ManifestIssue("manifest_invalid_record", name, lineno, detail))
    kept = _dedupe(records, issues)
    return LoadedCorpus(root, (manifest,), UtteranceSet(name=root.name, utterances=tuple(kept)), tuple(issues))


def _read_kaldi_map(path: Path, issues: list[ManifestIssue], *, required: bool) -> dict[str, tuple[str, int]]:
    """``id rest-of-line`` files -> {id: (value, line number)}."""
    out: dict[str, tuple[str, int]] = {}
    if not path.is_file():
        if required:
            raise CorpusError(f"{path} is missing; a Kaldi directory needs {', '.join(KALDI_FILES)}")
        return out
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                issues.append(ManifestIssue("manifest_unreadable_line", str(path.parent.name + "/" + path.name), lineno, f"not UTF-8 at byte {exc.start}; re-encode as UTF-8"))
                continue
            if not text.strip():
                continue
            key, _, value = text.partition(" ")
            out[key] = (value.strip(), lineno)
    return out


def _load_kaldi(dirs: list[Path], root: Path) -> LoadedCorpus:
    issues: list[ManifestIssue] = []
    records: list[tuple[Utterance, str, int]] = []
    for d in dirs:
        wavs = _read_kaldi_map(d / "wav.scp", issues, required=True)
        texts = _read_kaldi_map(d / "text", issues, required=True)
        spks = _read_kaldi_map(d / "utt2spk", issues, required=True)
        instructs = _read_kaldi_map(d / "instruct", issues, required=False)
        rel = d.relative_to(root).as_posix() if d != root else "."
        for uid, (wav, lineno) in wavs.items():
            missing = [n for n, m in (("text", texts), ("utt2spk", spks)) if uid not in m]
            if missing:
                issues.append(ManifestIssue("manifest_invalid_record", f"{rel}/wav.scp", lineno, f"utterance {uid!r} has no line in {', '.join(missing)}"))
                continue
            audio = wav if Path(wav).is_absolute() else (Path(rel) / wav).as_posix()
            record = {"id": uid, "audio": audio, "text": texts[uid][0], "speaker": spks[uid][0],
                      "split": d.name, "instruction": instructs.get(uid, (None, 0))[0]}  # fmt: skip
            try:
                records.append((Utterance.from_record(record), f"{rel}/wav.scp", lineno))
            except ValidationError as exc:
                issues.append(ManifestIssue("manifest_invalid_record", f"{rel}/wav.scp", lineno, str(exc.errors()[0]["msg"])))
    kept = _dedupe(records, issues)
    files = tuple(d / n for d in dirs for n in (*KALDI_FILES, "instruct") if (d / n).is_file())
    return LoadedCorpus(root, files, UtteranceSet(name=root.name, utterances=tuple(kept)), tuple(issues))


def write_kaldi(utterances: UtteranceSet, corpus_root: Path, out_dir: Path) -> list[Path]:
    """Write one Kaldi directory per split (wav.scp with absolute paths, text, utt2spk, spk2utt,
    instruct); refuse to overwrite. Return the split directories written."""
    if out_dir.exists() and any(out_dir.iterdir()):
        raise CorpusError(f"{out_dir} is not empty; choose a new output folder (nothing overwritten)")
    by_split: dict[str, list[Utterance]] = {}
    for u in utterances.utterances:
        by_split.setdefault(u.split, []).append(u)
    written = []
    for split, utts in sorted(by_split.items()):
        d = out_dir / split
        d.mkdir(parents=True)
        utts = sorted(utts, key=lambda u: u.id)
        spk2utt: dict[str, list[str]] = {}
        for u in utts:
            spk2utt.setdefault(u.speaker, []).append(u.id)
        files = {
            "wav.scp": [f"{u.id} {(corpus_root / u.audio).absolute()}" for u in utts],
            "text": [f"{u.id} {u.text}" for u in utts],
            "utt2spk": [f"{u.id} {u.speaker}" for u in utts],
            "spk2utt": [f"{s} {' '.join(ids)}" for s, ids in sorted(spk2utt.items())],
            "instruct": [f"{u.id} {u.instruction or ''}".rstrip() for u in utts],
        }
        for name, lines in files.items():
            (d / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        written.append(d)
    return written
