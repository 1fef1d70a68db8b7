"""Frozen plans: YAML files validated into frozen models, identified by canonical digest.

A plan's identity is the sha256 of the validated model's RFC 8785 JSON, so comments, key order
and spelled-out defaults never change it. Registering a plan stores that JSON and writes a plan
receipt; a plan file whose content changed after it was registered is refused (a change is a
new file).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from voxledger.schemas.base import utc_now
from voxledger.schemas.canonical import canonical_bytes, canonical_digest
from voxledger.schemas.core import PlanParameters, PlanReceipt
from voxledger.schemas.errors import PlanError, validation_lines
from voxledger.schemas.limits import MAX_PLAN_BYTES, load_yaml
from voxledger.schemas.promotion import PromotionPolicy
from voxledger.stores.home import Home
from voxledger.stores.queries import registered_plans
from voxledger.tasks.receipting import artifact, build_receipt

M = TypeVar("M", bound=BaseModel)
PLAN_MEDIA_TYPE = "application/vnd.voxledger.plan+json"


def _gate_rule_problems(policy: PromotionPolicy) -> list[str]:
    from voxledger.schemas.evaluation import INVALID_RATE
    from voxledger.tasks.metrics.registry import rule_metric_ids

    valid = (*rule_metric_ids(), INVALID_RATE)  # invalid_rate is read from the generation rows, not an extractor
    return [
        f"rules.{i}.metric: {r.metric!r} is not a registered metric id (valid: {', '.join(valid)})"
        for i, r in enumerate(policy.rules)
        if r.metric not in valid
    ]


# Checks against registries that live in tasks, which schemas/ cannot import: model -> problems.
REGISTRY_CHECKS: dict[type[BaseModel], Callable[[Any], list[str]]] = {PromotionPolicy: _gate_rule_problems}


def check_plan(plan: BaseModel, source: str) -> None:
    """Check what the schema cannot: names that refer to registries in tasks (a gate rule's metric id).

    Raises:
        PlanError: naming ``source``, each bad field by path, the bad value and the valid ones.
    """
    check = REGISTRY_CHECKS.get(type(plan))
    problems = check(plan) if check is not None else []
    if problems:
        raise PlanError(f"{source}: {len(problems)} problem(s):\n  " + "\n  ".join(problems))


def read_plan_text(path: Path, what: str = "plan file") -> str:
    """The text of a plan or policy file: a regular file (never a device, FIFO or socket, which could stream forever
    or block), read to at most `MAX_PLAN_BYTES`, UTF-8.

    Raises:
        PlanError: not a regular file, too large, or not UTF-8 (naming the file and the fix); FileNotFoundError and
            IsADirectoryError pass through for the caller's message.
    """
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(str(path))
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a file"
        )
        raise PlanError(f"{what} {path} is {kind}, not a regular file; give the path of the .yaml file itself")
    with open(path, "rb") as f:
        data = f.read(MAX_PLAN_BYTES + 1)
    if len(data) > MAX_PLAN_BYTES:
        raise PlanError(f"{what} {path} holds more than the {MAX_PLAN_BYTES:,} bytes a plan may hold; is it the right file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError(f"{what} {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from exc


def load_plan(path: Path, model: type[M]) -> M:
    """Read a YAML plan and validate it (schema, then `check_plan`), listing every problem with its field path."""
    try:
        raw = load_yaml(read_plan_text(path), f"plan file {path}", PlanError)
    except FileNotFoundError as exc:
        raise PlanError(f"plan file {path} does not exist") from exc
    except IsADirectoryError as exc:
        raise PlanError(f"plan file {path} is a directory; give the .yaml file") from exc
    except UnicodeDecodeError as exc:
        raise PlanError(f"plan file {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from exc
    if not isinstance(raw, dict):
        raise PlanError(f"plan file {path} must hold a mapping at the top level, got {type(raw).__name__}")
    try:
        plan = model.model_validate(raw)
    except ValidationError as exc:
        lines = validation_lines(exc, show_input=True)
        raise PlanError(f"plan file {path}: {len(lines)} problem(s):\n  " + "\n  ".join(lines)) from exc
    check_plan(plan, f"plan file {path}")
    return plan


def plan_digest(plan: BaseModel) -> str:
    """The plan's identity."""
    return canonical_digest(plan)


class PlanRef(BaseModel):
    """A plan read and validated once: its file name, its validated JSON document and its digest.

    The pipeline hands each stage one of these instead of a path, and a stage flow given a path
    turns it into one first, so the plan a stage runs is the plan whose digest is recorded, even
    if the file is edited while a run is in progress. It travels as a flow parameter (JSON) to a
    worker; ``validated`` re-checks the digest on arrival.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source_name: str
    kind: str
    document: dict[str, Any]
    sha256: str

    @classmethod
    def of(cls, plan: BaseModel, source_name: str) -> PlanRef:
        """The reference of a validated plan model."""
        document = plan.model_dump(mode="json")
        return cls(
            source_name=source_name, kind=str(getattr(plan, "kind", type(plan).__name__)), document=document, sha256=plan_digest(plan)
        )

    @classmethod
    def load(cls, path: Path, model: type[BaseModel]) -> PlanRef:
        """Read, validate and reference a plan file (``load_plan``'s errors)."""
        return cls.of(load_plan(path, model), path.name)

    @classmethod
    def coerce(cls, plan: PlanRef | str | Path, model: type[BaseModel]) -> PlanRef:
        """A reference as given, or read from a plan file path (a CLI call or a deployment's parameter)."""
        return plan if isinstance(plan, PlanRef) else cls.load(Path(plan), model)

    def validated(self, model: type[M]) -> M:
        """The plan as ``model``; PlanError when it does not validate or its digest is not ``sha256``."""
        try:
            plan = model.model_validate(self.document)
        except ValidationError as exc:
            lines = validation_lines(exc)
            raise PlanError(f"plan {self.source_name} ({self.kind}): {len(lines)} problem(s):\n  " + "\n  ".join(lines)) from exc
        got = plan_digest(plan)
        if got != self.sha256:
            raise PlanError(
                f"plan {self.source_name} ({self.kind}) arrived as {got}, not the {self.sha256} it was sent as; "
                "re-run the pipeline (a plan reference must not be edited)"
            )
        return plan


def register_plan(home: Home, plan: BaseModel, *, source_name: str, flow: str = "cli") -> tuple[str, str]:
    """Store a plan and record its receipt once; return (plan receipt id, plan digest).

    Registration is keyed by content: the digest is the plan's identity and ``source_name`` (the
    file name) only a label. The same content under the same label is registered once; an edited
    file, or another corpus's ``audit.yaml``, is simply another plan, never a collision. What ran is
    what the receipts name by digest, whatever the file says later.
    """
    digest = plan_digest(plan)
    plan_kind = str(getattr(plan, "kind", type(plan).__name__))
    for rid, registered in registered_plans(home.catalog, source_name, plan_kind):
        if registered == digest:
            # the plan's bytes are in hand: a damaged stored copy is healed, never re-used
            home.blobs.put_bytes(canonical_bytes(plan))
            return rid, digest
    started = utc_now()
    home.blobs.put_bytes(canonical_bytes(plan))
    receipt = build_receipt(
        PlanReceipt,
        flow=flow,
        task="register_plan",
        started_at=started,
        subjects=[artifact(home.blobs, "plan", digest, PLAN_MEDIA_TYPE)],
        key=digest,
        parameters=PlanParameters(plan_kind=plan_kind, plan_sha256=digest, source_name=source_name),
    )
    return home.record(receipt), digest
