"""Typed corpus manifests: one ``Utterance`` per audio file, an ``UtteranceSet`` per corpus."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, JsonValue, ValidationInfo, field_validator, model_validator

from voxledger.schemas.base import Frozen

CORE_FIELDS = (
    "id",
    "audio",
    "text",
    "speaker",
    "recording_id",
    "split",
    "language",
    "instruction",
    "duration_s",
    "sample_rate_hz",
    "start_s",
    "end_s",
)


_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f/\\]")


class Utterance(Frozen):
    """One utterance. ``audio`` is a POSIX path relative to the corpus root, or (absolute or with
    ``..``) one inside an audio root the user declares.

    ``duration_s`` and ``sample_rate_hz`` are what the manifest claims (None when it says
    nothing); the audit measures the real values. ``start_s``/``end_s`` cut the utterance from a
    longer recording (Kaldi ``segments``); ``end_s`` None means to the end of the recording. Both
    are left out of the serialised form when unset, so corpora without segments keep their
    digests. Columns the model does not know are kept verbatim in ``extra``, never dropped.
    """

    id: str = Field(min_length=1, max_length=200)
    audio: str
    text: str
    speaker: str = Field(min_length=1)
    recording_id: str = Field(min_length=1)
    split: str = Field(min_length=1)
    language: str = "en"
    instruction: str | None = None
    duration_s: float | None = Field(default=None, ge=0)
    sample_rate_hz: int | None = Field(default=None, gt=0)
    start_s: float | None = Field(default=None, ge=0, exclude_if=lambda v: v is None)
    end_s: float | None = Field(default=None, gt=0, exclude_if=lambda v: v is None)
    extra: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("id", "speaker", "recording_id", "split")
    @classmethod
    def _a_name_not_a_path(cls, value: str, info: ValidationInfo) -> str:
        """Ids, speakers and splits name things (files are named after ids): no path syntax, no control characters."""
        if _UNSAFE_NAME.search(value) or value.strip(".") == "":
            raise ValueError(
                f"{info.field_name} {value!r} holds a path separator, '.'/'..' or a control character (NUL included): "
                f"name it with letters, digits, '-', '_' and '.' (e.g. {re.sub(r'[^A-Za-z0-9_.-]+', '_', value).strip('._') or 'spk1'!r})"
            )
        return value

    @field_validator("text")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("text holds a NUL character (0x00): the manifest line is damaged; re-export it")
        return value

    @model_validator(mode="after")
    def _check_segment(self) -> Utterance:
        if self.end_s is not None and self.end_s <= (self.start_s or 0.0):
            raise ValueError(f"segment end_s {self.end_s} must be after start_s {self.start_s or 0.0}")
        return self

    @property
    def is_segment(self) -> bool:
        """True when the utterance is a cut of a longer recording."""
        return self.start_s is not None or self.end_s is not None

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Utterance:
        """Build from a flat manifest record; unknown keys go to ``extra``."""
        core = {k: record[k] for k in CORE_FIELDS if k in record}
        core.setdefault("recording_id", record.get("id"))
        extra = {k: v for k, v in record.items() if k not in CORE_FIELDS}
        return cls(**core, extra=extra)

    def to_record(self) -> dict[str, Any]:
        """Flat record (core fields then extra keys), the inverse of ``from_record``."""
        data = self.model_dump(mode="json", exclude={"extra"})
        return {**data, **self.extra}


class UtteranceSet(Frozen):
    """A corpus: utterances in manifest order, plus where they were read from."""

    name: str
    utterances: tuple[Utterance, ...]

    def splits(self) -> dict[str, int]:
        """Utterance count per split."""
        counts: dict[str, int] = {}
        for u in self.utterances:
            counts[u.split] = counts.get(u.split, 0) + 1
        return counts

    def select(self, *, splits: set[str] | None = None, speakers: set[str] | None = None) -> UtteranceSet:
        """The subset in the given splits and/or speakers (order kept)."""
        keep = tuple(u for u in self.utterances if (splits is None or u.split in splits) and (speakers is None or u.speaker in speakers))
        return UtteranceSet(name=self.name, utterances=keep)
