"""Flows ``prepare_corpus`` and ``materialise_pipes``: derive a training-ready corpus, and run a
Kaldi directory's ``wav.scp`` pipe commands once into files; each records its receipt."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from voxledger.flows.common import STAGE_TASK, flow_name
from voxledger.flows.progress import report
from voxledger.schemas.audit import AuditPolicy
from voxledger.stores.home import HomeRef
from voxledger.tasks.plans import load_plan
from voxledger.tasks.stages.corpus_materialise import MaterialiseOutcome, materialise_pipes_fn
from voxledger.tasks.stages.corpus_prepare import PrepareOutcome, prepare_corpus_fn


@task(name="prepare_corpus", **STAGE_TASK)
def prepare_task(home: HomeRef, src: str, policy_file: str, out: str | None, audio_roots: tuple[str, ...]) -> PrepareOutcome:
    """Cut, down-mix, resample and loudness-normalise ``src`` into a derived corpus meeting the policy."""
    report(f"preparing {src}")
    return prepare_corpus_fn(
        home.open(),
        Path(src),
        load_plan(Path(policy_file), AuditPolicy),
        policy_name=Path(policy_file).name,
        out_dir=Path(out) if out else None,
        audio_roots=tuple(Path(r) for r in audio_roots),
        flow=flow_name("prepare_corpus"),
    )


@flow(name="prepare_corpus")
def prepare_corpus(
    home: HomeRef | str, src: str, policy_file: str, out: str | None = None, audio_roots: tuple[str, ...] = ()
) -> PrepareOutcome:
    """``voxledger corpus prepare``."""
    return prepare_task(HomeRef.of(home), src, policy_file, out, audio_roots)


@task(name="materialise_pipes", cache_policy=STAGE_TASK["cache_policy"])  # never retried: the commands ran
def materialise_task(home: HomeRef, src: str, out: str, cwd: str | None, timeout_s: float) -> MaterialiseOutcome:
    """Run every pipe command of ``src`` once, without a shell, into a copy at ``out``."""
    report(f"running the pipe commands of {src}")
    return materialise_pipes_fn(
        home.open(),
        Path(src),
        Path(out),
        cwd=Path(cwd) if cwd else None,
        timeout_s=timeout_s,
        flow=flow_name("materialise_pipes"),
    )


@flow(name="materialise_pipes")
def materialise_pipes(home: HomeRef | str, src: str, out: str, cwd: str | None = None, timeout_s: float = 600.0) -> MaterialiseOutcome:
    """``voxledger corpus materialise``."""
    return materialise_task(HomeRef.of(home), src, out, cwd, timeout_s)
