"""Sweep member processes start with the training stack already loaded (forked from the members' server)."""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor

from voxledger.tasks.backends.base import backend_location
from voxledger.tasks.stages.sweep.members import member_processes

# what a tiny member's first minutes would otherwise import (measured: about 2.5 s a member, most of
# it librosa's lazily loaded feature code and numba loading its compiled kernels)
LOADED_BY_THE_SERVER = (
    "torch",
    "voxledger.tasks.stages.train",
    "librosa.core.spectrum",
    "librosa.filters",
    "numba",
    "duckdb",
    "jsonschema",
    backend_location("tiny")[0],
)


def _loaded(names: tuple[str, ...]) -> dict[str, bool]:
    return {n: n in sys.modules for n in names}


def test_a_member_process_starts_with_the_model_stack_and_its_backend_imported() -> None:
    with ProcessPoolExecutor(1, mp_context=member_processes("tiny")) as pool:
        loaded = pool.submit(_loaded, LOADED_BY_THE_SERVER).result()
    assert len(loaded) == 8 and all(loaded.values()), [n for n, ok in loaded.items() if not ok]
