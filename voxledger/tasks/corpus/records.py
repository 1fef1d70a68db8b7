"""What every corpus reader returns: utterances, the manifest files read, and the lines that failed.

Readers never raise on a bad line: they return ``ManifestIssue``s naming the file and line, so
the audit reports every one of them as a finding and the run fails cleanly. Problems with the
layout itself (a missing required file, a missing column, a pipe command) raise ``CorpusError``
before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from voxledger.schemas.errors import validation_lines
from voxledger.schemas.manifest import Utterance, UtteranceSet


@dataclass(frozen=True)
class ManifestIssue:
    """A line that could not become an utterance."""

    code: str  # manifest_unreadable_line | manifest_invalid_record | duplicate_id
    file: str
    line: int
    message: str


@dataclass(frozen=True)
class LoadedCorpus:
    """A corpus as read: root, manifest file(s), utterances, and the lines that failed.

    ``audio_roots`` are the folders outside ``root`` the user declared as holding audio; they
    resolve paths and are never part of an identity. ``origins`` maps an utterance id to the
    ``file:line`` it came from, for error messages.
    """

    root: Path
    manifest_files: tuple[Path, ...]
    utterances: UtteranceSet
    issues: tuple[ManifestIssue, ...]
    audio_roots: tuple[Path, ...] = ()
    origins: dict[str, str] = field(default_factory=dict)
    split_rule: str | None = None
    """How the splits were assigned when the corpus names none (`importers.common.assign_splits`), else None."""


@dataclass
class RecordSink:
    """Collects records and issues while a reader walks its files, then builds a ``LoadedCorpus``."""

    root: Path
    records: list[tuple[Utterance, str, int]] = field(default_factory=list)
    issues: list[ManifestIssue] = field(default_factory=list)

    def issue(self, code: str, file: str, line: int, message: str) -> None:
        self.issues.append(ManifestIssue(code, file, line, message))

    def add(self, record: dict[str, Any], file: str, line: int) -> None:
        """Validate ``record`` into an Utterance; a failure becomes a ``manifest_invalid_record`` issue."""
        try:
            self.records.append((Utterance.from_record(record), file, line))
        except ValidationError as exc:
            detail = "; ".join(validation_lines(exc))
            self.issue("manifest_invalid_record", file, line, detail)

    def build(self, files: tuple[Path, ...], *, name: str | None = None, audio_roots: tuple[Path, ...] = ()) -> LoadedCorpus:
        """Drop duplicate ids (each one an issue) and return the corpus, utterances in read order."""
        seen: dict[str, tuple[str, int]] = {}
        kept: list[Utterance] = []
        for utt, file, line in self.records:
            if utt.id in seen:
                first = seen[utt.id]
                self.issue("duplicate_id", file, line, f"utterance id {utt.id!r} already used at {first[0]}:{first[1]}; ids must be unique")
                continue
            seen[utt.id] = (file, line)
            kept.append(utt)
        origins = {uid: f"{file}:{line}" for uid, (file, line) in seen.items()}
        utts = UtteranceSet(name=name or self.root.name, utterances=tuple(kept))
        return LoadedCorpus(self.root, files, utts, tuple(self.issues), audio_roots, origins)
