"""``prefect`` (orchestration cost per task) and ``demo`` (stage times of a past pipeline run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from voxledger.bench_sections.common import Figure
from voxledger.schemas.errors import VoxledgerError


def prefect_child(n_tasks: int) -> dict[str, float]:
    """Time flows of trivial tasks (stage task options, heartbeat off) and the plain calls."""
    from prefect import flow, task

    from voxledger.flows.common import STAGE_TASK
    from voxledger.hosting.runtime import prefect_session

    @task(name="bench_noop", **STAGE_TASK)
    def noop(i: int) -> int:
        return i

    @flow(name="bench_tasks")
    def tasks_flow(n: int) -> int:
        return sum(noop(i) for i in range(n))

    @flow(name="bench_empty")
    def empty_flow(n: int) -> int:
        return n

    def timed(fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    direct = timed(lambda: [noop.fn(i) for i in range(n_tasks)])
    with prefect_session(None):  # Prefect's temporary server: what a process without a server pays
        first = timed(lambda: empty_flow(0))
        empty = min(timed(lambda: empty_flow(0)) for _ in range(3))
        full = min(timed(lambda: tasks_flow(n_tasks)) for _ in range(2))
    return {"direct_s": direct, "first_s": first, "empty_s": empty, "full_s": full}


def bench_prefect(work: Path, n_tasks: int) -> list[Figure]:
    """Orchestration cost per task; a subprocess (not a pool worker) so the temporary server exits cleanly."""
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect-home"), "VOXLEDGER_PREFECT": "ephemeral"}  # never the user's Prefect database
    env.pop("PREFECT_API_URL", None)
    code = "import json, sys; from voxledger.bench_sections.orchestration import prefect_child; print('BENCH', json.dumps(prefect_child(int(sys.argv[1]))))"
    proc = subprocess.run([sys.executable, "-c", code, str(n_tasks)], env=env, capture_output=True, text=True, timeout=600, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("BENCH ")), None)
    if proc.returncode != 0 or line is None:
        raise VoxledgerError(f"prefect benchmark exited {proc.returncode}: {proc.stderr[-2000:]}")
    r = json.loads(line[6:])
    per_task = (r["full_s"] - r["empty_s"]) / n_tasks
    return [
        Figure("prefect: first flow of a process (starts the temporary server)", r["first_s"], "s"),
        Figure("prefect: empty flow, warm (heartbeat off)", r["empty_s"] * 1000, "ms"),
        Figure(f"prefect: flow of {n_tasks} trivial tasks, per task", per_task * 1000, "ms/task"),
        Figure("direct call of the same function", r["direct_s"] / n_tasks * 1e6, "us/call"),
        Figure("prefect task / direct call", per_task / max(r["direct_s"] / n_tasks, 1e-9), "x"),
    ]


DIRECT_AUDIT = (
    "import sys; from pathlib import Path; from voxledger.stores.home import Home; from voxledger.schemas.audit import AuditPolicy;"
    "from voxledger.tasks.plans import load_plan; from voxledger.tasks.stages.audit import audit_corpus_fn;"
    "out = audit_corpus_fn(Home(sys.argv[1]), Path(sys.argv[2]), load_plan(Path(sys.argv[3]), AuditPolicy), policy_name=Path(sys.argv[3]).name);"
    "assert out.cached"
)


PREFECT_IMPORTS = (
    "import prefect, prefect.flow_engine, prefect.task_engine, prefect.client.orchestration, prefect.events;"
    "from prefect.logging.configuration import setup_logging; setup_logging()"
)
"""What a flow run loads of Prefect before it talks to the server (measured by ``-X importtime``
and a profile of a cached ``voxledger audit``: the modules the engine imports lazily and the
logging configuration it parses), as one process."""


def bench_cli_audit(work: Path, size: Literal["tiny", "small", "full"]) -> list[Figure]:
    """A cached ``voxledger audit`` (a flow on this home's long-lived server) against the plain
    audit function, each as a whole process on the same corpus and home."""
    from voxledger.hosting.server import stop_server
    from voxledger.tasks.corpus.demo import build_demo_corpus

    corpus, home = work / "cli-corpus", work / "cli-home"
    build_demo_corpus(corpus, size=size)
    policy = Path(str(resources.files("voxledger") / "plans" / "audit-demo.yaml"))  # the bundled plan, wherever installed
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "VOXLEDGER_PREFECT")}
    env["VOXLEDGER_CACHE_DIR"] = str(work / "cli-cache")  # empty: the first home migrates its database, the second starts from it
    second_home = work / "cli-home-2"
    cli = [sys.executable, "-m", "voxledger.cli", "--home", str(home), "audit", str(corpus), "--policy", str(policy), "--json"]
    direct = [sys.executable, "-c", DIRECT_AUDIT, str(home), str(corpus), str(policy)]

    said: list[str] = []  # stderr of the latest command: its progress lines (stderr is a pipe here)

    def timed_run(cmd: list[str], extra: dict[str, str] | None = None) -> float:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env={**env, **(extra or {})}, capture_output=True, text=True, timeout=900, check=False)
        if proc.returncode != 0:
            raise VoxledgerError(f"bench command {' '.join(cmd[:6])} ... exited {proc.returncode}: {proc.stderr[-1500:]}")
        said[:] = proc.stderr.splitlines()
        return time.perf_counter() - t0

    floor_cmd = [sys.executable, "-c", "pass"]
    prefect_cmd = [sys.executable, "-c", PREFECT_IMPORTS]
    try:
        plain = cli[:-1]  # without --json: its progress lines on stderr say what a new home waits for
        t_first = timed_run(plain)  # audits, starts the home's server and, in the background, its flow runner
        t_told = waiting_said_at(said)
        t_seeded = timed_run([*plain[:4], str(second_home), *plain[5:]])  # the same in a second new home, its database from the template
        stop_server(second_home)
        runner_ready = wait_for_runner(home)
        served_before = _log_text(home).count(": returned")
        t_cli = min(timed_run(cli) for _ in range(3))
        runner_ready = runner_ready and _log_text(home).count(": returned") - served_before == 3
        t_inproc = min(timed_run(cli, {"VOXLEDGER_RUNNER": "false"}) for _ in range(3))
        t_direct = min(timed_run(direct) for _ in range(3))
        t_ephemeral = timed_run(cli, {"VOXLEDGER_PREFECT": "ephemeral"})
        t_prefect = min(timed_run(prefect_cmd) for _ in range(3)) - min(timed_run(floor_cmd) for _ in range(3))
    finally:
        stop_server(home)
        stop_server(second_home)
    gap = t_cli - t_direct
    return [
        Figure("cli audit, first command (audits, starts the home's Prefect server and flow runner)", t_first, "s"),
        Figure("the same in a second new home, its Prefect database copied from the first's template", t_seeded, "s"),
        Figure("first command: migrated database / copied template (time ratio)", t_first / max(t_seeded, 1e-9), "x"),
        Figure("first command in a new home (copied template) - the same command warm (runner)", t_seeded - t_cli, "s", "<= 5"),
        Figure(
            "first command: seconds until it says it is starting the home's Prefect server"
            + ("" if t_told is not None else " (NEVER SAID)"),
            t_told if t_told is not None else float("inf"),
            "s",
            "<= 1",
        ),
        Figure(
            "cli audit, cached, flow in the home's warm runner (process wall)"
            + ("" if runner_ready else " (NOT ALL SERVED BY THE RUNNER)"),
            t_cli,
            "s",
        ),
        Figure("cli audit, cached, flow in the command's own process (VOXLEDGER_RUNNER=false)", t_inproc, "s"),
        Figure("audit function called directly, cached (process wall)", t_direct, "s"),
        Figure("cli audit cached (runner) - direct call", gap, "s", "<= 1"),
        Figure("cli audit cached (own process) - direct call", t_inproc - t_direct, "s"),
        Figure("importing Prefect's engine, client, events and logging setup (process - python -c pass)", t_prefect, "s"),
        Figure("cli audit cached, Prefect's temporary server instead (process wall)", t_ephemeral, "s"),
    ]


def waiting_said_at(stderr_lines: list[str]) -> float | None:
    """When (its own ``[  t s]`` stamp) a command's progress lines first said it was starting the
    home's Prefect server; None when they never did."""
    for line in stderr_lines:
        if "starting this home's Prefect server" in line and line.startswith("[") and " s]" in line:
            return float(line[1 : line.index(" s]")])
    return None


def _log_text(home: Path) -> str:
    log = home / "prefect" / "runner.log"
    return log.read_text(errors="replace") if log.is_file() else ""


def wait_for_runner(home: Path, timeout_s: float = 120.0) -> bool:
    """Wait until the home's flow runner logs that it serves (it imports Prefect in the background)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if "serving" in _log_text(home):
            return True
        time.sleep(0.2)
    return False


# --- a past demo run ---------------------------------------------------------------------------


def bench_demo(home: str | None) -> list[Figure]:
    """Wall time per stage of the latest pipeline run in ``home``'s catalog (read only).

    With two or more runs, also the latest run's time over the first run's (a cached re-run
    shows how much the stage caches save). A home with no pipeline run gives one line saying so.
    """
    from voxledger.stores.catalog import Catalog
    from voxledger.stores.home import resolve_home

    root = resolve_home(home)
    db = root / "catalog.duckdb"
    runs: list[tuple[str, list[tuple[str, bool, float, str]]]] = []
    if db.is_file():
        with Catalog(db).connect(read_only=True) as con:
            if con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'pipeline_stages'").fetchone() != (0,):
                rows = con.execute(
                    "SELECT receipt_sha256, stage, cached, wall_s, status FROM pipeline_stages ORDER BY finished_at, receipt_sha256, seq"
                ).fetchall()
                for rid, *stage in rows:
                    if not runs or runs[-1][0] != rid:
                        runs.append((rid, []))
                    runs[-1][1].append(tuple(stage))
    if not runs:
        return [Figure(f"pipeline runs in {root} (none yet: `voxledger demo run` makes one)", 0, "runs")]
    latest_id, latest = runs[-1]
    figures = [Figure(f"pipeline runs in {root}", len(runs), "runs")]
    figures += [Figure(f"latest run {latest_id[:12]}: {s} ({'cached' if c else 'ran'}, {st})", w, "s") for s, c, w, st in latest]
    figures.append(Figure(f"latest run {latest_id[:12]}: all stages", sum(w for _, _, w, _ in latest), "s"))
    if len(runs) > 1:
        first_id, first = runs[0]
        n_cached = sum(c for _, c, _, _ in latest)
        figures.append(Figure(f"first run {first_id[:12]}: all stages", sum(w for _, _, w, _ in first), "s"))
        figures.append(
            Figure(
                f"latest ({n_cached} of {len(latest)} stages cached) / first run {first_id[:12]}: wall time",
                sum(w for _, _, w, _ in latest) / max(sum(w for _, _, w, _ in first), 1e-9),
                "x",
            )
        )
    return figures
