"""Keep freed large buffers in the process heap while a stage decodes thousands of clips.

glibc serves allocations above its mmap threshold (128 KiB at first, raised as large blocks
are freed) with fresh ``mmap`` pages, and trims freed heap back to the kernel. A corpus audit
allocates and frees a few 0.3-1 MB arrays per clip; each new mapping is then paid for again in
page faults (about 500 per 10 s clip, 1.5 ms of system time, measured with
``voxledger bench --only corpus-scale``). Raising both thresholds makes the process reuse its own
freed memory. The setting is process-wide and stays: peak memory is unchanged, freed memory is
simply kept for reuse (at most the thresholds' worth above what is in use).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's largest allowed mmap threshold on 64-bit


@functools.cache
def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; False where malloc is not glibc's."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, 2 * THRESHOLD_BYTES))
