"""Imported once by the process every sweep member is forked from (a multiprocessing fork server).

A member trains in a process of its own: torch's global random generator, its thread count and the
Python and NumPy generators a checkpoint saves are process-wide, so members sharing a process
would draw from one generator in an order set by the scheduler. A fresh interpreter per member
would pay for importing the model stack each time (about 9 s of a tiny member's 10 s), so the
members are forked from a server that imported it once: single-threaded and never trained, so a
fork of it is safe, unlike a fork of the sweep's own process (Prefect's threads, OpenMP's pool).
The server also fixes the code identity every member's cache keys carry: the code it imported.
"""

from __future__ import annotations

import importlib

MODEL_STACK = ("torch", "transformers", "peft", "librosa.core.spectrum", "librosa.filters", "librosa.util.utils", "duckdb", "jsonschema")
"""The libraries training and recording import (a backend missing one simply imports less here).
librosa loads its submodules on first use (``lazy_loader``), so ``import librosa`` alone loads
nothing of substance: its feature code is named here (about 2.5 s a member, mostly numba loading
its compiled kernels)."""

for _name in ("voxledger.tasks.stages.train", "voxledger.tasks.training.loop", *MODEL_STACK):
    try:
        importlib.import_module(_name)
    except ImportError:
        pass

from voxledger.stores.identity import code_identity  # noqa: E402 - after the code it identifies is imported

code_identity()
