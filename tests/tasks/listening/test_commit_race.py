"""The accept decision cannot race and a kill cannot lock a rater out (issue 32, items 2 and 3).

Two real processes aggregate at once; ``VOXLEDGER_TEST_COMMIT_DELAY_S`` holds the first inside
its commit window (each pause announced on stderr and released by the test with SIGUSR1) (catalog lock held, submission receipts written, aggregate not yet written)
while the second checks its files. Before, both accepted a submission for the same packet, and a
process killed in that window left orphan submission receipts that ``catalog rebuild`` brought
back and the next run counted as a replay.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.tasks.listening.conftest import Exported
from tests.tasks.listening.factory import oracle_scorer, simulate_submission, write_json
from voxledger.stores.home import Home
from voxledger.stores.queries import aggregated_submissions
from voxledger.tasks.stages.ratings import COMMIT_JOURNAL, aggregate_ratings

ROOT = Path(__file__).resolve().parents[3]
DRIVER = """
import json, sys
from pathlib import Path
from voxledger.schemas.errors import VoxledgerError
from voxledger.stores.home import Home
from voxledger.tasks.stages.ratings import aggregate_ratings
home, rid, files = Home(sys.argv[1]), sys.argv[2], [Path(p) for p in sys.argv[3:]]
try:
    out = aggregate_ratings(home, rid, files)
except VoxledgerError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps({"accepted": out.receipt.result.submissions_accepted,
                      "rejections": {r.file: r.reason for r in out.receipt.result.rejections}}))
"""


def start(ex: Exported, files: list[Path], delay_s: float = 0.0) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VOXLEDGER_TEST_COMMIT_DELAY_S": str(delay_s)}
    cmd = [sys.executable, "-c", DRIVER, str(ex.home.root), ex.receipt_id, *map(str, files)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(p: subprocess.Popen[str]) -> dict[str, object]:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def wait_for_pause(p: subprocess.Popen[str], where: str) -> None:
    """Read the process's stderr until it announces the test pause ``where``."""
    assert p.stderr is not None
    for line in p.stderr:
        if line.startswith(f"voxledger test pause: {where}"):
            return
    raise AssertionError(f"the aggregation ended without pausing at {where!r} (exit {p.wait()})")


def release(p: subprocess.Popen[str], where: str) -> None:
    """Wait until the process pauses at ``where``, then let it go on (SIGUSR1 ends a test pause)."""
    wait_for_pause(p, where)
    p.send_signal(signal.SIGUSR1)


LOCK, DECIDED, WRITTEN = "waiting for the commit lock", "accept decision taken", "submission receipts written, aggregate not yet"
HOLD_S = 120.0  # a pause's longest wait; each ends when the test releases it
OVERLAP_S = 12.0  # long enough for a second aggregation to start and reach the catalog on a loaded machine


def doc(ex: Exported, rater: str, session: str) -> dict[str, object]:
    return simulate_submission(ex.packets / rater, ex.key, oracle_scorer(), session=session)


def test_two_overlapping_aggregations_accept_a_packet_once(exported: Exported, tmp_path: Path) -> None:
    v1 = write_json(tmp_path / "r06_v1.json", doc(exported, "r06", "1" * 32))
    v2 = write_json(tmp_path / "r06_v2.json", doc(exported, "r06", "2" * 32))
    other = write_json(tmp_path / "r05.json", doc(exported, "r05", "3" * 32))
    first = start(exported, [v1], delay_s=HOLD_S)
    release(first, LOCK)
    wait_for_pause(first, DECIDED)  # the first accepted v1 and has not committed yet
    second = start(exported, [v2, other], delay_s=HOLD_S)
    # the second starts, checks its files and waits for the catalog's lock while the first is between
    # decision and commit (a wait nothing outside it can see, hence a clock here)
    time.sleep(OVERLAP_S)
    first.send_signal(signal.SIGUSR1)
    release(first, WRITTEN)
    for where in (LOCK, DECIDED, WRITTEN):  # the second decides once the first has committed and let the lock go
        release(second, where)
    a, b = result(first), result(second)
    assert a == {"accepted": 1, "rejections": {}}
    assert b["accepted"] == 1 and list(b["rejections"]) == ["r06_v2.json"]  # type: ignore[call-overload]
    assert str(b["rejections"]["r06_v2.json"]).startswith(  # type: ignore[index]
        "replay: packet of rater r06 already has an accepted submission (an earlier aggregation"
    )
    packet = next(p.packet_sha256 for p in exported.receipt.parameters.packets if p.rater_id == "r06")
    assert aggregated_submissions(exported.home.catalog, exported.receipt_id)[packet] == json_sha(v1)
    # a later run agrees with the committed state: v1 is still welcome, v2 still a replay
    later = aggregate_ratings(exported.home, exported.receipt_id, [v1, v2]).receipt.result
    assert later.submissions_accepted == 1 and [r.file for r in later.rejections] == ["r06_v2.json"]


