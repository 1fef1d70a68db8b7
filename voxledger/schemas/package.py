"""Adapter packages: the manifest inside a package tar, and the ``package`` receipt.

A package is a deterministic, uncompressed tar holding the adapter deliverables, the receipt
documents it is bound to (each stored under its own id, so every one re-verifies by hashing) and
``manifest.json``: canonical JSON that names every other member with its sha256 and binds the
base model, data, plan, inference settings and code identity. The manifest carries no timestamps
or host details, so equal inputs give an equal package digest. Checks that run while packaging
(fresh-process reload, merged-export equivalence, publication) live in the receipt, not the tar.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue

from voxledger.schemas.base import CodeIdentity, Frozen, ReceiptBase, Sha256
from voxledger.schemas.equivalence import Band
from voxledger.schemas.training import BackendName

PACKAGE_FORMAT = "voxledger.package/v1"
PACKAGE_MEDIA_TYPE = "application/vnd.voxledger.package+tar"
MANIFEST_NAME = "manifest.json"
MemberRole = Literal["adapter_weights", "adapter_config", "voice_prompt", "receipt"]
"""``voice_prompt``: the prompt audio a zero-shot backend speaks from (cosyvoice3 bundles one with its adapter)."""


class PackageMember(Frozen):
    """One file of the package other than the manifest."""

    path: str = Field(min_length=1, max_length=255)
    role: MemberRole
    sha256: Sha256
    size_bytes: int = Field(ge=0)


class ComponentDigests(Frozen):
    """Digests of the models the adapter runs on; ``note`` says what covers an absent one."""

    base_model_sha256: Sha256
    tokenizer_sha256: Sha256 | None = None
    vocoder_sha256: Sha256 | None = None
    frontend_sha256: Sha256 | None = None
    """Digest of what turns text and prompt audio into model inputs, where the backend has one apart from the base."""
    backend_identity_sha256: Sha256 | None = None
    """The training run's backend identity (upstream sources, model files, text front end): the base the adapter runs on
    when it is not a stored tree (``base_model_sha256`` is then a file digest, not a tree)."""
    note: str


class PackageBinding(Frozen):
    """The receipts and digests the adapter came from (every receipt is also a member)."""

    training_run: Sha256
    checkpoint_receipt: Sha256
    checkpoint_tree_sha256: Sha256
    audit_receipt: Sha256
    evaluation_receipts: tuple[Sha256, ...] = ()
    promotion_receipt: Sha256 | None = None
    line: str | None = Field(
        default=None, exclude_if=lambda v: v is None, description="the model line (VOICE/BACKEND) the adapter belongs to"
    )
    plan_sha256: Sha256
    data_manifest_sha256: Sha256
    audio_tree_sha256: Sha256
    features_sha256: Sha256


class InferenceSettings(Frozen):
    """How the packaged adapter is meant to be run."""

    runtime: Literal["adapter"] = "adapter"
    speaker: str = Field(min_length=1)
    sample_rate_hz: int = Field(gt=0)
    settings: dict[str, JsonValue] = Field(default_factory=dict)
    tools: dict[str, str] = Field(default_factory=dict)


class PackageManifest(Frozen):
    """``manifest.json`` of a package; members are sorted by path."""

    format: Literal["voxledger.package/v1"] = "voxledger.package/v1"
    name: str = Field(min_length=1, max_length=120, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    backend: BackendName
    components: ComponentDigests
    binding: PackageBinding
    inference: InferenceSettings
    code: CodeIdentity
    members: tuple[PackageMember, ...] = Field(min_length=1)


class ReloadCheck(Frozen):
    """A fresh process loaded base + package and synthesized the probe; its pcm vs ours."""

    probe_text: str
    probe_seed: int
    speaker: str
    threads: int = Field(ge=1)
    device: str
    n_samples: int = Field(ge=0)
    bitwise_equal: bool
    max_abs_err: float = Field(ge=0)
    tolerance: float = Field(ge=0)
    passed: bool
    child_wall_s: float = Field(ge=0)


class PublishRecord(Frozen):
    """Where the package went inside the retention root (the root's own path is not recorded)."""

    name: str
    already_present: bool


class PackageParameters(Frozen):
    """What was asked for."""

    backend: BackendName
    training_run: Sha256
    checkpoint_tree_sha256: Sha256
    promotion_receipt: Sha256 | None = None
    evaluation_receipts: tuple[Sha256, ...] = ()
    probe_text: str
    probe_seed: int


class PackageResult(Frozen):
    """The package, the checks it passed (or failed) and where it was published."""

    package_sha256: Sha256
    manifest_sha256: Sha256
    size_bytes: int = Field(ge=0)
    n_members: int = Field(ge=1)
    reload: ReloadCheck
    merged_tree_sha256: Sha256 | None = None
    equivalence_receipt: Sha256 | None = None
    equivalence_band: Band | None = None
    stage_rel: dict[str, float] = Field(default_factory=dict)
    published: PublishRecord | None = None
    build_wall_s: float = Field(ge=0)


class PackageReceipt(ReceiptBase):
    """An adapter package was built and checked; subjects are the tar and the merged export tree."""

    kind: Literal["package"] = "package"
    parameters: PackageParameters
    result: PackageResult
