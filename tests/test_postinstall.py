"""``make install`` leaves byte-compiling to ``voxledger.postinstall`` (all cores, not pip's one at a
time): every valid module gets its cached bytecode, a module in a newer Python's syntax is left as
source and counted, as pip leaves it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from voxledger.postinstall import compile_packages


def test_compile_packages_compiles_every_valid_module_and_counts_the_rest(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "pkg" / "sub").mkdir(parents=True)
    good = [site / "pkg" / "__init__.py", site / "pkg" / "sub" / "mod.py", site / "top.py"]
    for i, path in enumerate(good):
        path.write_text(f"VALUE = {i}\n")
    newer = site / "pkg" / "_typing_312.py"
    newer.write_text("type Alias = int\n")  # Python 3.12 syntax: not valid on 3.11

    line = compile_packages(site, workers=2)

    assert all(Path(importlib.util.cache_from_source(str(p))).is_file() for p in good)
    assert not Path(importlib.util.cache_from_source(str(newer))).exists()
    assert line == f"byte-compiled {site} on 2 process(es); 1 file(s) that are not Python 3.11 left as source"
    newer.unlink()
    assert compile_packages(site, workers=1) == f"byte-compiled {site} on 1 process(es)"
