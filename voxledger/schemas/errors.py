"""The one error hierarchy. Messages name the id, the value, the bound and the fix."""

from __future__ import annotations


class VoxledgerError(Exception):
    """Base of every error voxledger raises on purpose; the CLI turns it into a clean exit.

    ``receipt_id`` names the receipt that records the failure, when one was written.
    """

    def __init__(self, *args: object, receipt_id: str | None = None) -> None:
        super().__init__(*args)
        self.receipt_id = receipt_id


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


class CorpusError(VoxledgerError):
    """A corpus or manifest cannot be read; the message names the file and line."""


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


class GateFailedError(VoxledgerError):
    """A promotion gate rejected a candidate."""


class SynthesisError(VoxledgerError):
    """A speech synthesizer failed (unknown voice, library error, no audio produced)."""


class SignatureError(VoxledgerError):
    """A signed attestation does not verify with the given key, or signs something else."""
