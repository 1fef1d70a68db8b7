"""One factory makes every stage's flow: the preamble written once.

A stage's flow does the same five things whatever the stage: take the home (a ``HomeRef`` or a
folder path from the CLI or a deployment), take its plan (a ``PlanRef`` from the pipeline, or a
file path) and validate it into the stage's plan model, push and pull through the shared store
when one is configured, register the plan as its own task run, run the stage's step and announce
its receipt; then the stage's verdict may fail the run, after the receipt is recorded.
``stage_flow`` writes that once. A stage's flow file (``flows/<noun>.py``) holds only its task(s)
and one call::

    audit = stage_flow("audit", audit_corpus, module=__name__, plan_model=AuditPolicy, verdict=stage.verdict)

The flow's parameters are the step's, ``home`` and ``plan`` widened to accept paths, so
``voxledger deploy`` registers the same typed parameters a hand-written flow had, and a worker
loads the flow by the module path and name the stage table gives.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from prefect import Flow, flow
from pydantic import BaseModel

from voxledger.flows.common import announce, register_plan_task, shared_store
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import PlanRef
from voxledger.tasks.stage import StageOutcome

Step = Callable[..., Any]
"""A stage's step: a Prefect task (or a plain function calling its tasks) taking ``home`` (a
``HomeRef``), ``plan`` (a ``PlanRef``) when the stage has a plan, and its inputs by name."""


def _parameters(step: Step) -> tuple[inspect.Signature, dict[str, Any]]:
    """The flow's signature and annotations: the step's, with ``home`` and ``plan`` also taking a path."""
    fn = getattr(step, "fn", step)
    hints = typing.get_type_hints(fn)
    widened = {"home": HomeRef | str, "plan": PlanRef | str}
    params = []
    for p in inspect.signature(fn).parameters.values():
        annotation = widened.get(p.name, hints.get(p.name, p.annotation))
        params.append(p.replace(annotation=annotation))
    returns = hints.get("return", StageOutcome)
    annotations = {p.name: p.annotation for p in params} | {"return": returns}
    return inspect.Signature(params, return_annotation=returns), annotations


def stage_flow(
    name: str,
    step: Step,
    *,
    module: str,
    doc: str,
    plan_model: type[BaseModel] | None = None,
    verdict: Callable[[StageOutcome[Any]], None] | None = None,
) -> Flow[..., Any]:
    """The flow ``name`` of a stage (defined as ``module``'s attribute ``name``): the preamble around ``step``.

    ``plan_model``: the model the stage's plan validates into (None: the stage takes no plan);
    ``verdict``: raises when the recorded receipt must fail the run (tasks/stages/contract.py).
    """
    signature, annotations = _parameters(step)
    if plan_model is not None and "plan" not in signature.parameters:
        raise TypeError(f"stage flow {name}: its step takes no `plan` but the stage names plan model {plan_model.__name__}")

    def body(*args: Any, **kwargs: Any) -> Any:
        arguments = signature.bind(*args, **kwargs)
        arguments.apply_defaults()
        given = dict(arguments.arguments)
        ref = given["home"] = HomeRef.of(given["home"])
        with shared_store(ref):
            if plan_model is not None:
                given["plan"] = PlanRef.coerce(given["plan"], plan_model)
                register_plan_task(ref, given["plan"], plan_model)
            out = announce(step(**given))
        if verdict is not None:
            verdict(out)
        return out

    body.__name__ = body.__qualname__ = name
    body.__module__ = module
    body.__doc__ = doc
    body.__signature__ = signature  # type: ignore[attr-defined]
    body.__annotations__ = annotations
    made: Flow[..., Any] = flow(name=name)(body)
    return made
