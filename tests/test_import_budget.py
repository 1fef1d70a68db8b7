"""Read commands stay light: they answer from the catalog and the store without importing torch,
Prefect or the model stacks (those load inside the stages that need them). Each command runs in a
fresh interpreter, which then names every heavy module it imported."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.stores.test_verify import _record
from voxledger.stores.home import Home

HEAVY = ("torch", "prefect", "speechbrain", "transformers", "faster_whisper", "ctranslate2", "peft", "scipy", "sklearn", "librosa")
PROBE = """
import json, sys
from voxledger.cli import main
try:
    main.main(args=sys.argv[1:], standalone_mode=False)
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("\\nPROBE " + json.dumps({"code": code, "heavy": sorted(m for m in HEAVY if m in sys.modules)}))
""".replace("HEAVY", repr(HEAVY))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> tuple[Home, str]:
    tmp = tmp_path_factory.mktemp("budget")
    h = Home(tmp / "home")
    first, _, _ = _record(h, tmp, "champion")
    second, _, _ = _record(h, tmp, "package", parent=first)
    return h, second


READ_COMMANDS = [
    ["--help"],
    ["query", "SELECT kind, count(*) FROM receipts GROUP BY kind"],
    ["lineage", "{rid}", "--up"],
    ["receipt", "show", "{rid}"],
    ["provenance", "downstream", "{rid}"],
    ["provenance", "speaker", "spk-t1"],
    ["alias", "history"],
    ["base", "list"],
    ["capabilities"],
    ["catalog", "migrations"],
]


def test_read_commands_import_no_heavy_stack(home: tuple[Home, str]) -> None:
    h, rid = home

    def probe(args: list[str]) -> tuple[list[str], dict[str, object], str]:
        argv = ["--home", str(h.root), *(a.format(rid=rid) for a in args)]
        done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
        line = done.stdout.rsplit("PROBE ", 1)
        assert len(line) == 2, done.stdout[-2000:] + done.stderr[-2000:]
        return args, json.loads(line[1]), done.stdout + done.stderr

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(probe, READ_COMMANDS))
    for args, got, out in results:
        assert got["code"] in (0, None), (args, out[-2000:])
        assert got["heavy"] == [], f"voxledger {' '.join(args)} imported {got['heavy']}: import them inside the stage that needs them"


RESULT_CLASSES = """
import importlib, json, pkgutil, typing
import voxledger.flows as flows
from voxledger.tasks.stage import StageOutcome

found = set()
for info in pkgutil.iter_modules(flows.__path__):
    module = importlib.import_module(f"voxledger.flows.{info.name}")
    for obj in vars(module).values():
        fn = getattr(obj, "fn", None)
        if fn is None or not hasattr(obj, "flow_run_name") or getattr(obj, "__module__", "") != module.__name__:
            continue
        returned = typing.get_type_hints(fn).get("return")
        for t in (returned, *typing.get_args(returned)):
            t = typing.get_origin(t) or t
            if isinstance(t, type) and t.__module__.startswith("voxledger."):
                found.add((t.__module__, t.__qualname__))
todo = [StageOutcome]
while todo:
    cls = todo.pop()
    found.add((cls.__module__, cls.__qualname__))
    todo += cls.__subclasses__()
print("CLASSES " + json.dumps(sorted(found)))
"""


def test_what_a_flow_returns_unpickles_without_the_heavy_stack() -> None:
    """A command served by the home's runner unpickles its flow's result, importing the module of
    every class in it: each such module must be as light as a read command (the pipeline's
    summary, defined in its flow's module, once cost every runner-served `pipeline run` ~5 s)."""
    done = subprocess.run([sys.executable, "-c", RESULT_CLASSES], capture_output=True, text=True, timeout=300)
    classes = json.loads(done.stdout.rsplit("CLASSES ", 1)[1])
    modules = sorted({m for m, _ in classes})
    names = {name for _, name in classes}
    assert {"PipelineSummary", "StageOutcome", "PackageOutcome", "AggregateOutcome"} <= names and len(classes) >= 6, classes
    probe = (
        "import json, sys\nimport voxledger.cli\n"
        + "".join(f"import {m}\n" for m in modules)
        + f"print('\\nPROBE ' + json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    heavy = json.loads(out.stdout.rsplit("PROBE ", 1)[1])
    assert heavy == [], f"a flow's result class lives in a module that imports {heavy}: {modules}"


def test_binding_a_training_stage_imports_no_model_stack(tmp_path: Path) -> None:
    """A training stage binds its inputs (the backend's identity, the corpus's hashes, the features
    tree) before it can know it is cached: for the tiny backend none of that may import torch,
    transformers or PEFT (~5 s of imports in a new process, once paid by every cached
    `train_adapter`); building a model does, so the probe checks it sees them then."""
    from tests.corpus_factory import build_small_corpus

    corpus = build_small_corpus(tmp_path / "corpus")
    probe = f"""
import json, sys
from voxledger.bench_sections.features import bind_child
got = bind_child({str(tmp_path / "home")!r}, {str(corpus)!r}, "tiny")
seen = sorted(m for m in ("torch", "transformers", "peft") if m in sys.modules)
from voxledger.tasks.backends.tiny.config import TinyTTSConfig
from voxledger.tasks.backends.tiny.model import TinyTTS
TinyTTS(TinyTTSConfig(phonemes=("a",), speakers=("s",), hidden_size=16, ffn_size=32, postnet_channels=16))
print("\\nPROBE " + json.dumps({{"clips": got["clips"], "binding": seen, "model": sorted(m for m in ("torch", "transformers", "peft") if m in sys.modules)}}))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert "PROBE " in done.stdout, done.stderr[-3000:]
    out = json.loads(done.stdout.rsplit("PROBE ", 1)[1])
    assert out["clips"] > 0 and out["binding"] == [], out
    assert out["model"] == ["peft", "torch", "transformers"], out


def test_the_stage_flows_import_no_model_or_statistics_stack() -> None:
    """A runner's child imports every stage's flow before the first stage runs, also when each
    stage is then served from cache: those modules may import Prefect and numpy, but torch,
    scipy's statistics and signal packages, statsmodels and the model stacks load inside the
    stage that computes (they once cost every cached `pipeline run` ~3 s before its first stage)."""
    heavy = ("torch", "scipy", "statsmodels", "transformers", "peft", "speechbrain", "faster_whisper", "ctranslate2", "sklearn", "numba")
    probe = f"import json, sys\nimport voxledger.flows.pipeline\nprint('\\nPROBE ' + json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert "PROBE " in done.stdout, done.stderr[-3000:]
    assert json.loads(done.stdout.rsplit("PROBE ", 1)[1]) == []
