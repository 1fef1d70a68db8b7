"""The one error hierarchy. Messages name the id, the value, the bound and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError


class VoxledgerError(Exception):
    """Base of every error voxledger raises on purpose; the CLI turns it into a clean exit.

    ``receipt_id`` names the receipt that records the failure, when one was written.
    """

    def __init__(self, *args: object, receipt_id: str | None = None) -> None:
        super().__init__(*args)
        self.receipt_id = receipt_id

    def __reduce__(self) -> tuple[Any, ...]:
        # every subclass travels whole (a flow run in another process raises it in the command's):
        # its class, its args and its attributes, whatever its constructor takes
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


def _rebuild(cls: type[VoxledgerError], args: tuple[object, ...], attributes: dict[str, Any]) -> VoxledgerError:
    exc = cls.__new__(cls)
    Exception.__init__(exc, *args)
    exc.__dict__.update(attributes)
    return exc


class SettingsError(VoxledgerError):
    """A ``VOXLEDGER_*`` environment variable holds a value of the wrong type or out of bounds."""


class PlanError(VoxledgerError):
    """A plan file is missing, unreadable or fails validation."""


class ReceiptError(VoxledgerError):
    """A receipt is invalid, unknown or inconsistent with the store."""


class DigestMismatchError(VoxledgerError):
    """Bytes read back do not hash to the digest they were stored or referenced under."""


class BlobMissingError(VoxledgerError):
    """A referenced object is not in the store."""


class UnsafePathError(VoxledgerError):
    """A path escapes its root, is absolute, or is a link or special file where a file was expected."""


class CatalogError(VoxledgerError):
    """The DuckDB catalog is locked, out of date or inconsistent."""


class CatalogLockedError(CatalogError):
    """Another process held the catalog for longer than the caller's ``--lock-timeout``."""


class HomeNotFoundError(VoxledgerError):
    """A command that only reads a home was pointed at a folder that does not exist (a mistyped
    ``--home``); it is refused rather than created empty."""


class HomeBusyError(VoxledgerError):
    """Another pipeline run holds this home: overlapping runs would race on the same stages."""


class CorpusError(VoxledgerError):
    """A corpus or manifest cannot be read; the message names the file and line."""


class InterruptedRunError(VoxledgerError):
    """The user interrupted a run (SIGINT / Ctrl-C); the message names the stage and the failed receipt recorded."""


class AuditFailedError(VoxledgerError):
    """An audit verdict is a failure (for example split leakage); training must not start."""


class TrainingError(VoxledgerError):
    """Training cannot start or resume (changed inputs, corrupt checkpoint, bad plan)."""


class EvaluationError(VoxledgerError):
    """An evaluation cannot proceed or compare (unknown candidate, mixed provenance, bad model)."""


class BackendCapabilityError(VoxledgerError):
    """A backend cannot do what a stage asks of it yet; the message names the backend and what is missing."""


class EquivalenceError(VoxledgerError):
    """Stage dumps cannot be compared (shape, dtype, NaN/Inf, truncated file)."""


class PacketError(VoxledgerError):
    """A listening packet or a rater submission is invalid, foreign, forged or incomplete."""


class RequestRefusedError(PacketError):
    """A request to the listening-test server is refused; ``status`` and ``code`` say how to answer it."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class GateFailedError(VoxledgerError):
    """A promotion gate rejected a candidate."""


class SynthesisError(VoxledgerError):
    """A speech synthesizer failed (unknown voice, library error, no audio produced)."""


class UpstreamError(VoxledgerError):
    """Third-party model code or files a backend drives (a user's checkout, its dependencies, its model
    folder) failed to import or load; the message names the module or file and the fix."""


class SignatureError(VoxledgerError):
    """A signed attestation does not verify with the given key, or signs something else."""


class ReproductionError(VoxledgerError):
    """A receipt cannot be re-run here: unknown or unsupported kind, a missing or damaged input, a changed corpus, or code drift."""


class ExportError(VoxledgerError):
    """An export into another tool's store cannot run: its optional extra is missing, or the store refused a write."""


def error_path(error: Mapping[str, Any], sep: str = ".", root: str = "<top>") -> str:
    """Where one pydantic error sits, as ``criteria.1.weight`` (``root`` for the document itself)."""
    return sep.join(map(str, error["loc"])) or root


def validation_lines(
    exc: ValidationError, *, limit: int | None = None, sep: str = ".", root: str = "<top>", show_input: bool = False
) -> list[str]:
    """One ``path: message`` line per problem of ``exc``, in pydantic's order.

    Args:
        limit: keep the first ``limit`` lines and end with one saying how many more there were.
        sep / root: path separator, and the name of the whole document (an empty path).
        show_input: append ``(got <value>)`` to each line.
    """
    errors = exc.errors()
    shown = errors if limit is None else errors[:limit]
    lines = [
        f"{error_path(e, sep, root)}: {_cut(e['msg'])}" + (f" (got {_cut(repr(e.get('input')))})" if show_input else "") for e in shown
    ]
    if len(errors) > len(shown):
        lines.append(f"... and {len(errors) - len(shown)} more")
    return lines


def _cut(text: str, limit: int = 120) -> str:
    """At most ``limit`` characters of a value an error quotes (a 20 MB field is not echoed)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"
