"""The probe: one fixed text, one seed, synthesized from a package; and the fresh-process reload.

``probe_stages`` returns the stage arrays the equivalence core compares (``mel`` frames x bins and
``pcm`` samples). The reload check runs this module as a new Python process
(``python -m voxledger.tasks.packaging.probe``): it unpacks the package itself, checks the base
folder against the manifest's base digest, loads base + adapter and writes the stages to an
``.npz``, so nothing from the packaging process's memory can leak into the result.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from voxledger.schemas.equivalence import FLOAT_KINDS
from voxledger.schemas.errors import EquivalenceError
from voxledger.schemas.package import PackageManifest
from voxledger.schemas.training import BackendName
from voxledger.tasks.backends.base import get_backend
from voxledger.tasks.processes import die_with_parent


def probe_stages(
    backend_name: BackendName, loaded: Any, text: str, speaker: str, seed: int, settings: dict[str, Any]
) -> dict[str, np.ndarray]:
    """The float stage arrays (keyed by dump name, float32) of the probe for an already loaded model.

    The backend's split (`Backend.stage_outputs`) must end in exactly the waveform its
    ``synthesize`` returns, or the comparison would not be about what users hear. Token stages
    are left out: their effect shows in the float stages, which ``PROBE_PLAN`` (run.py) compares.

    Raises: BackendCapabilityError (the backend has no stage split), EquivalenceError (the split
    and ``synthesize`` disagree).
    """
    backend = get_backend(backend_name)
    stages = backend.synthesis_stages()
    out = backend.stage_outputs(loaded, text, speaker, seed, settings)
    wav, _ = backend.synthesize(loaded, text, speaker, seed, settings)
    if not np.array_equal(wav, out[stages[-1].name]):
        raise EquivalenceError(f"{backend_name} probe: the backend's synthesize() and its stage split disagree; the stage split is stale")
    return {s.dump: out[s.name].astype(np.float32) for s in stages if s.kind in FLOAT_KINDS}


def load_packaged(manifest: PackageManifest, base_dir: Path | None, adapter_dir: Path, runtime: str = "adapter") -> Any:
    """Load base + unpacked adapter with the backend named in the manifest."""
    return get_backend(manifest.backend).load_for_inference(base_dir, adapter_dir, runtime)


def probe_package(package: Path, base_dir: Path | None, text: str, seed: int) -> dict[str, np.ndarray]:
    """Unpack ``package`` (verified), check the base is its base model (``base_dir``, or the backend's own
    configured model when None: `Backend.check_base`), synthesize the probe."""
    from voxledger.tasks.packaging.archive import unpack_package

    with tempfile.TemporaryDirectory() as tmp:
        verified = unpack_package(package, Path(tmp) / "pkg")
        manifest = verified.manifest
        get_backend(manifest.backend).check_base(manifest.components, base_dir)
        loaded = load_packaged(manifest, base_dir, Path(tmp) / "pkg" / "adapter")
        settings = dict(manifest.inference.settings)
        return probe_stages(manifest.backend, loaded, text, manifest.inference.speaker, seed, settings)


NO_BASE = "-"
"""The reload child's base folder argument when the package's base is the backend's own configured model."""


class FreshReload:
    """``probe_package`` in a new interpreter, started at once so the caller can probe in-process while it
    runs (on two cores the package stage then waits for the slower of the two, not for both).

    Use it as a context manager: leaving the block kills a child that is still running (an error in
    the caller's own probe) and removes its scratch folder. ``result`` waits for the child.
    """

    def __init__(self, package: Path, base_dir: Path | None, text: str, seed: int, threads: int, timeout_s: float | None = None) -> None:
        from voxledger.settings import load_settings

        self.package = package
        self.timeout_s = timeout_s if timeout_s is not None else load_settings().reload_timeout_s
        self._tmp = tempfile.TemporaryDirectory()
        self._out = Path(self._tmp.name) / "stages.npz"
        cmd = [
            sys.executable,
            "-m",
            "voxledger.tasks.packaging.probe",
            str(package),
            str(base_dir) if base_dir is not None else NO_BASE,
            str(self._out),
            "--text",
            text,
            "--seed",
            str(seed),
            "--threads",
            str(threads),
        ]
        self._started = time.perf_counter()
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                preexec_fn=die_with_parent,  # noqa: PLW1509
            )
        except BaseException:
            self._tmp.cleanup()
            raise

    @property
    def pid(self) -> int:
        return self._proc.pid

    def result(self) -> tuple[dict[str, np.ndarray], float]:
        """The child's stages and its wall time (from its start to its exit).

        Raises: EquivalenceError (it failed, or ran past ``timeout_s``; the error names which).
        """
        remaining = self.timeout_s - (time.perf_counter() - self._started)
        try:
            _, err = self._proc.communicate(timeout=max(remaining, 0.0))
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            raise EquivalenceError(
                f"the fresh-process reload of {self.package} did not finish within {self.timeout_s:.0f} s; it was stopped. "
                "On a slow or loaded machine give it longer: VOXLEDGER_RELOAD_TIMEOUT_S=3600 (docs/settings.md)"
            ) from None
        wall = time.perf_counter() - self._started
        if self._proc.returncode != 0:
            raise EquivalenceError(f"the fresh-process reload of {self.package} failed (exit {self._proc.returncode}):\n{err[-2000:]}")
        with np.load(self._out, allow_pickle=False) as z:
            return {k: np.asarray(z[k]) for k in z.files}, wall

    def __enter__(self) -> FreshReload:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.communicate()
        self._tmp.cleanup()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the reload child: PACKAGE BASE_DIR OUT.npz --text --seed --threads."""
    parser = argparse.ArgumentParser(prog="python -m voxledger.tasks.packaging.probe")
    parser.add_argument("package", type=Path)
    parser.add_argument("base_dir", help=f"the base folder, or {NO_BASE!r} for the backend's configured model")
    parser.add_argument("out", type=Path)
    parser.add_argument("--text", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    base_dir = None if args.base_dir == NO_BASE else Path(args.base_dir)
    stages = probe_package(args.package, base_dir, args.text, args.seed)
    with open(args.out, "xb") as f:
        np.savez(f, allow_pickle=False, **stages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
