"""Every ``VOXLEDGER_*`` environment variable: typed, documented, read in one place.

``load_settings()`` reads the environment afresh on each call (nothing is cached, so a changed
variable is seen at once; a call costs under a millisecond) and raises SettingsError naming
the variable, its value and what is expected. Groups keep the names users already set:
``VOXLEDGER_S3_WORKERS`` is ``settings.s3.workers``, ``VOXLEDGER_COSYVOICE_DIR`` is
``settings.cosyvoice.dir``. Booleans accept pydantic's spellings (1/0, true/false, yes/no,
on/off); an empty variable counts as unset. ``docs/settings.md`` is generated from this module.

This module imports nothing from voxledger beyond ``schemas``, so ``stores`` may use it.
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple
from urllib.parse import urlsplit

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as SourceError

from voxledger.schemas.errors import SettingsError

PREFIX = "VOXLEDGER_"
_GROUP = ConfigDict(frozen=True, extra="ignore")


class S3Settings(BaseModel):
    """The shared S3-compatible store (``store push/pull/status``, ``deploy --shared-store``).
    Credentials come from the standard AWS variables and files, never from here."""

    model_config = _GROUP

    bucket: str = Field(
        default="", description="Bucket of the shared store (it must exist); required by `store push`, `pull` and `status`."
    )
    prefix: str = Field(default="", description="Key prefix, so one bucket can hold several stores (a trailing / is added).")
    endpoint_url: str | None = Field(default=None, description="Endpoint of a non-AWS server, e.g. `http://minio.lan:9000`; unset for AWS.")
    region: str | None = Field(default=None, description="Region name; unset takes it from the AWS configuration.")

    @field_validator("endpoint_url")
    @classmethod
    def _http_endpoint(cls, value: str | None) -> str | None:
        """An S3 endpoint is an http(s) URL with a host (``file://`` and bare paths are not S3 servers)."""
        if value is None or value == "":
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"{value!r} is not an http(s) URL with a host, e.g. http://minio.lan:9000 (a file:// path is not an S3 server)"
            )
        return value

    part_size_mib: int = Field(default=8, ge=5, description="Multipart upload part size in MiB (S3's minimum is 5).")
    conditional_writes: bool = Field(
        default=True, description="Write with `If-None-Match: *`; false for a server that mishandles it (a 501 answer is detected anyway)."
    )
    workers: int = Field(default=16, ge=1, description="Parallel transfers (threads and HTTP connections).")


class CosyVoiceSettings(BaseModel):
    """Machine facts of the ``cosyvoice3`` backend: paths and device, never part of a plan digest."""

    model_config = _GROUP

    dir: Path | None = Field(
        default=None, description="A FunAudioLLM/CosyVoice checkout (with `third_party/Matcha-TTS`); required by the backend."
    )
    model_dir: Path | None = Field(
        default=None, description="The Fun-CosyVoice3-0.5B folder; unset means `<checkout>/pretrained_models/Fun-CosyVoice3-0.5B`."
    )
    campplus_onnx: Path | None = Field(default=None, description="Speaker embedding extractor; unset means `<model_dir>/campplus.onnx`.")
    speech_tokenizer_onnx: Path | None = Field(
        default=None, description="Speech tokenizer; unset means `<model_dir>/speech_tokenizer_v3.onnx`."
    )
    device: str = Field(
        default="auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        json_schema_extra={"accepts": "auto, cpu, cuda or cuda:N"},
        description=(
            "The one device of every cosyvoice3 stage: auto is CUDA when torch sees a GPU, else cpu; plain cuda means "
            "`cuda:$LOCAL_RANK` on a data-parallel rank; a stage upstream would run elsewhere is refused."
        ),
    )
    work_dir: Path | None = Field(
        default=None, description="Cache of prepared data and file digests; unset means `~/.cache/voxledger/cosyvoice3`."
    )
    ranks: int = Field(
        default=1,
        ge=1,
        le=64,
        json_schema_extra={"accepts": "a whole number from 1 to 64"},
        description=(
            "Data-parallel training: a cosyvoice3 run above 1 trains on this many ranks that voxledger starts (DDP; gloo on "
            "the CPU, NCCL on CUDA, one GPU each), the effective batch unchanged; the world size is part of the run's "
            "identity and recorded in its receipts; a resume needs the same number."
        ),
    )
    probe_timeout_s: float = Field(
        default=600.0,
        gt=0,
        le=86_400,
        json_schema_extra={"accepts": "a number of seconds above 0"},
        description=(
            "`cosyvoice3 preflight` imports upstream's whole import set in a child process and stops it after this long "
            "(10-30 s on an idle machine; a timeout is reported naming this setting)."
        ),
    )
    python: Path | None = Field(
        default=None,
        description=(
            "Another interpreter with upstream's pins, reported on by `cosyvoice3 preflight`; "
            "the backend refuses to start while it is set (running through it is not implemented)."
        ),
    )


