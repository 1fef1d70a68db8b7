"""``voxledger train`` of a cosyvoice3 plan through the CLI, under Prefect: repeatable, and exact after SIGKILL + resume.

Inside a Prefect flow, Prefect's own threads draw from python's process-wide ``random`` while
upstream's ``prepare_lm_input_target`` draws from it per utterance; the backend gives upstream a
generator of its own (seeded from (seed, step), saved in checkpoints). Each run is a separate
``voxledger`` process against the session's Prefect server, as a user runs it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.factories import terminal_sigint
from voxledger.tasks.backends.cosyvoice3.config import ENV_CHECKOUT, ENV_MODEL, ENV_WORK, CosyVoice3Config
from voxledger.tasks.processes import pid_alive

from .test_training import make_plan

ROOT = Path(__file__).resolve().parents[4]
pytestmark = [pytest.mark.prefect, pytest.mark.slow]  # five voxledger processes: 1-4 min on two cores


def _env(config: CosyVoice3Config) -> dict[str, str]:
    return {
        **os.environ,
        ENV_CHECKOUT: str(config.checkout_dir),
        ENV_MODEL: str(config.model_dir),
        ENV_WORK: str(config.cache_dir),
        "PYTHONPATH": str(ROOT),
    }


def _cli(home: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "voxledger.cli", "--home", str(home), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _json(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return dict(json.loads(out))


def test_two_cli_runs_and_a_killed_and_resumed_one_give_one_adapter(
    fake_config: CosyVoice3Config, small_corpus: Path, tmp_path: Path
) -> None:
    env = _env(fake_config)
    home = tmp_path / "home"
    audit = _json(_cli(home, env, "audit", str(small_corpus), "--policy", str(ROOT / "plans" / "audit-demo.yaml"), "--json"))["receipt"]
    plan_files = {}
    for name in ("first", "second", "killed"):  # one plan under three names: three runs (a name is not in the adapter files)
        plan = make_plan(name=f"cv3-{name}", max_epochs=3).model_dump(mode="json", exclude_none=True)
        plan_files[name] = tmp_path / f"cv3-{name}.yaml"
        plan_files[name].write_text(yaml.safe_dump({"kind": "training_plan", **plan}, sort_keys=False), encoding="utf-8")

    def train(name: str) -> subprocess.Popen[str]:
        return _cli(home, env, "train", str(small_corpus), "--audit", str(audit), "--plan", str(plan_files[name]), "--json")

    first = _json(train("first"))
    second = _json(train("second"))
    assert (first["last"], first["best"]) == (second["last"], second["best"])  # identical adapter trees
    proc = train("killed")
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and not list((home / "runs").glob("cv3-killed-*/checkpoints/step-00000002")):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the run finished before the kill: nothing was proved"
    resumed = _json(train("killed"))
    assert (resumed["last"], resumed["best"]) == (first["last"], first["best"])
    receipt = json.loads(
        subprocess.run(
            [sys.executable, "-m", "voxledger.cli", "--home", str(home), "receipt", "show", str(resumed["receipt"])],
            env=env, capture_output=True, text=True, check=True, timeout=300,
        ).stdout
    )  # fmt: skip
    assert receipt["result"]["resumed_at_steps"], receipt["result"]  # it did resume, from the killed run's checkpoint


def _two_ranks(config: CosyVoice3Config, corpus: Path, tmp: Path, name: str, max_epochs: int) -> tuple[dict[str, str], Path, str, Path]:
    """The environment of 2 gloo ranks, a home with a passing audit of ``corpus``, and a plan file of ``max_epochs``."""
    env = {**_env(config), "VOXLEDGER_COSYVOICE_DEVICE": "cpu", "VOXLEDGER_COSYVOICE_RANKS": "2"}
    home = tmp / "home"
    audit = _json(_cli(home, env, "audit", str(corpus), "--policy", str(ROOT / "plans" / "audit-demo.yaml"), "--json"))["receipt"]
    plan = tmp / f"{name}.yaml"
    doc = make_plan(name=name, frames_per_batch=800, max_epochs=max_epochs).model_dump(mode="json", exclude_none=True)
    plan.write_text(yaml.safe_dump({"kind": "training_plan", **doc}, sort_keys=False), encoding="utf-8")
    return env, home, str(audit), plan


def test_train_on_two_ranks_through_the_command_line(fake_config: CosyVoice3Config, small_corpus: Path, tmp_path: Path) -> None:
    # VOXLEDGER_COSYVOICE_RANKS=2: the command's flow starts two gloo ranks (spawned from Prefect's flow process)
    # and records the run as one process would, naming its world
    env, home, audit, plan = _two_ranks(fake_config, small_corpus, tmp_path, "cv3-ranks", max_epochs=2)
    out = _json(_cli(home, env, "train", str(small_corpus), "--audit", str(audit), "--plan", str(plan), "--json"))
    shown = subprocess.run([sys.executable, "-m", "voxledger.cli", "--home", str(home), "receipt", "show", str(out["receipt"])],
                           env=env, capture_output=True, text=True, check=True, timeout=300)  # fmt: skip
    receipt = json.loads(shown.stdout)
    dp = receipt["parameters"]["effective_config"]["data_parallel"]
    assert (dp["world_size"], dp["backend"], out["epochs"]) == (2, "gloo", 2), receipt
    assert receipt["environment"]["device"] == "cpu"


def test_ctrl_c_stops_every_rank_and_the_run_resumes(fake_config: CosyVoice3Config, small_corpus: Path, tmp_path: Path) -> None:
    env, home, audit, plan = _two_ranks(fake_config, small_corpus, tmp_path, "cv3-stopped", max_epochs=6)
    args = [
        sys.executable,
        "-m",
        "voxledger.cli",
        "--home",
        str(home),
        "train",
        str(small_corpus),
        "--audit",
        str(audit),
        "--plan",
        str(plan),
    ]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=terminal_sigint)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and not list(home.glob("runs/cv3-stopped-*/checkpoints/step-*")):
        time.sleep(0.05)
    ranks = [p for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()]
    ranks += [c for p in ranks for c in subprocess.run(["pgrep", "-P", p], capture_output=True, text=True).stdout.split()]
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and time.monotonic() - sent < 5.0, err[-2000:]
    assert err.rstrip().splitlines()[-1].startswith("Interrupted: ") and "Traceback" not in err and "leaked" not in err, err[-2000:]
    time.sleep(1)
    left = {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in ranks if pid_alive(int(p))}
    assert ranks and not left, f"a rank outlived the stopped command: {left}"
    resumed = _json(_cli(home, env, "train", str(small_corpus), "--audit", str(audit), "--plan", str(plan), "--json"))
    assert resumed["epochs"] == 6 and resumed["stop_reason"] == "max_epochs"
