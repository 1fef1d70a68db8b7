"""The adapters' equivalence probe: the original and the re-run adapter on one fixed prompt, stage by stage.

Both adapters are loaded on the same base and compared with the equivalence module's stage
attribution (``tasks/equivalence/attribution.py``): each stage of the re-run adapter is computed
from the original's outputs of the earlier stages, and scored by ``rel = max|a - b| / max|a|``
against the GREEN/YELLOW bands of ``ReproductionBands.probe``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from voxledger.schemas.reproduction import ReproductionBands
from voxledger.schemas.training import BackendName
from voxledger.stores.blobs import LocalBlobStore
from voxledger.stores.trees import materialize_tree
from voxledger.tasks.backends.base import get_backend
from voxledger.tasks.equivalence.attribution import attribute_runtimes
from voxledger.tasks.threads import torch_threads


def probe_adapters(
    backend_name: BackendName,
    base: tuple[LocalBlobStore, str],
    original: tuple[LocalBlobStore, str],
    rerun: tuple[LocalBlobStore, str],
    bands: ReproductionBands,
) -> tuple[str, str]:
    """(band, detail) of the re-run adapter against the original on ``bands.probe_text``; each tree is
    (store holding it, digest)."""
    backend = get_backend(backend_name)
    with tempfile.TemporaryDirectory() as tmp, torch_threads(1):
        work = Path(tmp)
        for name, (store, digest) in (("base", base), ("a", original), ("b", rerun)):
            materialize_tree(store, digest, work / name)
        speaker = backend.adapter_speaker(work / "a")
        ref = backend.load_for_inference(work / "base", work / "a", "adapter")
        cand = backend.load_for_inference(work / "base", work / "b", "adapter")
        report = attribute_runtimes(backend_name, ref, cand, bands.probe_text, speaker, bands.probe_seed, bands=bands.probe)
    stages = ", ".join(f"{s.name} {s.band}" + (f" rel {s.rel:.1e}" if getattr(s, "rel", None) is not None else "") for s in report.stages)
    return report.band, stages
