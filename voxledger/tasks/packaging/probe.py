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


def reload_in_fresh_process(
    package: Path, base_dir: Path | None, text: str, seed: int, threads: int, timeout_s: float = 300.0
) -> tuple[dict[str, np.ndarray], float]:
    """Run ``probe_package`` in a new interpreter; return its stages and wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "stages.npz"
        cmd = [
            sys.executable,
            "-m",
            "voxledger.tasks.packaging.probe",
            str(package),
            str(base_dir) if base_dir is not None else NO_BASE,
            str(out),
            "--text",
            text,
            "--seed",
            str(seed),
            "--threads",
            str(threads),
        ]
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout_s, preexec_fn=die_with_parent)  # noqa: PLW1509
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise EquivalenceError(f"the fresh-process reload of {package} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        with np.load(out, allow_pickle=False) as z:
            return {k: np.asarray(z[k]) for k in z.files}, wall


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