class BenchSettings(BaseModel):
    """Knobs of ``voxledger bench`` stages that are too slow or need tools to run by default."""

    model_config = _GROUP

    dvc: Path | None = Field(default=None, description="The dvc executable for `--only store-dvc`; unset means the dvc on PATH.")
    rounds: int = Field(default=3, ge=1, description="Rounds of `--only store-dvc` (each figure is the median over rounds).")
    scale_clips: int | None = Field(
        default=None, ge=1, description="Ten-second clips of `--only corpus-scale`; unset means 36,000 (100 hours)."
    )


class VoxledgerSettings(BaseSettings):
    """Settings of this process, from ``VOXLEDGER_*`` variables; a command-line option wins over its variable."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        env_nested_delimiter="_",
        env_nested_max_split=1,  # VOXLEDGER_S3_PART_SIZE_MIB is s3.part_size_mib, not s3.part.size_mib
        env_ignore_empty=True,
        frozen=True,
        extra="ignore",
    )

    home: Path | None = Field(
        default=None, description="Home directory (store, receipts, catalog); `--home` wins; unset means `./.voxledger`."
    )
    cache_dir: Path | None = Field(
        default=None,
        description=(
            "Cache shared by this user's homes: the migrated Prefect database a new home's server starts from "
            "(one per Prefect version, checked by digest before use). Unset means `$XDG_CACHE_HOME/voxledger`, or `~/.cache/voxledger`."
        ),
    )
    read_only: bool = Field(
        default=False,
        description="Treat the home as read-only whatever its permissions say (root can write anything): reads work, recording is refused.",
    )
    sync: bool = Field(
        default=False,
        description="Work against the shared store: each stage flow pulls before and pushes after (`deploy --shared-store` sets it).",
    )
    pulled_receipts: Literal["recheck", "trust"] = Field(
        default="recheck",
        description=(
            "recheck: a receipt pulled from the shared store is indexed only after its consistency checks pass and every object "
            "it names hashes right (a damaged local copy is fetched again); a refused one is reported, one line each, and not "
            "indexed. trust: index what hashes to its id and validates (consistency is still checked when it is served and "
            "before an alias moves)."
        ),
    )
    prefect: Literal["home", "ephemeral"] = Field(
        default="home",
        description=(
            "home: one long-lived Prefect server per home; ephemeral: Prefect's temporary in-process server per command. "
            "`PREFECT_API_URL`, when set, wins over both."
        ),
    )
    runner: bool = Field(
        default=True,
        description=(
            "Run each flow of a command in the home's resident runner (Prefect and the flow's modules imported once; "
            "see docs/ARCHITECTURE.md); false runs every flow in the command's own process."
        ),
    )
    reload_timeout_s: float = Field(
        default=1800.0,
        gt=0,
        le=86_400,
        description=(
            "`package build` reloads the package in a fresh process and stops that reload after this long (a real model on a "
            "loaded CPU can take many minutes; the build then fails, naming this setting)."
        ),
    )
    query_timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        description="`voxledger query` stops a query that runs longer than this (it holds the catalog's lock meanwhile).",
    )
    query_memory_mib: int = Field(default=1024, ge=64, description="Memory a `voxledger query` may use before DuckDB refuses it.")
    query_max_rows: int = Field(default=100_000, ge=1, description="Rows a `voxledger query` may return; more is refused (add LIMIT).")
    test_commit_delay_s: float = Field(
        default=0.0,
        ge=0,
        le=600,
        description=(
            "Tests only: seconds `ratings aggregate` waits before taking the catalog lock, after its accept decision and again before "
            "writing its aggregate receipt (lock held; each wait announced on stderr, ended early by SIGUSR1 on Linux), so a test can "
            "race a second aggregation against it or kill it there. Leave unset."
        ),
    )
    reproduce_threads: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Set by `voxledger reproduce --threads` for its re-run only: torch intra-op threads every stage uses instead of its "
            "plan's or the default, to mimic a machine with another core count (recorded in the reproduction receipt). Leave unset."
        ),
    )
    test_unseeded_init: bool = Field(
        default=False,
        description=(
            "Tests only: a full-mode tiny training initialises its weights from an unseeded generator, a hidden nondeterminism "
            "that `voxledger reproduce` must catch (tests/flows/test_reproduce.py). Leave unset."
        ),
    )
    s3: S3Settings = Field(default=S3Settings(), description=S3Settings.__doc__)
    cosyvoice: CosyVoiceSettings = Field(default=CosyVoiceSettings(), description=CosyVoiceSettings.__doc__)
    bench: BenchSettings = Field(default=BenchSettings(), description=BenchSettings.__doc__)


GROUPS: dict[str, type[BaseModel]] = {"s3": S3Settings, "cosyvoice": CosyVoiceSettings, "bench": BenchSettings}


class SettingField(NamedTuple):
    """One variable: its name, the group it belongs to ("" for the top level) and its field."""

    env: str
    group: str
    name: str
    info: FieldInfo


def env_name(*path: str | int) -> str:
    """The variable of a field path: ``env_name("s3", "workers") == "VOXLEDGER_S3_WORKERS"``."""
    return PREFIX + "_".join(map(str, path)).upper()


def setting_fields() -> Iterator[SettingField]:
    """Every variable in model order, top-level ones first."""
    for name, info in VoxledgerSettings.model_fields.items():
        if name not in GROUPS:
            yield SettingField(env_name(name), "", name, info)
    for group, model in GROUPS.items():
        for name, info in model.model_fields.items():
            yield SettingField(env_name(group, name), group, name, info)


def load_settings() -> VoxledgerSettings:
    """Settings from this process's environment, read now (tests that change a variable see it).

    Raises:
        SettingsError: one line naming every bad variable, its value and what it should be.
    """
    try:
        return VoxledgerSettings()
    except ValidationError as exc:
        raise SettingsError("; ".join(_problem(e) for e in exc.errors()) + " (see docs/settings.md)") from None
    except SourceError as exc:  # a whole group set as one variable (VOXLEDGER_S3=...) that is not JSON
        found = re.search(r'field "(\w+)"', str(exc))
        name = env_name(found.group(1)) if found else PREFIX + "*"
        raise SettingsError(
            f"{name}={os.environ.get(name)!r} is not a JSON object of its group's fields; "
            f"unset it and set the single {name}_* variables instead (see docs/settings.md)"
        ) from None


def _problem(error: Mapping[str, Any]) -> str:
    name = env_name(*error["loc"])
    info = _field_at(error["loc"])
    if info is None:
        return f"{name}={error.get('input')!r}: {error['msg']}"
    if error.get("type") == "value_error":  # a field's own validator says what is wrong in its words
        return f"{name}: {str(error['msg']).removeprefix('Value error, ')}; fix it or unset it (default: {default_text(info)})"
    return f"{name}={error.get('input')!r} is not {expected(info)}; fix it or unset it (default: {default_text(info)})"


def _field_at(loc: tuple[str | int, ...]) -> FieldInfo | None:
    if len(loc) == 1:
        return VoxledgerSettings.model_fields.get(str(loc[0]))
    if len(loc) == 2 and loc[0] in GROUPS:
        return GROUPS[str(loc[0])].model_fields.get(str(loc[1]))
    return None


def expected(info: FieldInfo) -> str:
    """What a field's variable accepts, in words (``a whole number of at least 1``)."""
    if isinstance(info.json_schema_extra, dict) and "accepts" in info.json_schema_extra:
        return str(info.json_schema_extra["accepts"])
    kind = info.annotation
    if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None: describe X
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if typing.get_origin(kind) is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(kind)))
    if kind is bool:
        return "a yes/no value (1/0, true/false, yes/no, on/off)"
    if kind is int:
        floors = [m.ge for m in info.metadata if isinstance(m, annotated_types.Ge)]
        return "a whole number" + (f" of at least {floors[0]}" if floors else "")
    if kind is Path:
        return "a path"
    patterns = [m.pattern for m in info.metadata if getattr(m, "pattern", None)]
    return f"text matching {patterns[0]}" if patterns else "text"


def default_text(info: FieldInfo) -> str:
    """A field's default as the docs show it: ``16``, ``true``, ``(empty)`` or ``(unset)``."""
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if value != "" else "(empty)"
