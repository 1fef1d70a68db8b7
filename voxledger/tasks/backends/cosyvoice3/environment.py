"""Check a CosyVoice checkout, a model folder and the Python environment against the upstream manifest.

`check_environment` writes nothing: missing files, source signatures that differ from the
manifest's commit, the dtype the Qwen2 config declares, the two ONNX graphs' inputs and outputs
against what upstream feeds them, a set ``onnx_path``, and every known incompatibility of the
installed torch / transformers / torchaudio / torchcodec with upstream's code, each with its fix.
The import set is checked by importing it: `probe.py` runs in a child of this interpreter (the
one that runs upstream, with this process's environment, ``PYTHONPATH`` included), imports
torch, transformers' Qwen2, peft and every third-party module upstream imports (Matcha-TTS's
``matcha.utils`` included: hydra-core, lightning, matplotlib, gdown, wget), then upstream's own
entry modules from the checkout, and reports each failure: a missing module, a triton that
breaks torch / transformers, transformers outside the tested range. Findings have a severity:

- ``error``: training or synthesis would fail; fix it first.
- ``warning``: it may work, but it differs from what the backend was checked against.
- ``handled``: upstream would break here, and the backend applies its own fix (`compat.PATCHES`);
  upstream's own scripts run in this environment would still break.

A separate interpreter (``--python``, ``VOXLEDGER_COSYVOICE_PYTHON``) is asked for its versions
only; running upstream through it is not implemented (see docs/cosyvoice3.md).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import onnxruntime
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from voxledger.schemas.base import Frozen
from voxledger.settings import load_settings
from voxledger.tasks.backends.cosyvoice3 import manifest, upstream
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config

Severity = Literal["error", "warning", "handled"]
PACKAGES = ("torch", "transformers", "torchaudio", "torchcodec")
PROBE = Path(__file__).with_name("probe.py")
CORE_MODULES = ("torch", "transformers.models.qwen2.modeling_qwen2", "peft")  # what the backend itself imports
UPSTREAM_ENTRY_MODULES = ("cosyvoice.llm.llm", "cosyvoice.tokenizer.tokenizer", "matcha.utils.audio", "cosyvoice.cli.cosyvoice")
TESTED_TRANSFORMERS = SpecifierSet(">=4.51.3,<5.25")  # upstream's pin .. this repository's pin (5.24.0)
ENV_PROBE_TIMEOUT = "VOXLEDGER_COSYVOICE_PROBE_TIMEOUT_S"
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


def _scaffold(config: CosyVoice3Config) -> list[EnvFinding]:
    from voxledger.tasks.backends.cosyvoice3.scaffold import SCAFFOLD_FILE, read_scaffold

    info = read_scaffold(config.model_dir)
    if info is None:
        return []
    layers = info.get("layers", {})
    what = (
        f"seed {info.get('seed')}, Qwen2 layers {layers.get('qwen2')}, DiT depth {layers.get('dit')}" if isinstance(layers, dict) else "?"
    )
    return [
        EnvFinding(
            id="scaffold-model",
            severity="warning",
            message=f"{config.model_dir} is a scaffold ({config.model_dir / SCAFFOLD_FILE}: random weights, {what}), "
            "written by `voxledger cosyvoice3 scaffold`: its speech is noise",
            fix="use it to check the environment and the pipeline only; train voices on the released Fun-CosyVoice3-0.5B folder",
        )
    ]


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


_PROBES: dict[tuple[str, str, str | None], dict[str, Any]] = {}  # one probe per interpreter, request and path per process


def run_probe(config: CosyVoice3Config, python: str = sys.executable) -> dict[str, Any]:
    """`probe.py`'s report from ``python`` (this process's environment; no bytecode written).

    Remembered for the life of this process per (interpreter, request, ``PYTHONPATH``): importing
    the whole set takes 10-30 s, and what is installed does not change under a running command.
    """
    m = manifest.load_manifest()
    modules: list[str] = list(m.imports["python_modules"])  # type: ignore[call-overload]
    request = {
        "modules": [*CORE_MODULES, *(x for x in modules if x not in CORE_MODULES)],
        "upstream": list(UPSTREAM_ENTRY_MODULES) if config.checkout_dir.is_dir() else [],
        "paths": [str(config.checkout_dir.resolve()), str((config.checkout_dir / "third_party" / "Matcha-TTS").resolve())],
        "distributions": list(PACKAGES),
    }
    key = (python, json.dumps(request, sort_keys=True), os.environ.get("PYTHONPATH"))
    if key in _PROBES:
        return _PROBES[key]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    limit_s = load_settings().cosyvoice.probe_timeout_s
    try:
        out = subprocess.run(
            [python, str(PROBE), json.dumps(request)], capture_output=True, text=True, timeout=limit_s, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        raise ValueError(
            f"the import probe ran past {limit_s:g} s (a loaded machine or a slow file system); raise {ENV_PROBE_TIMEOUT} and run it again"
        ) from None
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        raise ValueError(f"exit {out.returncode}: {(out.stderr.strip().splitlines() or ['no output'])[-1]}")
    report = _PROBES[key] = dict(json.loads(lines[-1]))
    return report


def _imports(probe: dict[str, Any]) -> list[EnvFinding]:
    m = manifest.load_manifest()
    why: dict[str, str] = m.imports["why"]  # type: ignore[assignment]
    found: list[EnvFinding] = []
    missing: set[str] = set()
    broken: list[str] = []
    for name, failure in probe["modules"].items():
        if failure is None:
            continue
        gone = failure["missing"]
        if gone and gone.split(".")[0] == name.split(".")[0]:
            missing.add(gone.split(".")[0])
            found.append(
                EnvFinding(
                    id="missing-module",
                    severity="error",
                    message=f"module {name} is not installed ({why.get(name, 'upstream import')})",
                    fix=upstream.install_fix(name),
                )
            )
        else:
            broken.append(f"{name} ({' <- '.join(failure['chain'])})")
    triton = probe.get("triton")
    if broken and triton is not None:
        found.append(
            EnvFinding(
                id="triton-breaks-imports",
                severity="error",
                message=(
                    f"with triton {triton['version'] or '(no metadata)'} installed at {triton['path']}, importing fails: "
                    + "; ".join(broken)
                ),
                fix=(
                    "pip uninstall -y triton (the backend does not use it; openai-whisper pulls triton 2.3.1: install whisper "
                    "with `pip install --no-deps --no-build-isolation openai-whisper==20231117`)"
                ),
            )
        )
    elif broken:
        found += [
            EnvFinding(
                id="import-error",
                severity="error",
                message=f"importing {b} fails",
                fix="reinstall that package (pip install --force-reinstall)",
            )
            for b in broken
        ]
    for name, failure in probe.get("upstream", {}).items():
        if failure is None or (failure["missing"] or "").split(".")[0] in missing or broken:
            continue  # explained by a finding above
        gone = failure["missing"]
        fix = (
            "run `git submodule update --init --recursive` in the checkout"
            if gone and gone.split(".")[0] in ("cosyvoice", "matcha")
            else (upstream.pip_fix(gone) if gone else "see the message; check the checkout's commit")
        )
        found.append(
            EnvFinding(id="upstream-import", severity="error", message=f"importing upstream's {name} fails: {failure['message']}", fix=fix)
        )
    return found


def _transformers_range(versions: dict[str, str | None]) -> list[EnvFinding]:
    have = versions.get("transformers")
    if have is None:
        return []  # reported as a missing module
    try:
        inside = Version(have.split("+")[0]) in TESTED_TRANSFORMERS
    except InvalidVersion:
        inside = False
    if inside:
        return []
    return [
        EnvFinding(
            id="transformers-version",
            severity="error",
            message=f"transformers {have} is outside the tested range {TESTED_TRANSFORMERS} (upstream pins 4.51.3, voxledger 5.24.0)",
            fix="pip install transformers==5.24.0",
        )
    ]


def _onnx(config: CosyVoice3Config) -> list[EnvFinding]:
    from voxledger.tasks.backends.cosyvoice3.features import ONNX_FIX, onnx_output_problems, onnx_signature_problems

    found = []
    for kind, path, env in (
        ("campplus", config.campplus_path, "CAMPPLUS_ONNX"),
        ("speech_tokenizer", config.speech_tokenizer_path, "SPEECH_TOKENIZER_ONNX"),
    ):
        if not path.is_file():
            continue  # a missing-file finding
        try:
            session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001  (onnxruntime's own untyped errors)
            problems = [f"{path} does not load as ONNX ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"]
        else:
            problems = onnx_signature_problems(session, kind, path) or onnx_output_problems(session, kind, path)
        found += [EnvFinding(id="onnx-signature", severity="error", message=p, fix=ONNX_FIX.format(env)) for p in problems]
    return found


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
    findings = [*_files(config), *_scaffold(config), *_weights(config), *_onnx(config)]
    try:
        probe = run_probe(config)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        probe = None
        findings.append(
            EnvFinding(
                id="probe-failed",
                severity="error",
                message=f"importing upstream's import set in {sys.executable} failed before reporting: {exc}",
                fix="run the import probe by hand to see the traceback: "
                f'{sys.executable} {PROBE} \'{{"modules": ["torch", "transformers"]}}\'',
            )
        )
    if probe is not None:
        versions: dict[str, str | None] = {"python": probe["python"], **probe["versions"]}
        findings += [*_imports(probe), *_transformers_range(versions)]
    else:
        versions = {"python": ".".join(map(str, sys.version_info[:3])), **installed_versions()}
    findings += _incompatibilities(versions)
    interpreter = None
    if python is not None:
        interpreter, extra = _interpreter(python)
        findings += extra
    return EnvironmentReport(
        manifest_commit=manifest.load_manifest().upstream["commit"], versions=versions, interpreter=interpreter, findings=tuple(findings)
    )
