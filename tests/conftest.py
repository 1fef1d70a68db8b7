"""Shared fixtures: an isolated voxledger home per test, quiet offline Prefect settings.

Tests that run Prefect flows (directly, through the CLI in-process or in a subprocess) carry the
``prefect`` marker and share one temporary Prefect server per session (``prefect_api``). Every
other test sees an API URL nothing listens on, so a flow run there fails at once with a
connection error instead of quietly starting a server of its own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests judge what they generate, never how fast: on a loaded machine (CI's two cores, or
# a suite beside other work) neither the per-example deadline nor the "too slow" health check may
# fail them. A test's own @settings keeps this (it names only what it changes), except a
# suppress_health_check list, which adds HealthCheck.too_slow itself.
settings.register_profile("voxledger", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("voxledger")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
os.environ.setdefault("PREFECT_SERVER_UI_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
NO_API_URL = "http://127.0.0.1:9/api"  # the discard port: nothing answers there
os.environ["PREFECT_API_URL"] = NO_API_URL
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    # parallel workers (`make test` runs two): one thread each, so they do not fight over the cores
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")


# The xdist groups that take longest, longest first (measured with `--durations` on an idle 2-core
# machine; a few minutes down to about 40 s each). They are handed out first, so the many short
# groups fill in around them and no long group starts near the end while the other worker idles.
LONGEST_GROUPS = (
    "first_run",
    "tests/flows/test_newcomer.py",
    "tests/flows/test_sweep.py",
    "tests/tasks/test_promotion.py",
    "tests/tasks/test_model_lines.py",
    "tests/test_extending_stage.py",
    "tests/test_bench.py",
    "tests/tasks/test_evaluation.py",
    "tests/hosting/test_server.py",
    "tests/flows/test_deploy.py",
    "tests/flows/test_workers.py",
    "tests/tasks/test_training.py",
    "tests/tasks/packaging/test_package_build.py",
    "tests/tasks/listening/test_commit_race.py",
    "tests/tasks/listening/test_packets_extend.py",
    "tests/tasks/listening/test_robustness.py",
    "tests/flows/test_own_corpus.py",
    "tests/test_cli_interrupt.py",
    "tests/tasks/backends/cosyvoice3/test_data_parallel.py",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-times",
        metavar="FILE",
        help="append each test's wall, own CPU and reaped children's CPU seconds to FILE (JSON lines) and print the "
        "totals; a child's CPU counts where it is reaped (a server started in one test and stopped in another counts there)",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """With ``--cpu-times``: one line per test (setup, call and teardown together), written with one append."""
    path = item.config.getoption("--cpu-times")
    if not path:
        yield
        return
    import json
    import resource
    import time

    def cpu(who: int) -> float:
        r = resource.getrusage(who)
        return r.ru_utime + r.ru_stime

    w0, s0, c0 = time.perf_counter(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    yield
    line = {"test": item.nodeid, "wall_s": time.perf_counter() - w0, "cpu_s": cpu(resource.RUSAGE_SELF) - s0,
            "children_cpu_s": cpu(resource.RUSAGE_CHILDREN) - c0}  # fmt: skip
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    path = config.getoption("--cpu-times")
    if not path or hasattr(config, "workerinput") or not Path(path).is_file():
        return
    import json

    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    total = {k: sum(r[k] for r in rows) for k in ("wall_s", "cpu_s", "children_cpu_s")}
    terminalreporter.write_line(
        f"cpu times ({path}, {len(rows)} tests): wall {total['wall_s']:.0f} s summed over workers, own CPU {total['cpu_s']:.0f} s, "
        f"children's CPU {total['children_cpu_s']:.0f} s"
    )
    for r in sorted(rows, key=lambda r: -(r["cpu_s"] + r["children_cpu_s"]))[:10]:
        terminalreporter.write_line(f"  {r['cpu_s'] + r['children_cpu_s']:7.1f} s CPU  {r['wall_s']:7.1f} s wall  {r['test']}")


def pytest_configure(config: pytest.Config) -> None:
    """xdist hands out groups with the most tests first; here the order of the collection decides
    (``pytest_collection_modifyitems`` puts the longest groups first). A ``--cpu-times`` file must be
    appendable before any test runs."""
    cpu_times = config.getoption("--cpu-times", default=None)
    if cpu_times and not hasattr(config, "workerinput"):
        try:
            with open(cpu_times, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise pytest.UsageError(
                f"--cpu-times {cpu_times}: cannot append to it ({exc.strerror}); give a file in a writable folder"
            ) from exc
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which turns the xdist_group marks into the "@group" ids it schedules by
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``) a module's tests stay on one worker, so its
    module-scoped fixtures (trained models, corpora) are built once, and every test that uses the
    session's pipeline run (``first_run``) shares one worker, in collection order. The longest
    groups (``LONGEST_GROUPS``) come first under xdist; within a group the collection order stays. Tests marked
    ``prefect`` get the session's Prefect server first, before any fixture that runs a flow."""
    groups: dict[pytest.Item, str] = {}
    for item in items:
        fixturenames = getattr(item, "fixturenames", [])
        if item.get_closest_marker("prefect") is not None and "prefect_api" not in fixturenames:
            fixturenames.insert(0, "prefect_api")
        uses_run = "first_run" in fixturenames
        groups[item] = "first_run" if uses_run else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(groups[item]))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker's collection is the order groups are handed out in
        rank = {g: i for i, g in enumerate(LONGEST_GROUPS)}
        items.sort(key=lambda item: rank.get(groups[item], len(rank)))  # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """Under ``--dist loadgroup`` every test id a worker collected must carry its "@group" suffix
    (every test has an xdist_group); without it xdist hands out tests one by one and every module- and
    session-scoped fixture is built on each worker. Stops the run in the controller, with the reason."""
    config = getattr(node, "config", None)
    if config is None or config.getvalue("dist") != "loadgroup":
        return
    ungrouped = [i for i in ids if "@" not in i]
    if ungrouped:
        pytest.exit(
            f"pytest-xdist did not apply the xdist_group of {len(ungrouped)} test(s) (e.g. {ungrouped[0]}) under "
            f"pytest {pytest.__version__}: install the pinned test extra (pip install -c constraints.txt -e '.[test]')",
            returncode=4,
        )


@pytest.fixture(scope="session")
def prefect_api():  # type: ignore[no-untyped-def]
    """One Prefect server (a temporary local one) for the whole session, in this process and in
    every CLI subprocess a test starts (its URL is exported), so no test starts a server per home."""
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    os.environ.pop("PREFECT_API_URL", None)  # the harness's server process inherits the environment
    with temporary_settings(restore_defaults={PREFECT_API_URL}), prefect_test_harness(server_startup_timeout=90):
        os.environ["PREFECT_API_URL"] = str(PREFECT_API_URL.value())
        try:
            yield os.environ["PREFECT_API_URL"]
        finally:
            os.environ["PREFECT_API_URL"] = NO_API_URL


@pytest.fixture(autouse=True)
def _no_prefect_api_unless_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A test without the ``prefect`` marker sees no API even after the session's server started
    for other tests in this process: not in the environment, the current or the global settings."""
    if "prefect_api" in request.fixturenames or "prefect.context" not in sys.modules:
        yield  # without Prefect loaded yet, it will read NO_API_URL from the environment
        return
    import prefect.context

    monkeypatch.setenv("PREFECT_API_URL", NO_API_URL)
    current = prefect.context.get_settings_context()
    with prefect.context.SettingsContext(profile=current.profile, settings=_no_api_settings(current.settings)):
        monkeypatch.setattr(prefect.context, "GLOBAL_SETTINGS_CONTEXT", prefect.context.get_settings_context())
        yield


