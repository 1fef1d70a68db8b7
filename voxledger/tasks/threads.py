"""Torch intra-op threads as an explicit, scoped setting (never ambient state left by a stage)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``n`` torch threads, then restore the previous count.

    ``VOXLEDGER_REPRODUCE_THREADS`` (set by ``voxledger reproduce --threads`` for its re-run only)
    wins over ``n``, so a re-run can mimic a machine with another core count.
    """
    import torch

    from voxledger.settings import load_settings

    forced = load_settings().reproduce_threads
    n = forced if forced is not None else n

    if n < 1:
        raise ValueError(f"torch threads must be >= 1, got {n}")
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
