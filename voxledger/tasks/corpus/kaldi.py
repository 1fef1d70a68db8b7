"""Kaldi data directories, read and written the way Kaldi and ESPnet recipes lay them out.

Required: ``wav.scp``, ``text``, ``utt2spk``. Optional: ``segments`` (utterances cut from longer
recordings; ``wav.scp`` is then keyed by recording id), ``spk2gender``, ``utt2lang``,
``utt2dur``, and ``instruct`` (CosyVoice 3). ``wav.scp`` paths may be relative to the split
folder, may climb out of it with ``..``, or may be absolute; anything outside the corpus root
must lie under a declared audio root (see ``paths``). Pipe commands (``sox x.flac -t wav - |``)
are refused: voxledger reads audio files, and a command's output has no stable identity;
``voxledger corpus materialise`` runs them once into files (see ``pipes``).
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from voxledger.schemas.errors import CorpusError
from voxledger.schemas.manifest import Utterance, UtteranceSet
from voxledger.tasks.corpus.records import LoadedCorpus, RecordSink

KALDI_FILES = ("wav.scp", "text", "utt2spk")
OPTIONAL_FILES = ("segments", "spk2gender", "utt2lang", "utt2dur", "instruct")

KaldiMap = dict[str, tuple[str, int]]


def is_kaldi_dir(path: Path) -> bool:
    return (path / "wav.scp").is_file()


def _read_map(path: Path, sink: RecordSink, label: str, *, required: bool) -> KaldiMap:
    """``id rest-of-line`` lines -> {id: (value, line number)}."""
    out: KaldiMap = {}
    if not path.is_file():
        if required:
            raise CorpusError(f"{path} is missing; a Kaldi directory needs {', '.join(KALDI_FILES)}")
        return out
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                sink.issue("manifest_unreadable_line", label, lineno, f"not UTF-8 at byte {exc.start}; re-encode as UTF-8")
                continue
            if not text.strip():
                continue
            key, _, value = text.partition(" ")
            out[key] = (value.strip(), lineno)
    return out


def refuse_pipes(wavs: KaldiMap, label: str) -> None:
    """CorpusError naming the first pipe command (and how many there are); nothing is read further."""
    pipes = [(key, value, line) for key, (value, line) in wavs.items() if value.endswith("|")]
    if pipes:
        key, value, line = pipes[0]
        more = f" (and {len(pipes) - 1} more lines)" if len(pipes) > 1 else ""
        raise CorpusError(
            f"{label}:{line}: entry {key!r} is a pipe command ({value[:80]!r}){more}; voxledger reads audio files only: "
            "run each command once to a file (e.g. sox in.flac out.wav), point wav.scp at the files, and audit again; "
            "or let voxledger corpus materialise DATA --out DIR run them (no shell; each command goes into its receipt)"
        )


def _segments(sink: RecordSink, d: Path, rel: str) -> dict[str, tuple[str, float, float | None, int]]:
    """``utt rec start end`` -> {utt: (rec, start_s, end_s or None for -1, line)}."""
    out: dict[str, tuple[str, float, float | None, int]] = {}
    label = f"{rel}/segments"
    for uid, (value, line) in _read_map(d / "segments", sink, label, required=False).items():
        parts = value.split()
        try:
            rec, start, end = parts[0], float(parts[1]), float(parts[2])
        except (IndexError, ValueError):
            sink.issue("manifest_invalid_record", label, line, f"expected 'utterance recording start end' (seconds), got {uid} {value!r}")
            continue
        out[uid] = (rec, start, None if end < 0 else end, line)
    return out


def _audio_path(wav: str, rel: str) -> str:
    """A wav.scp path as a manifest path: absolute stays absolute, relative is joined to the split folder."""
    if wav.startswith("/"):
        return posixpath.normpath(wav)
    return posixpath.normpath(posixpath.join(rel, wav))


def _read_split(d: Path, root: Path, sink: RecordSink) -> None:
    rel = d.relative_to(root).as_posix() if d != root else "."
    maps = {
        name: _read_map(d / name, sink, f"{rel}/{name}", required=name in KALDI_FILES)
        for name in (*KALDI_FILES, "spk2gender", "utt2lang", "utt2dur", "instruct")
    }
    wavs, texts, spks = maps["wav.scp"], maps["text"], maps["utt2spk"]
    refuse_pipes(wavs, f"{rel}/wav.scp")
    segs = _segments(sink, d, rel)
    rows: dict[str, tuple[str, float | None, float | None, str, int]]
    if (d / "segments").is_file():
        rows = {uid: (rec, start, end, f"{rel}/segments", line) for uid, (rec, start, end, line) in segs.items()}
    else:
        rows = {uid: (uid, None, None, f"{rel}/wav.scp", line) for uid, (_, line) in wavs.items()}
    for uid, (rec, start, end, file, line) in rows.items():
        missing = ([] if rec in wavs else [f"wav.scp (recording {rec!r})"]) + [
            n for n, m in (("text", texts), ("utt2spk", spks)) if uid not in m
        ]
        if missing:
            sink.issue("manifest_invalid_record", file, line, f"utterance {uid!r} has no line in {', '.join(missing)}")
            continue
        speaker = spks[uid][0]
        record: dict[str, object] = {
            "id": uid,
            "audio": _audio_path(wavs[rec][0], rel),
            "text": texts[uid][0],
            "speaker": speaker,
            "recording_id": rec,
            "split": d.name,
            "instruction": maps["instruct"].get(uid, (None, 0))[0],
        }
        if start is not None:
            record |= {"start_s": start, "end_s": end}
        if uid in maps["utt2lang"]:
            record["language"] = maps["utt2lang"][uid][0]
        if uid in maps["utt2dur"]:
            record["duration_s"] = _float_or_none(maps["utt2dur"][uid][0])
        if speaker in maps["spk2gender"]:
            record["gender"] = maps["spk2gender"][speaker][0]
        sink.add(record, file, line)


def _float_or_none(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def load_kaldi(dirs: list[Path], root: Path, audio_roots: tuple[Path, ...] = ()) -> LoadedCorpus:
    """Read one Kaldi directory per split (the split is the folder's name).

    Raises:
        CorpusError: a required file is missing, or wav.scp holds a pipe command.
    """
    sink = RecordSink(root)
    for d in dirs:
        _read_split(d, root, sink)
    files = tuple(d / n for d in dirs for n in (*KALDI_FILES, *OPTIONAL_FILES) if (d / n).is_file())
    return sink.build(files, audio_roots=audio_roots)


def _wav_value(u: Utterance, corpus_root: Path, split_dir: Path, relative: bool) -> str:
    source = Path(os.path.abspath(corpus_root / u.audio if not u.audio.startswith("/") else u.audio))
    return Path(os.path.relpath(source, split_dir)).as_posix() if relative else str(source)


def _split_files(utts: list[Utterance], corpus_root: Path, d: Path, relative: bool) -> dict[str, list[str]]:
    spk2utt: dict[str, list[str]] = {}
    for u in utts:
        spk2utt.setdefault(u.speaker, []).append(u.id)
    recordings = {(u.recording_id if u.is_segment else u.id): u for u in utts}
    files = {
        "wav.scp": [f"{rec} {_wav_value(u, corpus_root, d, relative)}" for rec, u in sorted(recordings.items())],
        "text": [f"{u.id} {u.text}" for u in utts],
        "utt2spk": [f"{u.id} {u.speaker}" for u in utts],
        "spk2utt": [f"{s} {' '.join(ids)}" for s, ids in sorted(spk2utt.items())],
        "instruct": [f"{u.id} {u.instruction or ''}".rstrip() for u in utts],
        "segments": [
            f"{u.id} {u.recording_id} {u.start_s or 0.0:.3f} {-1 if u.end_s is None else round(u.end_s, 3)}" for u in utts if u.is_segment
        ],
        "utt2lang": [f"{u.id} {u.language}" for u in utts],
        "utt2dur": [f"{u.id} {u.duration_s}" for u in utts if u.duration_s is not None],
        "spk2gender": sorted({f"{u.speaker} {u.extra['gender']}" for u in utts if "gender" in u.extra}),
    }
    return {name: lines for name, lines in files.items() if lines}


def write_kaldi(utterances: UtteranceSet, corpus_root: Path, out_dir: Path, *, relative: bool = False) -> list[Path]:
    """Write one Kaldi directory per split; refuse to overwrite. Return the split directories.

    ``wav.scp`` holds absolute paths (Kaldi's own habit; read them back with the audio's folder
    as an audio root), or with ``relative=True`` paths relative to each split folder. Segments,
    languages, durations and genders are written when the utterances carry them.
    """
    if out_dir.exists() and any(out_dir.iterdir()):
        raise CorpusError(f"{out_dir} is not empty; choose a new output folder (nothing overwritten)")
    by_split: dict[str, list[Utterance]] = {}
    for u in utterances.utterances:
        by_split.setdefault(u.split, []).append(u)
    written = []
    for split, utts in sorted(by_split.items()):
        d = out_dir / split
        d.mkdir(parents=True)
        for name, lines in _split_files(sorted(utts, key=lambda u: u.id), corpus_root, d.absolute(), relative).items():
            (d / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        written.append(d)
    return written