_NO_API: list[tuple[object, object]] = []  # (settings, the same with NO_API_URL): one entry, held so the first is never collected


def _no_api_settings(settings):  # type: ignore[no-untyped-def]
    """``settings`` with the API URL pointed at NO_API_URL, what ``temporary_settings(updates=...)``
    builds; built once per settings object (a build costs ~80 ms, and this runs for most tests)."""
    from prefect.settings import PREFECT_API_URL

    if not _NO_API or _NO_API[0][0] is not settings:
        _NO_API[:] = [(settings, settings.copy_with_update(updates={PREFECT_API_URL: NO_API_URL}))]
    return _NO_API[0][1]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small synthetic corpus of the shared pipeline run (tests/corpus_factory.py)."""
    from tests.corpus_factory import build_small_corpus

    return build_small_corpus(tmp_path_factory.mktemp("pc") / "c")


@pytest.fixture(scope="session")
def first_run(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> tuple[Path, Path, dict, float]:  # type: ignore[type-arg]
    """One full pipeline run (tests/flows/conftest.py's plans) shared by every test that only reads it or
    works on a copy: (home, plans, summary, seconds). Defined here, once, so the flow and dashboard
    tests get the same run (a fixture defined in two conftest files runs twice)."""
    import time

    from tests.flows.conftest import run, write_plans

    root = tmp_path_factory.mktemp("pipe")
    plans = write_plans(root / "plans")
    t0 = time.perf_counter()
    summary = run(root / "h", corpus, plans)
    return root / "h", plans, summary, time.perf_counter() - t0


@pytest.fixture
def home(tmp_path: Path):
    """A fresh, empty voxledger home."""
    from voxledger.stores.home import Home

    return Home(tmp_path / "home")


@pytest.fixture(autouse=True)
def _no_lazy_speechbrain_placeholders():  # type: ignore[no-untyped-def]
    """Tests that load ECAPA directly leave SpeechBrain's lazy placeholders in sys.modules;
    hypothesis walks sys.modules and would trip over them (see drop_unloaded_lazy_modules)."""
    import sys

    yield
    if "speechbrain" in sys.modules and not _MODULES_SWEPT.issuperset(sys.modules):  # no new module since the last sweep: nothing to drop
        from voxledger.tasks.metrics.speaker import drop_unloaded_lazy_modules

        drop_unloaded_lazy_modules()
        _MODULES_SWEPT.clear()
        _MODULES_SWEPT.update(sys.modules)


_MODULES_SWEPT: set[str] = set()  # the modules present after the last sweep (a sweep walks all of them: ~20 ms)
