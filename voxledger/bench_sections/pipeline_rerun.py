"""``pipeline-rerun``: a ``voxledger pipeline run`` whose every stage is served from cache, as a
whole process, the way a user re-runs it after changing nothing (or only the packets folder).

A newcomer's voice (`build_voice_corpus`, 45 clips) gets `voxledger init`'s plans cut to a smoke
run (`smoke_plans`: a few LoRA steps, three prompts, no MOS); the first run computes every stage,
then the same command is timed through the home's warm runner (how a user's next command runs),
with the flow in the command's own process (``VOXLEDGER_RUNNER=false``), and against
``python -c pass`` (the floor of any command). Every timed run must report every stage cached,
or the section fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from voxledger.bench_sections.common import Figure
from voxledger.schemas.errors import VoxledgerError


def _first_prompts(plan: dict[str, Any], prompts: int) -> dict[str, Any]:
    """``plan`` (an evaluation or gate plan) on its first ``prompts`` prompts and their speaker references."""
    kept = plan["prompts"][:prompts]
    ids = {p["id"] for p in kept}
    refs = {k: v for k, v in plan["speaker_references"].items() if k.split(":")[0] in ids}
    return plan | {"prompts": kept, "speaker_references": refs}


def smoke_plans(plans: Path, prompts: int = 3) -> None:
    """Cut the plans `voxledger init` wrote in ``plans`` to a smoke run of the adapter: a few steps,
    no MOS, a lenient gate and an evaluation on the first ``prompts`` prompts, two raters, no ASR
    agreement in the audit."""

    def rewrite(name: str, change: Any) -> None:
        path = plans / name
        path.write_text(yaml.safe_dump(change(yaml.safe_load(path.read_text()))))

    rewrite("audit.yaml", lambda d: d | {"asr_agreement": {"enabled": False}})
    steps = {"max_epochs": 2, "steps_per_epoch": 3, "frames_per_batch": 1500, "checkpoint_every_steps": 3, "threads": 1}
    rewrite("train-adapter.yaml", lambda d: d | steps | {"precision": "fp32"})

    def promotion(d: dict[str, Any]) -> dict[str, Any]:
        rules = [r | {"threshold": 0.0} for r in d["rules"] if r["statistic"] == "challenger_mean"]
        return d | {"gate_plan": _first_prompts(d["gate_plan"], prompts) | {"metrics": {"mos": None}}, "rules": rules, "best_k": 1}

    rewrite("promote.yaml", promotion)
    rewrite("eval.yaml", lambda d: _first_prompts(d, prompts) | {"metrics": {"mos": None}})

    def listening(d: dict[str, Any]) -> dict[str, Any]:
        # a few steps of LoRA are told from recordings by ear and by file: warn, do not stop
        return d | {"design": d["design"] | {"raters": 2, "raters_per_prompt": 2}, "blinding": {"on_leak": "warn"}}

    rewrite("listening.yaml", listening)


def bench_pipeline_rerun(work: Path, repeats: int) -> list[Figure]:
    """A cached `pipeline run` through the warm runner and in the command's own process, each the
    best of ``repeats`` whole processes, beside ``python -c pass``."""
    from voxledger.bench_sections.orchestration import wait_for_runner
    from voxledger.hosting.server import stop_server
    from voxledger.tasks.corpus.demo import build_voice_corpus

    corpus, _ = build_voice_corpus(work / "rerun-voice", size="small")
    plans, home, packets = work / "rerun-plans", work / "rerun-home", work / "rerun-packets"
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "VOXLEDGER_PREFECT", "VOXLEDGER_RUNNER")}
    cli = [sys.executable, "-m", "voxledger.cli", "--home", str(home)]

    def run(args: list[str], extra: dict[str, str] | None = None) -> tuple[float, str]:
        t0 = time.perf_counter()
        proc = subprocess.run([*cli, *args], env={**env, **(extra or {})}, capture_output=True, text=True, timeout=1800, check=False)
        if proc.returncode != 0:
            raise VoxledgerError(f"bench command voxledger {' '.join(args[:3])} ... exited {proc.returncode}: {proc.stderr[-1500:]}")
        return time.perf_counter() - t0, proc.stdout

    def cached(extra: dict[str, str] | None = None) -> float:
        wall, out = run(pipeline, extra)
        stages = json.loads(out[out.index("{") :])["stages"]
        if not stages or not all(s["cached"] for s in stages):
            raise VoxledgerError(
                f"a re-run computed stages {[s['stage'] for s in stages if not s['cached']]}: nothing was changed between runs"
            )
        return wall

    run(["init", str(corpus), "--out", str(plans), "--json"])
    smoke_plans(plans)
    pipeline = ["pipeline", "run", str(plans / "pipeline.yaml"), "--corpus", str(corpus), "--packets", str(packets), "--json"]
    try:
        t_first, _ = run(pipeline)
        served = wait_for_runner(home)
        t_runner = min(cached() for _ in range(repeats))
        t_own = min(cached({"VOXLEDGER_RUNNER": "false"}) for _ in range(repeats))
    finally:
        stop_server(home)
    t0 = time.perf_counter()
    for _ in range(repeats):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    t_floor = (time.perf_counter() - t0) / repeats
    label = "pipeline run, 45-clip voice, init's plans cut to a smoke run"
    return [
        Figure(f"{label}: first run (every stage computed)", t_first, "s"),
        Figure(f"{label}: every stage cached, the home's warm runner" + ("" if served else " (RUNNER NOT SERVING)"), t_runner, "s"),
        Figure(f"{label}: every stage cached, flow in the command's own process", t_own, "s"),
        Figure("cached pipeline run: runner / own process time", t_runner / t_own, "x"),
        Figure("python -c pass (the floor of any command)", t_floor, "s"),
    ]
