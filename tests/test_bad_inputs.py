"""Hostile and broken inputs through the real CLI: each is refused fast with one short error line,
never a traceback, never an "unexpected ... (a defect)" line, never an echo of the whole input."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from voxledger.cli import main

MAX_OUTPUT_CHARS = 3000  # a 20 MB input must not come back
DEFECT = re.compile(r"unexpected \w+(Error|Exception)")  # the boundary's line for a defect


def _bomb(levels: int = 10) -> str:
    """The "billion laughs": 377 bytes that expand to 9**10 strings."""
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, levels):
        name, prev = chr(ord("a") + i), chr(ord("a") + i - 1)
        text += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    return text


# (id, files to write {name: bytes}, CLI arguments with {d} = the folder, expected fragment of the error)
FileCases = list[tuple[str, dict[str, bytes], list[str], str]]
PLAN = ["pipeline", "stages", "{d}/plan.yaml"]
RECEIPT = ["receipt", "validate", "{d}/receipt.json"]
CASES: FileCases = [
    ("yaml-billion-laughs", {"plan.yaml": _bomb().encode()}, PLAN, "once its aliases (*name) are expanded"),
    ("yaml-billion-laughs-quoted-keys", {"plan.yaml": _bomb(12).replace("a:", '"a":').encode()}, PLAN, "aliases"),
    ("yaml-self-alias", {"plan.yaml": b"a: &x [*x]\n"}, PLAN, "alias that contains itself"),
    ("yaml-self-alias-mapping", {"plan.yaml": b"a: &x {b: *x}\n"}, PLAN, "alias that contains itself"),
    ("yaml-20MB-line", {"plan.yaml": b'name: "' + b"x" * 20_000_000 + b'"\n'}, PLAN, "more than the 4,194,304 bytes a plan may hold"),
    ("yaml-3MB-value", {"plan.yaml": b'name: demo\naudit_policy: "' + b"y" * 3_000_000 + b'"\n'}, PLAN, "Field required"),
    ("yaml-3MB-key", {"plan.yaml": b"z" * 3_000_000 + b": 1\n"}, PLAN, "not readable YAML"),
    ("yaml-200k-deep-flow", {"plan.yaml": b"a: " + b"[" * 200_000 + b"]" * 200_000 + b"\n"}, PLAN, "nested too deeply"),
    ("yaml-deep-block", {"plan.yaml": "".join(f"{' ' * i}k{i}:\n" for i in range(1500)).encode()}, PLAN, "nested too deeply"),
    ("yaml-not-utf8", {"plan.yaml": b"name: \xff\xfe\x00bad\n"}, PLAN, "not UTF-8"),
    ("yaml-binary", {"plan.yaml": bytes(range(256)) * 64}, PLAN, "plan file"),
    ("yaml-empty", {"plan.yaml": b""}, PLAN, "mapping at the top level"),
    ("yaml-list-top", {"plan.yaml": b"- 1\n- 2\n"}, PLAN, "mapping at the top level"),
    ("yaml-syntax", {"plan.yaml": b"name: [unclosed\n"}, PLAN, "not readable YAML"),
    ("yaml-tabs", {"plan.yaml": b"name:\n\t- x\n"}, PLAN, "not readable YAML"),
    ("yaml-nan-number", {"plan.yaml": b"name: .nan\naudit_policy: .inf\n"}, PLAN, "problem(s)"),
    ("yaml-python-tag", {"plan.yaml": b"name: !!python/object/apply:os.system ['true']\n"}, PLAN, "not readable YAML"),
    ("json-200k-deep", {"receipt.json": b"[" * 200_000 + b"]" * 200_000}, RECEIPT, "nested too deeply"),
    ("json-200k-deep-objects", {"receipt.json": b'{"a":' * 200_000 + b"1" + b"}" * 200_000}, RECEIPT, "nested too deeply"),
    ("json-900-deep-in-receipt", {"receipt.json": b'{"kind":"plan","x":' + b"[" * 900 + b"]" * 900 + b"}"}, RECEIPT, "problem"),
    ("json-20MB-kind", {"receipt.json": b'{"kind":"' + b"k" * 20_000_000 + b'"}'}, RECEIPT, "unknown receipt kind"),
    ("json-not-json", {"receipt.json": b"not json at all"}, RECEIPT, "not valid UTF-8 JSON"),
    ("json-not-utf8", {"receipt.json": b'{"kind": "\xff"}'}, RECEIPT, "not valid UTF-8 JSON"),
    ("json-array-top", {"receipt.json": b"[1, 2, 3]"}, RECEIPT, "a receipt is a JSON object"),
    ("json-nan-and-huge", {"receipt.json": b'{"kind": "plan", "x": NaN, "y": 1e999}'}, RECEIPT, "problem"),
    ("json-empty", {"receipt.json": b""}, RECEIPT, "not valid UTF-8 JSON"),
]

ARG_CASES: list[tuple[str, list[str], str]] = [
    ("lock-timeout-nan", ["--lock-timeout", "nan", "store", "verify"], "not a wait in seconds"),
    ("lock-timeout-negative", ["--lock-timeout", "-1", "store", "verify"], "not a wait in seconds"),
    ("lock-timeout-inf", ["--lock-timeout", "inf", "store", "verify"], "not a wait in seconds"),
    ("lock-timeout-zero", ["--lock-timeout", "0", "store", "verify"], "not a wait in seconds"),
    ("lock-timeout-overflow", ["--lock-timeout", "1e309", "store", "verify"], "not a wait in seconds"),
    ("lock-timeout-word", ["--lock-timeout", "forever", "store", "verify"], "not a valid float"),
    ("verify-traversal", ["store", "verify", "../../etc/passwd"], "not a digest or digest prefix"),
    ("verify-absolute", ["store", "verify", "/etc/passwd"], "not a digest or digest prefix"),
    ("verify-glob", ["store", "verify", "ab*"], "not a digest or digest prefix"),
    ("verify-too-long", ["store", "verify", "a" * 100_000], "not a digest or digest prefix"),
    ("receipt-show-traversal", ["receipt", "show", "../../etc/passwd"], "not a sha256 digest or prefix"),
    ("lineage-traversal", ["lineage", "../../../etc/shadow"], "not a sha256 digest or prefix"),
    ("package-verify-not-a-tar", ["package", "verify", "/etc/passwd"], "not an uncompressed tar package"),
    ("query-huge", ["query", "SELEC " + "x" * 5_000_000], "query does not parse"),
    ("query-copy", ["query", "COPY receipts TO '/tmp/x.csv'"], "query refused"),
    ("alias-at-huge", ["alias", "history", "--at", "9" * 1_000_000], "is not an ISO date/time"),
]


def _invoke(home: Path, args: list[str]) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    result = CliRunner().invoke(main, ["--home", str(home), *args])
    out = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        out += f"\nTraceback (escaped the CLI): {type(result.exception).__name__}"
    return result.exit_code, out, time.perf_counter() - t0


def _check(code: int, out: str, seconds: float, fragment: str) -> None:
    assert code in (1, 2), out[:MAX_OUTPUT_CHARS]
    assert len(out) < MAX_OUTPUT_CHARS, f"{len(out)} characters of output: {out[:300]}"
    assert "Traceback" not in out and not DEFECT.search(out) and "a defect in voxledger" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, out
    assert fragment in out, out
    assert all(len(line) <= 800 for line in out.splitlines()), out
    assert seconds < 30, f"took {seconds:.1f} s"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.factories import ingest_receipt
    from voxledger.stores.home import Home

    h = Home(tmp_path_factory.mktemp("bad-inputs") / "home")
    h.record(ingest_receipt(1, out=h.blobs.put_bytes(b"x")))
    return h.root


@pytest.mark.parametrize(("files", "args", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_file_is_refused_cleanly(home: Path, tmp_path: Path, files: dict[str, bytes], args: list[str], fragment: str) -> None:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    _check(*_invoke(home, [a.format(d=tmp_path) for a in args]), fragment)


@pytest.mark.parametrize(("args", "fragment"), [c[1:] for c in ARG_CASES], ids=[c[0] for c in ARG_CASES])
def test_bad_argument_is_refused_cleanly(home: Path, args: list[str], fragment: str) -> None:
    _check(*_invoke(home, args), fragment)


def test_the_suite_is_as_large_as_it_says() -> None:
    assert len(CASES) + len(ARG_CASES) == 42


def test_a_deep_submission_is_refused_cleanly() -> None:
    from voxledger.schemas.errors import PacketError
    from voxledger.tasks.listening.verify import parse_json

    with pytest.raises(PacketError, match=r"nested \d+ levels deep"):
        parse_json(b"[" * 200_000 + b"]" * 200_000)
    check: Callable[[bytes], object] = parse_json
    assert check(json.dumps({"a": [1, 2]}).encode()) == {"a": [1, 2]}
