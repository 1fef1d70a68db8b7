"""Read commands stay light: they answer from the catalog and the store without importing torch,
Prefect or the model stacks (those load inside the stages that need them). Each command runs in a
fresh interpreter, which then names every heavy module it imported."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

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
