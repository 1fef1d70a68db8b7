"""One hostile file never sinks a batch (issue 32, item 1).

Each hostile file below ended the whole run before: ``unexpected RecursionError`` for deep
nesting, ``CanonicalizationError ... (a defect in voxledger)`` for a lone surrogate, naming no
file and recording nothing. Now each is refused by name with its reason, the good files are
aggregated, and the command's exit status says that some files were refused.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.tasks.listening.conftest import Exported
from tests.tasks.listening.factory import oracle_scorer, simulate_submission, write_json
from voxledger.cli import main
from voxledger.cli.ratings import REFUSED_EXIT
from voxledger.tasks.listening.verify import MAX_JSON_DEPTH, MAX_SUBMISSION_BYTES, nesting_depth
from voxledger.tasks.stages import ratings as agg
from voxledger.tasks.stages.ratings import aggregate_ratings

GOOD = ("r01", "r02", "r03")


def hostile_batch(ex: Exported, tmp: Path) -> list[Path]:
    """Three good files and four hostile ones, interleaved."""
    good = [write_json(tmp / f"{r}.json", simulate_submission(ex.packets / r, ex.key, oracle_scorer(), session=f"{i + 1:032x}"))
            for i, r in enumerate(GOOD)]  # fmt: skip
    deep = tmp / "deep.json"
    deep.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    # a genuine r04 file whose first row names its trial with a lone surrogate escape
    doc = simulate_submission(ex.packets / "r04", ex.key, oracle_scorer(), session=f"{9:032x}")
    text = json.dumps(doc, indent=1).replace(f'"trial": "{doc["ratings"][0]["trial"]}"', '"trial": "t\\ud800"', 1)
    assert "\\ud800" in text
    surrogate = tmp / "surrogate.json"
    surrogate.write_text(text, encoding="utf-8")
    big = tmp / "big.json"
    big.write_bytes(
        json.dumps(simulate_submission(ex.packets / "r05", ex.key, oracle_scorer(), session=f"{10:032x}")).encode() + b" " * 50_000_000
    )
    binary = tmp / "binary.json"
    binary.write_bytes(random.Random(32).randbytes(4096))
    return [good[0], deep, good[1], surrogate, big, binary, good[2]]


def test_hostile_files_are_refused_by_name_and_the_rest_aggregated(exported: Exported, tmp_path: Path) -> None:
    out = aggregate_ratings(exported.home, exported.receipt_id, hostile_batch(exported, tmp_path))
    res = out.receipt.result
    why = {r.file: r.reason for r in res.rejections}
    assert set(why) == {"deep.json", "surrogate.json", "big.json", "binary.json"}
    assert (
        why["deep.json"]
        == f"JSON nested 100000 levels deep; a submission nests at most {MAX_JSON_DEPTH}, so this file was not written by the page"
    )
    assert why["surrogate.json"].startswith("text at $.ratings[0].trial is not valid Unicode (a lone surrogate")
    assert why["big.json"] == f"file is {MAX_SUBMISSION_BYTES + 1} bytes, more than the {MAX_SUBMISSION_BYTES} a submission can be"
    assert why["binary.json"].startswith("not UTF-8 JSON (")
    assert res.submissions_accepted == 3 and len(out.submission_receipts) == 3
    assert sorted(s.rater_id for s in res.screening) == list(GOOD)
    assert res.attrition.missing_raters == ("r04", "r05", "r06")


def test_an_unforeseen_failure_in_one_file_refuses_that_file_only(
    exported: Exported, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = [write_json(tmp_path / f"{r}.json", simulate_submission(exported.packets / r, exported.key, oracle_scorer(), session=f"{i + 1:032x}"))
            for i, r in enumerate(GOOD)]  # fmt: skip
    real = agg.check_submission

    def fails_on_r02(name: str, *args: object, **kw: object) -> object:
        if name == "r02.json":
            raise RecursionError("maximum recursion depth exceeded")
        return real(name, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(agg, "check_submission", fails_on_r02)
    res = aggregate_ratings(exported.home, exported.receipt_id, good).receipt.result
    assert [(r.file, r.reason) for r in res.rejections] == [
        ("r02.json", "could not be checked (RecursionError: maximum recursion depth exceeded); the other files are not affected")
    ]
    assert res.submissions_accepted == 2


def test_nesting_depth_ignores_brackets_inside_strings() -> None:
    assert nesting_depth(b'{"a": [1, {"b": "[[[[{{{{\\"]]]"}]}') == 3
    assert nesting_depth(b"[" * 50 + b"]" * 50) == 50 and nesting_depth(b"12") == 0


@pytest.mark.prefect
def test_cli_exit_status_says_files_were_refused(exported: Exported, tmp_path: Path) -> None:
    files = [str(p) for p in hostile_batch(exported, tmp_path)]
    res = CliRunner().invoke(main, ["--home", str(exported.home.root), "ratings", "aggregate", exported.receipt_id, *files])
    assert res.exit_code == REFUSED_EXIT, res.output
    refused = sorted(line.split(":")[0] for line in res.output.splitlines() if line.startswith("refused "))
    assert refused == ["refused big.json", "refused binary.json", "refused deep.json", "refused surrogate.json"]
    assert "accepted 3 submission(s), refused 4" in res.output and "unexpected" not in res.output and "Traceback" not in res.output
    good_only = [f for f in files if Path(f).name in {f"{r}.json" for r in GOOD}]
    res = CliRunner().invoke(main, ["--home", str(exported.home.root), "ratings", "aggregate", exported.receipt_id, *good_only])
    assert res.exit_code == 0, res.output  # the same good files, alone: nothing refused
