"""docs/extending.md, walked as written: the registries it names are the only places to extend."""

from __future__ import annotations

import typing
from pathlib import Path

import numpy as np
import pytest

from voxledger.schemas.evaluation import Candidate, EvaluationPlan, Generation, Prompt
from voxledger.schemas.registry import KINDS, RECEIPT_TYPES, schema_files
from voxledger.schemas.training import BackendName
from voxledger.stores.migrations import MIGRATIONS
from voxledger.stores.projections import PROJECTORS
from voxledger.tasks.backends.base import BACKENDS, get_backend
from voxledger.tasks.metrics import registry
from voxledger.tasks.metrics.registry import EXTRACTORS, ExtractorDef, MetricDef, register, unregister

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
# receipt kinds whose documents are the whole record (no typed table beyond receipts/edges/artifacts)
UNPROJECTED = {
    "ingest",
    "plan",
    "prune",
    "packet_set",
    "submission",
    "corpus_prepare",
    "pipe_materialise",
    "base_import",
    "reproduction",
    "adapter_export",
    "sweep",
    "mlflow_export",
}


def test_the_page_names_every_registry() -> None:
    text = DOC.read_text()
    for name in (
        "BACKENDS",
        "BackendName",
        "EXTRACTORS",
        "register(",
        "RECEIPT_TYPES",
        "PROJECTORS",
        "MIGRATIONS",
        "receipt schemas --write",
    ):
        assert name in text, f"docs/extending.md does not mention {name}"


def test_backends_registry_matches_the_plan_schema() -> None:
    assert set(BACKENDS) == set(typing.get_args(BackendName)) == {"tiny", "cosyvoice3"}
    assert get_backend("tiny").name == "tiny"
    with pytest.raises(ValueError, match="registered: tiny, cosyvoice3"):
        get_backend("nope")  # type: ignore[arg-type]


def test_receipt_kinds_are_listed_once_with_schema_and_projection() -> None:
    assert len(RECEIPT_TYPES) == len(KINDS) == 21
    assert sorted(f"{k}.v1.schema.json" for k in KINDS) == sorted(schema_files())
    projected = set(PROJECTORS)
    assert projected <= set(KINDS), projected - set(KINDS)
    assert set(KINDS) - projected == UNPROJECTED, "a new kind needs a projector (and its migration) or a place in UNPROJECTED"
    created = " ".join(sql for _, sql in MIGRATIONS)
    for table in (
        "audits",
        "training_epochs",
        "checkpoints",
        "observations",
        "evaluation_comparisons",
        "alias_history",
        "ratings",
        "packages",
        "pipeline_stages",
    ):
        assert f"CREATE TABLE {table}" in created


def test_every_metric_is_declared_once_with_direction_and_name() -> None:
    ids = [m.id for e in registry.extractors().values() for m in e.metrics]
    assert len(ids) == len(set(ids)) == 15
    assert all(m.display and m.direction in ("lower", "higher", "neither") for e in EXTRACTORS.values() for m in e.metrics)
    assert registry.lower_is_better("wer:whisper_en") and not registry.lower_is_better("speaker_sim")


def _plan() -> EvaluationPlan:
    prompts = tuple(Prompt(id=f"p{i}", category="short", text="A short line of text.") for i in range(5))
    cands = (Candidate(name="a", backend="tiny", runtime="base", artifact="0" * 64, speaker="s"),
             Candidate(name="b", backend="tiny", runtime="base", artifact="1" * 64, speaker="s"))  # fmt: skip
    return EvaluationPlan(name="toy", prompts=prompts, seeds=(0,), candidates=cands, baseline="a", metrics={"speaker": None, "mos": None})


def test_a_toy_metric_is_one_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registering one extractor is all it takes: extraction, identities, comparisons and reports follow."""
    from voxledger.schemas.metrics import ValiditySpec
    from voxledger.tasks.evaluation.extract import Extractors, extractor_ids, extractor_specs
    from voxledger.tasks.stages.evaluate import summarise

    # the only new code: one registration
    toy = register(ExtractorDef("peak", lambda suite: {"peak": ValiditySpec()}, (MetricDef("peak_abs", "peak |x|", "lower", shown=True),),
                                lambda m, key, spec: {"peak_abs": float(np.max(np.abs(m.wav)))}))  # fmt: skip
    try:
        # keep the test light: only the toy runs (the shipped extractors load ASR and speaker models)
        monkeypatch.setattr(registry, "EXTRACTORS", {"peak": toy})
        monkeypatch.setattr("voxledger.tasks.evaluation.extract.EXTRACTORS", {"peak": toy})
        plan = _plan()
        assert "peak" in extractor_specs(plan) and "peak" in extractor_ids(plan)
        ex = Extractors(plan, Path("."))
        gens, obs = [], []
        for cand, gain in (("a", 0.5), ("b", 0.25)):
            for i, p in enumerate(plan.prompts):
                g = Generation(candidate=cand, prompt_id=p.id, seed=0, valid=True)
                gens.append(g)
                obs += ex.observe(g, p, np.full(160, gain * (1 + 0.1 * i), dtype=np.float32))
        assert {o.metric for o in obs} == {"peak_abs"}
        result = summarise(plan, gens, obs)
        comp = next(c for c in result.comparisons if c.metric == "peak_abs")
        assert comp.lower_is_better and comp.delta.mean == pytest.approx(-0.25 * 1.2, rel=1e-6)
        assert registry.shown_metrics(["peak_abs", "duration_s"]) == ["peak_abs"]
    finally:
        monkeypatch.undo()
        unregister("peak")
    assert "peak" not in EXTRACTORS
