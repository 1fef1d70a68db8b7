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
    base: tuple[LocalBlobStore, str] | None,
    original: tuple[LocalBlobStore, str],
    rerun: tuple[LocalBlobStore, str],
    bands: ReproductionBands,
    speaker: str | None = None,
) -> tuple[str, str]:
    """(band, detail) of the re-run model against the original on ``bands.probe_text``; each tree is
    (store holding it, digest). With ``base`` the trees are adapters on it (their own voice), without
    it they are whole models speaking as ``speaker``."""
    backend = get_backend(backend_name)
    with tempfile.TemporaryDirectory() as tmp, torch_threads(1):
        work = Path(tmp)
        for name, tree in (("base", base), ("a", original), ("b", rerun)):
            if tree is not None:
                materialize_tree(tree[0], tree[1], work / name)
        runtime = "adapter" if base is not None else "base"
        voice = backend.adapter_speaker(work / "a") if base is not None else speaker
        if voice is None:
            return "n/a", "no speaker known for the probe"
        ref = backend.load_for_inference(work / "base", work / "a", runtime)
        cand = backend.load_for_inference(work / "base", work / "b", runtime)
        speaker = voice
        report = attribute_runtimes(backend_name, ref, cand, bands.probe_text, speaker, bands.probe_seed, bands=bands.probe)
    stages = ", ".join(f"{s.stage} {s.band}" + (f" rel {s.rel:.1e}" if s.rel is not None else "") for s in report.stages)
    return report.band, stages
