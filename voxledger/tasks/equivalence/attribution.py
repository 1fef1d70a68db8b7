"""Stage attribution: feed the reference runtime's intermediates forward through the candidate.

The backend splits synthesis into stages (`Backend.synthesis_stages`; for tiny: durations,
compared exactly, then mel and pcm). The candidate computes each stage from the *reference's*
outputs of every earlier stage, so a gap shows up at the stage that causes it and nowhere after:
a corrupted decoder weight turns mel RED while durations stay GREEN and pcm (vocoded from the
reference mel) stays GREEN.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from voxledger.schemas.equivalence import FLOAT_KINDS, EquivalenceBands, EquivalenceReport
from voxledger.schemas.training import BackendName
from voxledger.tasks.backends.base import get_backend
from voxledger.tasks.equivalence.compare import compare_stage


def attribute_runtimes(
    backend_name: BackendName,
    ref: Any,
    cand: Any,
    text: str,
    speaker: str,
    seed: int,
    bands: EquivalenceBands | None = None,
    drift_windows: int = 8,
    dump_dir: Path | None = None,
    settings: dict[str, Any] | None = None,
) -> EquivalenceReport:
    """Compare two loaded runtimes of one backend stage by stage, reference inputs fed forward.

    ``dump_dir`` receives ``ref/`` and ``cand/`` folders of ``<dump>.i32`` / ``<dump>.f32``
    files, the format ``compare_dirs`` reads. Raises BackendCapabilityError when the backend
    has no stage split.
    """
    backend, bands, settings = get_backend(backend_name), bands or EquivalenceBands(), settings or {}
    stages = backend.synthesis_stages()
    r = backend.stage_outputs(ref, text, speaker, seed, settings)
    c = {}
    for i, stage in enumerate(stages):
        fed = {earlier.name: r[earlier.name] for earlier in stages[:i]}
        c[stage.name] = backend.stage_outputs(cand, text, speaker, seed, settings, feed=fed)[stage.name]
    results = [
        compare_stage(s.name, s.kind, r[s.name], c[s.name], bands, drift_windows=drift_windows if s.kind in FLOAT_KINDS else 0)
        for s in stages
    ]
    if dump_dir is not None:
        for side, arrays in (("ref", r), ("cand", c)):
            (dump_dir / side).mkdir(parents=True, exist_ok=True)
            for s in stages:
                raw = ".i32" if s.kind == "tokens" else ".f32"
                arrays[s.name].astype("<i4" if s.kind == "tokens" else "<f4").tofile(dump_dir / side / f"{s.dump}{raw}")
    return EquivalenceReport.from_stages(results, bands=bands)
