"""The closed registry of extractors and the metrics they emit: the one place a metric is added.

An extractor declares its spec (read from the plan's metric suite, or fixed), the metrics it
emits (id, display name, direction, whether reports show it) and how it measures one generation.
Evaluation (extraction, extractor identities, the direction of every paired comparison), the
CLI report and the gates read this registry; nothing else lists metrics. ``docs/extending.md``
walks through adding one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from voxledger.schemas.evaluation import MetricSuite

Direction = Literal["lower", "higher", "neither"]


@dataclass(frozen=True)
class MetricDef:
    """One number per generation. ``id`` ending in ':' names a family (one per text normaliser)."""

    id: str
    display: str
    direction: Direction
    shown: bool = False
    count: bool = False  # summed for a micro rate (word errors, reference words), never averaged


@dataclass
class Measurement:
    """What an extractor sees of one generation; costly shared results are computed once."""

    wav: np.ndarray
    sample_rate_hz: int
    text: str
    prompt: Any
    generation: Any
    suite: MetricSuite
    models: Any  # loads each model once per evaluation (asr, speaker encoder, references)
    cache: dict[str, Any] = field(default_factory=dict)

    def shared(self, name: str, make: Callable[[], Any]) -> Any:
        """``make()`` once per generation under ``name`` (the ASR hypothesis, the content gate)."""
        if name not in self.cache:
            self.cache[name] = make()
        return self.cache[name]


Values = dict[str, float]


@dataclass(frozen=True)
class ExtractorDef:
    """A registered extractor: identity key, specs from the suite, metrics, and the measuring function.

    ``specs(suite)`` returns ``{extractor key: spec}`` (several for a family, none when the suite
    switches it off); ``measure(m, key, spec)`` returns metric id -> value for one generation.
    ``gated`` extractors run only on generations that passed the content gate. ``depends`` names
    specs whose settings change this extractor's numbers (they enter its identity).
    """

    name: str
    specs: Callable[[MetricSuite], dict[str, BaseModel]]
    metrics: tuple[MetricDef, ...]
    measure: Callable[[Measurement, str, BaseModel], Values]
    gated: bool = False
    depends: Callable[[MetricSuite], dict[str, BaseModel]] = lambda suite: {}


EXTRACTORS: dict[str, ExtractorDef] = {}


def register(extractor: ExtractorDef) -> ExtractorDef:
    """Add an extractor; its metric ids must not collide with registered ones."""
    taken = {m.id for e in EXTRACTORS.values() for m in e.metrics}
    clash = sorted(taken & {m.id for m in extractor.metrics})
    if extractor.name in EXTRACTORS or clash:
        raise ValueError(f"extractor {extractor.name!r} collides with the registry (name or metrics {clash})")
    EXTRACTORS[extractor.name] = extractor
    return extractor


def unregister(name: str) -> None:
    """Remove an extractor (tests that register a toy one clean up with this)."""
    EXTRACTORS.pop(name, None)


def extractors() -> dict[str, ExtractorDef]:
    """The registry (the package's import registered the shipped extractors)."""
    return EXTRACTORS


def metric_def(metric: str) -> MetricDef | None:
    """The definition of an observed metric id (a family member resolves to its family)."""
    for e in extractors().values():
        for m in e.metrics:
            if m.id == metric or (m.id.endswith(":") and metric.startswith(m.id)):
                return m
    return None


def rule_metric_ids() -> tuple[str, ...]:
    """Every metric id a promotion rule may name, in registry order: plain ids, and each family
    spelled once per text normaliser (``wer:whisper_en``, ``wer:basic``, ...)."""
    from typing import get_args

    from voxledger.schemas.metrics import NormaliserName

    normalisers = get_args(NormaliserName)
    return tuple(
        i for e in extractors().values() for m in e.metrics for i in ([m.id + n for n in normalisers] if m.id.endswith(":") else [m.id])
    )


def lower_is_better(metric: str) -> bool:
    """Direction of a paired comparison on ``metric``."""
    m = metric_def(metric)
    return m is not None and m.direction == "lower"


def is_count(metric: str) -> bool:
    """True for counts that feed micro rates (never summarised as a mean)."""
    m = metric_def(metric)
    return m is not None and m.count


def shown_metrics(observed: list[str]) -> list[str]:
    """The observed metric ids a report shows by default, in registry order."""
    out = []
    for e in extractors().values():
        for m in e.metrics:
            if m.shown:
                out += [o for o in observed if o == m.id or (m.id.endswith(":") and o.startswith(m.id))]
    return list(dict.fromkeys(out))