def test_session_reused_in_another_raters_file_is_refused_across_runs(exported: Exported, tmp_path: Path) -> None:
    a = write_json(tmp_path / "r01.json", doc(exported, "r01", "a" * 32))
    assert aggregate_ratings(exported.home, exported.receipt_id, [a]).receipt.result.submissions_accepted == 1
    b = write_json(tmp_path / "r02.json", doc(exported, "r02", "a" * 32))  # same page session, another rater's packet
    c = write_json(tmp_path / "r03.json", doc(exported, "r03", "c" * 32))
    res = aggregate_ratings(exported.home, exported.receipt_id, [b, c]).receipt.result
    assert [(r.file, r.reason.split(" in an earlier")[0]) for r in res.rejections] == [
        ("r02.json", f"replay: session {'a' * 32} was already accepted for rater r01")
    ]
    assert res.submissions_accepted == 1


def test_kill_in_the_commit_window_then_rebuild_does_not_lock_the_rater_out(exported: Exported, tmp_path: Path) -> None:
    killed = write_json(tmp_path / "r02_v1.json", doc(exported, "r02", "4" * 32))
    p = start(exported, [killed], delay_s=HOLD_S)
    release(p, LOCK)
    release(p, DECIDED)
    wait_for_pause(p, WRITTEN)
    os.kill(p.pid, signal.SIGKILL)  # inside the commit window: after the submission receipt, before the aggregate
    p.communicate(timeout=60)
    journal = exported.home.catalog.path.with_name(COMMIT_JOURNAL)
    names = json.loads(journal.read_text())
    orphan = names["submissions"][0]
    assert exported.home.receipts.has(orphan)
    assert not exported.home.receipts.has(names["aggregate"])
    Home(exported.home.root).rebuild_catalog()  # `voxledger catalog rebuild`: the orphan is indexed again
    with exported.home.catalog.connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM receipts WHERE receipt_sha256 = ?", [orphan]).fetchone()[0] == 1  # type: ignore[index]
    assert aggregated_submissions(exported.home.catalog, exported.receipt_id) == {}  # but no aggregate names it
    # the rater exports again from the page: a new file, a new session
    redo = write_json(tmp_path / "r02_v2.json", doc(exported, "r02", "5" * 32))
    res = aggregate_ratings(exported.home, exported.receipt_id, [redo]).receipt.result
    assert res.submissions_accepted == 1 and not res.rejections
    assert not journal.exists()  # the interrupted commit was cleared under the lock
    Home(exported.home.root).rebuild_catalog()  # and a rebuild after that keeps the accepted file accepted
    again = aggregate_ratings(exported.home, exported.receipt_id, [redo, killed]).receipt.result
    assert again.submissions_accepted == 1 and [r.file for r in again.rejections] == ["r02_v1.json"]


def test_kill_after_the_aggregate_reached_the_store_is_finished_not_lost(exported: Exported, tmp_path: Path) -> None:
    """The aggregate receipt is the commit point: once it is in the store the commit is rolled forward."""
    from voxledger.tasks.stages import ratings as agg

    f = write_json(tmp_path / "r03.json", doc(exported, "r03", "6" * 32))
    home = exported.home
    real_ingest = home.catalog.ingest

    def dies_before_indexing(*_: object, **__: object) -> int:
        raise KeyboardInterrupt  # what a kill between the aggregate's marker and the catalog transaction leaves

    home.catalog.ingest = dies_before_indexing  # type: ignore[method-assign]
    try:
        aggregate_ratings(home, exported.receipt_id, [f])
    except KeyboardInterrupt:
        pass
    home.catalog.ingest = real_ingest  # type: ignore[method-assign]
    journal = home.catalog.path.with_name(agg.COMMIT_JOURNAL)
    names = json.loads(journal.read_text())
    assert home.receipts.has(names["aggregate"]) and aggregated_submissions(home.catalog, exported.receipt_id) == {}
    redo = write_json(tmp_path / "r03_v2.json", doc(exported, "r03", "7" * 32))
    r04 = write_json(tmp_path / "r04.json", doc(exported, "r04", "8" * 32))
    res = aggregate_ratings(home, exported.receipt_id, [redo, r04]).receipt.result  # finishes the commit first
    assert res.submissions_accepted == 1 and not journal.exists()
    assert [r.file for r in res.rejections] == ["r03_v2.json"] and res.rejections[0].reason.startswith("replay: packet of rater r03")


def json_sha(path: Path) -> str:
    from voxledger.schemas.canonical import sha256_hex

    return sha256_hex(path.read_bytes())
