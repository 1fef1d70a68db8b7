"""Upstream's draws from python's process-wide ``random``, redirected to a generator of the backend's own.

Upstream's ``Qwen2LM.prepare_lm_input_target`` (``cosyvoice/llm/llm.py``) draws ``random.random()``
once per utterance to choose the uni- or bistream sequence layout. That is the process-wide
generator, and inside a Prefect flow other threads (Prefect's event loop, websockets) draw from
it at unpredictable times: two identical runs then train on different sequence layouts. Here
every upstream module that did ``import random`` (``cosyvoice.*``, ``matcha.*``) sees, for the
duration of one call, an object exposing ``random``'s functions bound to a private
``random.Random``; the module attribute is restored afterwards. Nothing else in the process
draws from that generator, and nothing upstream draws from the process-wide one meanwhile.

Audit of the other process-wide generators the backend touches:

- torch (CPU and CUDA): LoRA dropout and any dropout inside Qwen2 draw from torch's default
  generator. The backend seeds it from (seed, step) right before each step, so a step's draws
  never depend on what ran before it (a resume needs no saved state); Prefect does not draw
  from it.
- numpy: nothing the backend runs during training draws from ``np.random``; batches come from
  ``np.random.default_rng([seed, epoch])`` (`data.batch_indices`).
- the model yaml's ``__set_seed`` entries reseed all three when it is loaded: setup reseeds
  right after (`synth.seed_everything`).
"""

from __future__ import annotations

import hashlib
import random
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

UPSTREAM_PACKAGES = ("cosyvoice", "matcha")
_SWAP_LOCK = threading.RLock()


def derived_seed(*parts: object) -> int:
    """A 64-bit seed that is a pure function of ``parts`` (stable across processes and platforms)."""
    text = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


class RandomModule(types.ModuleType):
    """Stands in for the ``random`` module: its functions bound to one private `random.Random`."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__("random")
        self._rng = rng

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        own = getattr(self._rng, name, None)
        return own if own is not None and not name.startswith("_") else getattr(random, name)


def upstream_modules_using_random() -> list[types.ModuleType]:
    """Loaded upstream modules whose global ``random`` is python's ``random`` module."""
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".", 1)[0] not in UPSTREAM_PACKAGES:
            continue
        if getattr(module, "random", None) is random:
            found.append(module)
    return found


@contextmanager
def private_random(rng: random.Random) -> Iterator[random.Random]:
    """Within the block, upstream's module-level ``random.*`` calls draw from ``rng`` only."""
    stand_in = RandomModule(rng)
    with _SWAP_LOCK:
        modules = upstream_modules_using_random()
        for module in modules:
            module.random = stand_in  # type: ignore[attr-defined]
        try:
            yield rng
        finally:
            for module in modules:
                module.random = random  # type: ignore[attr-defined]
