"""Post-install fix-ups that pip cannot express, run by ``make install``.

speechbrain pulls a torchaudio whose PyPI Linux wheel is a CUDA build; beside the CPU torch wheel
its compiled extension fails to load (``libc10_cuda.so`` missing). torchaudio imports as pure
Python once that extension is moved aside, which is all speechbrain's ECAPA model needs.
The fix is idempotent and never deletes: the library is renamed, so it can be restored.

``make install`` asks pip not to byte-compile (pip compiles one file at a time, about 85 s of a
fresh install on a 2-core machine) and compiles the environment's packages here on every core
instead, so no process ever compiles a library module on import (which it would do on every start
where ``PYTHONDONTWRITEBYTECODE`` is set).
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import sys
import sysconfig
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


def compile_packages(site: Path | None = None, workers: int | None = None) -> str:
    """Byte-compile ``site`` (this environment's site-packages by default) on ``workers`` processes (all cores by default);
    a one-line description. Files that are not this Python's syntax (modules for a newer Python that
    packages ship beside their others) stay uncompiled, as pip leaves them."""
    site = site or Path(sysconfig.get_paths()["purelib"])
    n = workers or os.cpu_count() or 1
    ok = compileall.compile_dir(site, quiet=2, workers=n)  # quiet=2: no line per file, nor per failure
    left = 0 if ok else sum(1 for py in site.rglob("*.py") if not Path(importlib.util.cache_from_source(str(py))).exists())
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return f"byte-compiled {site} on {n} process(es)" + ("" if ok else f"; {left} file(s) that are not Python {version} left as source")


def main() -> int:
    print("voxledger postinstall:", disable_cuda_torchaudio_extension())
    print("voxledger postinstall:", compile_packages())
    return 0


if __name__ == "__main__":
    sys.exit(main())
