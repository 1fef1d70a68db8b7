"""Building blocks shared by every receipt kind: artifacts, inputs, environment, producer."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Role = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_.:-]{0,63}$")]
MediaType = Annotated[str, StringConstraints(pattern=r"^[a-z]+/[A-Za-z0-9.+_-]+$")]


class Frozen(BaseModel):
    """Immutable model that rejects unknown fields (so a typo is an error, not a silent drop)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Artifact(Frozen):
    """An output of a step: bytes in the store, named by the role they play."""

    role: Role
    sha256: Sha256
    size_bytes: int = Field(ge=0)
    media_type: MediaType


class InputRef(Frozen):
    """Something a step read: an artifact (by content digest) or a parent receipt (by id)."""

    role: Role
    sha256: Sha256
    ref: Literal["artifact", "receipt"]


class CodeIdentity(Frozen):
    """Which code ran: digest of the package source tree, plus git state when available."""

    source_sha256: Sha256
    git_commit: str | None = None
    git_dirty: bool | None = None


class Environment(Frozen):
    """What the step ran on. Host names and absolute paths are deliberately absent."""

    python: str
    platform: str
    packages: dict[str, str]
    torch: str | None = None
    cuda: str | None = None
    code: CodeIdentity
    device: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="the torch device the step computed on (cpu, cuda:0), where its backend chooses one (cosyvoice3); "
        "absent for a CPU-only backend and for steps without a model",
    )


class Producer(Frozen):
    """The flow and task that wrote the receipt, and the Prefect runs they were (when run under Prefect).

    The run ids join a receipt to Prefect's run history (``prefect flow-run inspect``); they are
    left out of the JSON when absent, so receipts written outside Prefect keep their old shape.
    """

    flow: str
    task: str
    flow_run_id: str | None = Field(default=None, exclude_if=lambda v: v is None, description="Prefect flow run that wrote it")
    task_run_id: str | None = Field(default=None, exclude_if=lambda v: v is None, description="Prefect task run that wrote it")


class ReceiptBase(Frozen):
    """Fields every receipt kind carries. Subclasses add a literal ``kind`` and typed fields.

    The receipt id is the sha256 of the RFC 8785 bytes of the whole document, timestamps included:
    a receipt records one event. Work identity (what a cache hit must match) is ``cache_key``,
    which never includes timestamps or hosts.
    """

    schema_version: Literal[1] = 1
    producer: Producer
    subjects: tuple[Artifact, ...] = ()
    inputs: tuple[InputRef, ...] = ()
    environment: Environment
    cache_key: Sha256 | None = None
    started_at: AwareDatetime
    finished_at: AwareDatetime
    status: Literal["succeeded", "failed"] = "succeeded"
    error: str | None = None

    def subject(self, role: str) -> Artifact:
        """Return the output artifact with ``role``; KeyError names the roles present."""
        for artifact in self.subjects:
            if artifact.role == role:
                return artifact
        raise KeyError(f"no subject with role {role!r}; present: {[a.role for a in self.subjects]}")

    def input(self, role: str) -> InputRef:
        """Return the input with ``role``; KeyError names the roles present."""
        for ref in self.inputs:
            if ref.role == role:
                return ref
        raise KeyError(f"no input with role {role!r}; present: {[r.role for r in self.inputs]}")


def utc_now() -> datetime:
    """Current time, timezone-aware UTC (receipts refuse naive datetimes)."""

    return datetime.now(UTC)
