"""Flows and tasks made from the stage table, for stages that bring no flow file of their own.

A row naming ``voxledger.flows.made:<name>`` as its flow (and ``voxledger.flows.made:<name>_task``
as its task) gets both from its module's contract: the task calls the module's ``run`` with the
home opened (and ``flow``, the running flow's name, when ``run`` takes it), and the flow is
``stage_flow`` around that task, with the row's plan model and the module's verdict. Attributes are
made on first access (PEP 562), so a worker loading the entrypoint ``voxledger/flows/made.py:<name>``
gets the same flow as the process that deployed it. docs/extending.md adds a stage this way.
"""

from __future__ import annotations

import importlib
import inspect
import typing
from typing import Any

from prefect import task

from voxledger.flows.common import STAGE_TASK, flow_name, open_home
from voxledger.flows.factory import stage_flow
from voxledger.schemas.stages import STAGE_ROWS, StageRow, resolve
from voxledger.stores.home import HomeRef

MADE = "voxledger.flows.made"
"""This module's import name (a worker may load it from its file under another name)."""

_made: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    if name not in _made:
        _made[name] = _make(name)
    return _made[name]


def _make(name: str) -> Any:
    for row in STAGE_ROWS:
        if row.task == f"{MADE}:{name}":
            return _task(row)
        if row.flow == f"{MADE}:{name}":
            return _flow(row)
    raise AttributeError(f"module {MADE} has no attribute {name!r}: no row of the stage table (schemas/stages.py) names it")


def _task(row: StageRow) -> Any:
    """The row's receipt-writing task: its module's ``run`` with the home opened."""
    run = importlib.import_module(row.module).run
    hints = typing.get_type_hints(run)
    takes_flow = "flow" in inspect.signature(run).parameters
    params = [
        p.replace(annotation=HomeRef if p.name == "home" else hints.get(p.name, p.annotation))
        for p in inspect.signature(run).parameters.values()
        if p.name != "flow"
    ]
    signature = inspect.Signature(params, return_annotation=hints.get("return", Any))

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        given = dict(bound.arguments)
        given["home"] = open_home(given["home"])
        if takes_flow:
            given["flow"] = flow_name()
        return run(**given)

    name = row.task.partition(":")[2]
    call.__name__ = call.__qualname__ = name
    call.__module__ = MADE
    call.__doc__ = run.__doc__
    call.__signature__ = signature  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in params} | {"return": signature.return_annotation}
    return task(name=name, **STAGE_TASK)(call)


def _flow(row: StageRow) -> Any:
    """The row's flow: the factory's preamble around its task, with its plan model and its module's verdict."""
    step = __getattr__(row.task.partition(":")[2]) if row.task.startswith(f"{MADE}:") else resolve(row.task)
    module = importlib.import_module(row.module)
    plan_model = resolve(row.plan_model) if row.plan_model is not None else None
    doc = (module.__doc__ or row.name).strip().splitlines()[0]
    return stage_flow(row.flow.partition(":")[2], step, module=MADE, doc=doc, plan_model=plan_model, verdict=module.verdict)
