"""What every stage benchmark shares: child processes, peak RSS, stage clocks and the plans.

Each measured pass runs in a fresh spawned interpreter, so its peak RSS is its own (the parent's
imports and earlier passes never count) and no pass warms the next one's memory.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import re
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voxledger.schemas.training import DEFAULT_BACKEND, BackendName

BENCH_BACKEND: BackendName = DEFAULT_BACKEND  # the backend every training and synthesis figure measures
SAMPLE_RATE_HZ = 16000
TINY_MODEL = {
    "hidden_size": 64,
    "backbone_layers": 2,
    "attention_heads": 4,
    "kv_heads": 2,
    "ffn_size": 128,
    "postnet_channels": 64,
    "encoder_layers": 2,
}


def peak_rss_mb() -> float:
    """Peak resident set size of this process's own memory so far, in MB.

    Linux's ``ru_maxrss`` survives ``exec``: a spawned child would report at least the parent's
    size at fork time. ``VmHWM`` belongs to the current address space, so it starts afresh.
    """
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1024)


def _measured(fn: Callable[..., dict[str, Any]], args: tuple[Any, ...]) -> dict[str, Any]:
    out = fn(*args)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def in_child(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``fn(*args)`` in a fresh spawned interpreter; the result gains that process's ``peak_rss_mb``."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_measured, fn, args).result()


@contextmanager
def clock(totals: dict[str, float], stage: str) -> Iterator[None]:
    """Add the block's wall time to ``totals[stage]``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        totals[stage] += time.perf_counter() - t0


def backend_hooks(backend: BackendName, methods: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str, str], ...]:
    """(stage, module, "Class.method") hooks on the registered class of ``backend`` for each (stage, method)."""
    from voxledger.tasks.backends.base import backend_location

    module, cls = backend_location(backend)
    return tuple((stage, module, f"{cls}.{method}") for stage, method in methods)


@contextmanager
def stage_timers(hooks: tuple[tuple[str, str, str], ...]) -> Iterator[dict[str, float]]:
    """Wrap each hooked function in a clock for its stage; the real functions run unchanged."""
    totals: dict[str, float] = defaultdict(float)
    active: set[str] = set()
    undo: list[tuple[Any, str, Any]] = []

    def clocked(stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if stage in active:
                return fn(*args, **kwargs)
            active.add(stage)
            try:
                with clock(totals, stage):
                    return fn(*args, **kwargs)
            finally:
                active.discard(stage)

        return wrapper

    for stage, module, attr in hooks:
        owner: Any = importlib.import_module(module)
        *cls, name = attr.split(".")
        if cls:
            owner = getattr(owner, cls[0])  # a class attribute is the plain function: the wrapper binds as a method
        undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, clocked(stage, getattr(owner, name)))
    try:
        yield totals
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


def audit_policy() -> Any:
    """The demo corpus's audit policy (plans/audit-demo.yaml) as a model: every check switched on."""
    from voxledger.schemas.audit import AuditPolicy, LeakageRule

    return AuditPolicy(
        name="bench-audit",
        min_duration_s=0.5,
        max_duration_s=20.0,
        leakage=(
            LeakageRule(key="speaker", partition=(("train", "dev"), ("target_train", "target_dev", "test"))),
            LeakageRule(key="recording_id"),
            LeakageRule(key="text_norm"),
        ),
    )


def train_plan(quick: bool, **over: Any) -> Any:
    """The benchmark's base training plan: the demo's (plans/train-tiny-base.yaml) batch size,
    model, precision and checkpoint interval over whole epochs of the full demo corpus, or a tiny
    smoke one. Patience exceeds the epoch count, so every run trains exactly the same steps. One thread:
    on a 2-core machine shared with other work, two torch threads ran steps 6-8x slower
    (1.2-1.4 s vs 7.5-10 s per 2,700-frame step at load average 3).
    """
    import yaml

    from voxledger.schemas.training import OptimSettings, TrainingPlan
    from voxledger.stores.identity import repo_root

    demo = yaml.safe_load((repo_root() / "plans" / "train-tiny-base.yaml").read_text(encoding="utf-8"))
    fields: dict[str, Any] = {
        "name": "bench-train",
        "mode": "full",
        "train_splits": ("train",),
        "cv_splits": ("dev",),
        "max_epochs": 2,
        "patience": 5,
        "steps_per_epoch": None,
        "frames_per_batch": 800 if quick else 3000,
        "checkpoint_every_steps": 2 if quick else demo["checkpoint_every_steps"],
        "threads": 1,
        "model": TINY_MODEL if quick else {},
        "precision": "fp32" if quick else demo["precision"],
        "optim": OptimSettings(warmup_steps=2 if quick else 10),
    }
    fields.update(over)
    return TrainingPlan(**fields)


_BOUND = re.compile(r"(<=|>=|<|>) ?(-?[0-9.]+)|(-?[0-9.]+)-(-?[0-9.]+)")


@dataclass
class Figure:
    """One benchmark line: what, value, unit, and how it compares to its goal.

    A goal written as a bare bound (``"<= 5"``, ``"> 10"``, ``"3-7"``, inclusive) gets its verdict
    appended here from the value (``"<= 5: ok"`` or ``"<= 5: SHORT"``), so no row shows a goal
    without saying whether it was met; a goal that already carries one is left as it is."""

    name: str
    value: float
    unit: str
    goal: str = ""

    def __post_init__(self) -> None:
        m = _BOUND.fullmatch(self.goal.strip())
        if m is None:
            return
        if m.group(1):
            op, bound = m.group(1), float(m.group(2))
            met = {"<=": self.value <= bound, ">=": self.value >= bound, "<": self.value < bound, ">": self.value > bound}[op]
        else:
            met = float(m.group(3)) <= self.value <= float(m.group(4))
        self.goal = f"{self.goal.strip()}: {'ok' if met else 'SHORT'}"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def make_corpus(root: Path, n: int, size: int) -> list[Path]:
    """``n`` random files of ``size`` bytes under ``root`` in 100 folders."""
    root.mkdir(parents=True)
    files = []
    for i in range(n):
        d = root / f"d{i % 100:02d}"
        d.mkdir(exist_ok=True)
        p = d / f"f{i:05d}.bin"
        p.write_bytes(os.urandom(size))
        files.append(p)
    return files
