"""lhotse manifests: a ``RecordingSet`` plus a ``SupervisionSet``, or a ``CutSet``, as JSONL
(gzipped or not), read with lhotse itself. Which set a file holds is decided by its name
(``*recordings*``, ``*supervisions*``, ``*cuts*``), the way lhotse recipes name them; the split is
what follows that word (``libritts_supervisions_dev-clean.jsonl.gz`` -> ``dev-clean``), else
``train``. One utterance per supervision; a supervision shorter than its recording is a segment.
Recordings must be single files on disk: ``command`` and ``url`` sources are refused."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from voxledger.schemas.errors import CorpusError
from voxledger.tasks.corpus.importers.common import label
from voxledger.tasks.corpus.records import LoadedCorpus, RecordSink

KINDS = ("recordings", "supervisions", "cuts")
_NAME = re.compile(r"(?:^|[_.-])(recordings|supervisions|cuts)(?:[_.-](?P<split>[^.]+))?\.jsonl(?:\.gz)?$")


def _kind(path: Path) -> tuple[str, str] | None:
    m = _NAME.search(path.name)
    if m is None:
        return None
    return m.group(1), m.group("split") or "train"


def _manifests(src: Path) -> list[Path]:
    candidates = [src] if src.is_file() else sorted(src.glob("*.jsonl*")) if src.is_dir() else []
    return [p for p in candidates if _kind(p) is not None]


def looks_like(src: Path) -> bool:
    return bool(_manifests(src))


def load(src: Path) -> LoadedCorpus:
    """Read lhotse manifests from a folder (or one cuts file); audio paths are relative to it.

    Raises:
        CorpusError: no manifest, supervisions without recordings, a ``command``/``url``
            source, or a manifest lhotse cannot parse.
    """
    root = src.parent if src.is_file() else src
    files = _manifests(src)
    if not files:
        raise CorpusError(f"{src}: no lhotse manifest (*recordings*.jsonl[.gz] + *supervisions*.jsonl[.gz], or *cuts*.jsonl[.gz])")
    sink = RecordSink(root)
    by_split: dict[str, dict[str, Path]] = {}
    for p in files:
        kind, split = _kind(p)  # type: ignore[misc]
        by_split.setdefault(split, {})[kind] = p
    for split, kinds in sorted(by_split.items()):
        if "cuts" in kinds:
            _cuts(sink, root, kinds["cuts"], split)
        elif "supervisions" in kinds and "recordings" in kinds:
            _supervisions(sink, root, kinds["recordings"], kinds["supervisions"], split)
        else:
            have = ", ".join(p.name for p in kinds.values())
            raise CorpusError(f"{root}: split {split!r} has {have} only; lhotse needs recordings and supervisions together, or cuts")
    return sink.build(tuple(files))


def _lazy(cls: Any, path: Path) -> Iterable[Any]:
    return cls.from_jsonl_lazy(path)  # type: ignore[no-any-return]


def _audio(recording: Any, where: str, root: Path) -> str:
    sources = recording.sources
    if len(sources) != 1 or sources[0].type != "file":
        kinds = ", ".join(s.type for s in sources)
        raise CorpusError(
            f"{where}: recording {recording.id!r} has sources ({kinds}); voxledger reads one audio file per recording: "
            "write each recording to a file first (lhotse: recording.to_file / CutSet.save_audios)"
        )
    source = str(sources[0].source)
    return source if source.startswith("/") else label(root / source, root)


def _record(sup: Any, audio: str, start: float, rec_duration: float, split: str) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": sup.id,
        "audio": audio,
        "text": sup.text or "",
        "speaker": sup.speaker or "",
        "recording_id": sup.recording_id,
        "split": split,
        "duration_s": round(sup.duration, 6),
    }
    if sup.language:
        record["language"] = sup.language
    if sup.gender:
        record["gender"] = sup.gender
    if start > 0 or sup.duration < rec_duration - 1e-3:
        record |= {"start_s": round(start, 6), "end_s": round(start + sup.duration, 6)}
    return record


def _supervisions(sink: RecordSink, root: Path, rec_path: Path, sup_path: Path, split: str) -> None:
    from lhotse import RecordingSet, SupervisionSet

    recs = {}
    for lineno, r in enumerate(_guard(_lazy(RecordingSet, rec_path), rec_path, root), start=1):
        recs[r.id] = (r, _audio(r, f"{label(rec_path, root)}:{lineno}", root))
    where = label(sup_path, root)
    for lineno, sup in enumerate(_guard(_lazy(SupervisionSet, sup_path), sup_path, root), start=1):
        if sup.recording_id not in recs:
            sink.issue(
                "manifest_invalid_record",
                where,
                lineno,
                f"supervision {sup.id!r} names recording {sup.recording_id!r}, absent from {rec_path.name}",
            )
            continue
        rec, audio = recs[sup.recording_id]
        sink.add(_record(sup, audio, sup.start, rec.duration, split), where, lineno)


def _cuts(sink: RecordSink, root: Path, path: Path, split: str) -> None:
    from lhotse import CutSet

    where = label(path, root)
    for lineno, cut in enumerate(_guard(_lazy(CutSet, path), path, root), start=1):
        if not getattr(cut, "has_recording", False):
            sink.issue("manifest_invalid_record", where, lineno, f"cut {cut.id!r} has no recording; only cuts of recordings are read")
            continue
        audio = _audio(cut.recording, f"{where}:{lineno}", root)
        for sup in cut.supervisions:
            sink.add(_record(sup, audio, cut.start + sup.start, cut.recording.duration, split), where, lineno)


def _guard(items: Iterable[Any], path: Path, root: Path) -> Iterable[Any]:
    """Iterate a lazy lhotse manifest, turning a parse failure into one CorpusError with the line."""
    lineno = 0
    it = iter(items)
    while True:
        lineno += 1
        try:
            item = next(it)
        except StopIteration:
            return
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise CorpusError(
                f"{label(path, root)}:{lineno}: lhotse cannot read this line ({type(exc).__name__}: {exc}); "
                "check it against lhotse's manifest format"
            ) from None
        yield item
