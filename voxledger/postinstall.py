"""Post-install fix-ups that pip cannot express, run by ``make install``.

speechbrain pulls a torchaudio whose PyPI Linux wheel is a CUDA build; beside the CPU torch wheel
its compiled extension fails to load (``libc10_cuda.so`` missing). torchaudio imports as pure
Python once that extension is moved aside, which is all speechbrain's ECAPA model needs.
The fix is idempotent and never deletes: the library is renamed, so it can be restored.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def disable_cuda_torchaudio_extension() -> str:
    """Rename torchaudio's CUDA-linked extension; return a one-line description of what happened."""
    spec = importlib.util.find_spec("torchaudio")  # locates without importing
    if spec is None or not spec.submodule_search_locations:
        return "torchaudio not installed: nothing to do"
    lib_dir = Path(next(iter(spec.submodule_search_locations))) / "lib"
    found = sorted(lib_dir.glob("_torchaudio*.so"))
    if not found:
        moved = sorted(lib_dir.glob("_torchaudio*.so.disabled"))
        return f"already fixed ({moved[0].name})" if moved else "no torchaudio extension found"
    import torch

    if torch.version.cuda is not None:
        return f"torch has CUDA {torch.version.cuda}: torchaudio extension left in place"
    for so in found:
        so.rename(so.with_name(so.name + ".disabled"))
    return "moved aside: " + ", ".join(so.name for so in found)


def main() -> int:
    print("voxledger postinstall:", disable_cuda_torchaudio_extension())
    return 0


if __name__ == "__main__":
    sys.exit(main())
