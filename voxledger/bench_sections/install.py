"""``install``: byte-compiling installed packages as pip does (one process, file after file) against
``voxledger.postinstall`` (``compileall`` on every core), one after the other on one copy of the
same sources, in one run.

Bytecode names its source's path and records its modification time, so both compiles run in the
same folder and must write byte-identical files; the section counts the files where they differ (0 expected).
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import shutil
import time
from pathlib import Path

from voxledger.bench_sections.common import Figure
from voxledger.postinstall import compile_packages


def _sources(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {package!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def bench_install_compile(work: Path, quick: bool) -> list[Figure]:
    package = "rich" if quick else "transformers"
    source = _sources(package)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    tree = work / "compile" / package
    shutil.copytree(source, tree, ignore=ignore)
    files = sum(1 for _ in tree.rglob("*.py"))
    cores = os.cpu_count() or 1
    t0 = time.perf_counter()
    compileall.compile_dir(tree, quiet=2, workers=1)  # pip: one file after another in its own process
    t_one = time.perf_counter() - t0
    first = {p.relative_to(tree): p.read_bytes() for p in tree.rglob("*.pyc")}
    for cache in list(tree.rglob("__pycache__")):
        shutil.rmtree(cache)
    t0 = time.perf_counter()
    compile_packages(tree, workers=cores)
    t_every = time.perf_counter() - t0
    second = {p.relative_to(tree): p.read_bytes() for p in tree.rglob("*.pyc")}
    differ = sum(1 for rel in first.keys() | second.keys() if first.get(rel) != second.get(rel))
    return [
        Figure(f"byte-compile {package} ({files} .py files), one process as pip does", t_one, "s"),
        Figure(f"the same with voxledger.postinstall on {cores} process(es)", t_every, "s"),
        Figure("byte-compile: one process / every core (time ratio)", t_one / max(t_every, 1e-9), "x"),
        Figure("byte-compile: .pyc files that differ between the two", differ, "files", "0: " + ("ok" if differ == 0 else "DIFFER")),
    ]
