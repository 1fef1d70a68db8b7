"""Metric extractors: pure functions and loaded models, no Prefect and no store.

Modules: ``normalise`` (closed normaliser registry), ``textmetrics`` (WER/CER), ``asr``
(Whisper tiny.en), ``speaker`` (ECAPA), ``mos`` (DNSMOS), ``validity`` (signal checks) and
``content_gate`` (does the transcript say the text and nothing else). Every model file is
hashed and compared with its spec before use.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from voxledger.schemas.errors import EvaluationError
from voxledger.stores.hashing import sha256_file


def verify_model_file(path: Path, expected_sha256: str, what: str) -> None:
    """Check that a model file exists and hashes to the digest its spec names.

    Raises:
        EvaluationError: the file is missing, or its sha256 differs (both digests are named).
    """
    if not path.is_file():
        raise EvaluationError(f"{what}: {path.name} not found in {path.parent}; reinstall its package")
    actual = sha256_file(path)
    if actual != expected_sha256:
        raise EvaluationError(
            f"{what}: {path.name} has sha256 {actual}, spec expects {expected_sha256}; "
            "install the pinned package version or score with a spec that names this model"
        )


@cache  # installed versions do not change while a process runs; failures are not cached
def verify_engine(pin: str) -> None:
    """Check that the installed distribution matches a spec's ``name==version`` engine pin.

    Raises:
        EvaluationError: the distribution is missing or another version is installed, so the
            spec's numbers could not be reproduced here.
    """
    name, _, wanted = pin.partition("==")
    try:
        installed = version(name)
    except PackageNotFoundError:
        raise EvaluationError(f"spec needs {pin} but {name} is not installed") from None
    if installed != wanted:
        raise EvaluationError(
            f"spec needs {pin} but {name}=={installed} is installed; install {pin} or score with a spec that names the installed version"
        )


# the shipped extractors register themselves in ``registry`` on import: whoever reads the
# registry (evaluation, reports, gates) sees them, and ``registry`` itself imports none of them
from voxledger.tasks.metrics import builtin as _builtin  # noqa: E402,F401
