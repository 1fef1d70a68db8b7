"""Check a CosyVoice checkout, a model folder and the Python environment against the upstream manifest.

`check_environment` is a pure check (it imports nothing from the checkout and writes nothing):
missing files, source signatures that differ from the manifest's commit, the dtype the Qwen2
config declares, missing third-party modules of upstream's import set, a set ``onnx_path``, and
every known incompatibility of the installed torch / transformers / torchaudio / torchcodec with
upstream's code, each with its fix. Findings have a severity:

- ``error``: training or synthesis would fail; fix it first.
- ``warning``: it may work, but it differs from what the backend was checked against.
- ``handled``: upstream would break here, and the backend applies its own fix (`compat.PATCHES`);
  upstream's own scripts run in this environment would still break.

A separate interpreter (``--python``, ``VOXLEDGER_COSYVOICE_PYTHON``) is asked for its versions
only; running upstream through it is not implemented (see docs/cosyvoice3.md).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Literal

from packaging.version import InvalidVersion, Version

from voxledger.schemas.base import Frozen
from voxledger.tasks.backends.cosyvoice3 import manifest, upstream
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config

Severity = Literal["error", "warning", "handled"]
PACKAGES = ("torch", "transformers", "torchaudio", "torchcodec")
_VERSIONS_SCRIPT = (
    "import importlib.metadata as m, json, sys\n"
    "def v(n):\n    try:\n        return m.version(n)\n    except m.PackageNotFoundError:\n        return None\n"
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], **{n: v(n) for n in sys.argv[1:]}}))"
)


class EnvFinding(Frozen):
    """One problem or known incompatibility, with what to do about it."""

    id: str
    severity: Severity
    message: str
    fix: str


class EnvironmentReport(Frozen):
    """Everything the preflight found, and the versions it found it against."""

    manifest_commit: str
    versions: dict[str, str | None]
    interpreter: dict[str, str | None] | None
    findings: tuple[EnvFinding, ...]

    @property
    def errors(self) -> list[EnvFinding]:
        return [f for f in self.findings if f.severity == "error"]


def installed_versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Distribution versions in this environment (None when not installed)."""
    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def interpreter_versions(python: Path) -> dict[str, str | None]:
    """Python and package versions of another interpreter (it is run once with ``-c``).

    Raises:
        OSError / subprocess.SubprocessError / ValueError: it cannot be run or prints no JSON.
    """
    out = subprocess.run([str(python), "-c", _VERSIONS_SCRIPT, *PACKAGES], capture_output=True, text=True, timeout=60, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _at_least(version: str | None, bound: str | None) -> bool:
    if version is None or bound is None:
        return bound is None
    try:
        return Version(version.split("+")[0]) >= Version(bound)
    except InvalidVersion:
        return True  # an unparsable version: report the incompatibility rather than hide it


def _files(config: CosyVoice3Config) -> list[EnvFinding]:
    found = [EnvFinding(id="missing-file", severity="error", message=m, fix="see the message") for m in upstream.missing_files(config)]
    # (missing_files also reports a set onnx_path: upstream's online-feature switch)
    if config.checkout_dir.is_dir():
        found += [
            EnvFinding(
                id="source-drift",
                severity="warning",
                message=m,
                fix=(
                    f"use upstream commit {manifest.load_manifest().upstream['commit']}, or re-read the manifest's facts "
                    "from your commit before trusting the backend's fixes on it"
                ),
            )
            for m in manifest.check_sources(config.checkout_dir)
        ]
    return found


def _weights(config: CosyVoice3Config) -> list[EnvFinding]:
    m = manifest.load_manifest()
    qwen = config.model_dir / upstream.TOKENIZER_DIR
    expected = str(m.model_folder["weight_dtypes"][f"{upstream.TOKENIZER_DIR}/model.safetensors"])  # type: ignore[index]
    declared = upstream.qwen_config_dtype(qwen)
    if declared is not None and declared != expected:
        return [
            EnvFinding(
                id="qwen-dtype",
                severity="warning",
                message=f"{qwen / 'config.json'} declares dtype {declared}; the released CosyVoice-BlankEN is {expected}",
                fix="check that this is the Fun-CosyVoice3-0.5B model folder",
            )
        ]
    return []


def _imports() -> list[EnvFinding]:
    m = manifest.load_manifest()
    why: dict[str, str] = m.imports["why"]  # type: ignore[assignment]
    pip: dict[str, str] = m.imports["pip_names"]  # type: ignore[assignment]
    modules: list[str] = m.imports["python_modules"]  # type: ignore[assignment]
    return [
        EnvFinding(
            id="missing-module",
            severity="error",
            message=f"module {name} is not installed ({why.get(name, 'upstream import')})",
            fix=f"pip install {pip.get(name, name)}",
        )
        for name in modules
        if importlib.util.find_spec(name) is None
    ]


def _incompatibilities(versions: dict[str, str | None]) -> list[EnvFinding]:
    found = []
    for inc in manifest.load_manifest().incompatibilities:
        if inc.package is not None and not _at_least(versions.get(inc.package), inc.from_version):
            continue
        if inc.unless_installed is not None and versions.get(inc.unless_installed) is not None:
            continue
        installed = f" ({inc.package} {versions.get(inc.package)} installed)" if inc.package else ""
        found.append(EnvFinding(id=inc.id, severity="handled", message=f"{inc.where}: {inc.symptom}{installed}", fix=inc.fix))
    return found


def _interpreter(python: Path) -> tuple[dict[str, str | None] | None, list[EnvFinding]]:
    not_done = EnvFinding(
        id="interpreter-not-implemented",
        severity="error",
        message=(
            f"running upstream through a separate interpreter ({python}) is not implemented; the backend refuses "
            "to train or synthesise while one is configured"
        ),
        fix=(
            "unset VOXLEDGER_COSYVOICE_PYTHON and run in this environment (the backend's fixes cover the known "
            "incompatibilities), or run upstream's own scripts with that interpreter outside voxledger"
        ),
    )
    try:
        versions = interpreter_versions(python)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return None, [
            not_done,
            EnvFinding(
                id="interpreter-unusable",
                severity="error",
                message=f"cannot run {python}: {exc}",
                fix="point --python / VOXLEDGER_COSYVOICE_PYTHON at a Python executable",
            ),
        ]
    pins = manifest.load_manifest().upstream_pins
    off = {k: (versions.get(k), v) for k, v in pins.items() if (versions.get(k) or "").split("+")[0] != v}
    drift = [
        EnvFinding(
            id="interpreter-pins",
            severity="warning",
            message=f"{python}: {k} {got} where upstream pins {want}",
            fix=f"install {k}=={want} in that interpreter",
        )
        for k, (got, want) in sorted(off.items())
    ]
    return versions, [not_done, *drift]


def check_environment(config: CosyVoice3Config, python: Path | None = None) -> EnvironmentReport:
    """Every finding for ``config``'s checkout and model folder, this environment and ``python``."""
    versions = {"python": ".".join(map(str, sys.version_info[:3])), **installed_versions()}
    findings = [*_files(config), *_weights(config), *_imports(), *_incompatibilities(versions)]
    interpreter = None
    if python is not None:
        interpreter, extra = _interpreter(python)
        findings += extra
    return EnvironmentReport(
        manifest_commit=manifest.load_manifest().upstream["commit"], versions=versions, interpreter=interpreter, findings=tuple(findings)
    )
