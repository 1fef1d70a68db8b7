"""Run by the target interpreter: import upstream's import set and report what fails, as JSON on stdout.

Standard library only at the top level (the target interpreter need not have voxledger). Usage:
``python probe.py '<json: {"modules": [...], "upstream": [...], "paths": [...], "distributions": [...]}>'``.
``paths`` (the checkout and its Matcha-TTS) are put first on ``sys.path`` for the ``upstream``
modules only, after the third-party ``modules`` were imported. Nothing is written (the caller
sets ``PYTHONDONTWRITEBYTECODE``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import io
import json
import sys
from contextlib import redirect_stderr, redirect_stdout
from typing import Any


def _failure(exc: BaseException) -> dict[str, Any]:
    # transformers' lazy modules hide the real cause behind "Could not import module ..."; keep the chain
    chain: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 5:
        chain.append(f"{type(seen).__name__}: {str(seen).splitlines()[0] if str(seen) else ''}")
        seen = seen.__cause__ or seen.__context__
    return {
        "type": type(exc).__name__,
        "message": chain[0],
        "chain": chain,
        "missing": exc.name if isinstance(exc, ModuleNotFoundError) else None,
    }


def _import(name: str) -> dict[str, Any] | None:
    try:
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            importlib.import_module(name)
    except BaseException as exc:  # noqa: BLE001  (any failure to import is the finding, SystemExit included)
        return _failure(exc)
    return None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe(request: dict[str, Any]) -> dict[str, Any]:
    triton = importlib.util.find_spec("triton")
    report: dict[str, Any] = {
        "python": ".".join(map(str, sys.version_info[:3])),
        "executable": sys.executable,
        "versions": {d: _version(d) for d in request.get("distributions", [])},
        "triton": None if triton is None else {"version": _version("triton"), "path": str(triton.origin)},
        "modules": {m: _import(m) for m in request.get("modules", [])},
    }
    sys.path[:0] = list(request.get("paths", []))
    report["upstream"] = {m: _import(m) for m in request.get("upstream", [])}
    return report


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]))))
