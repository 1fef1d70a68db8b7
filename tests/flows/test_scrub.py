"""The scrub as a Prefect flow (``store verify --deep``) and as a scheduled deployment, against the
session's local Prefect server. The fault itself (a byte flipped under an unchanged stat) is made
as in ``tests/stores/test_scrub.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stores.test_scrub import _rot, _settle
from voxledger.flows.deploy import ensure_pools, register, scrub_deployment
from voxledger.flows.store import scrub_store
from voxledger.schemas.errors import PlanError, VoxledgerError
from voxledger.stores.hashing import hash_files
from voxledger.stores.home import Home

pytestmark = pytest.mark.prefect


def test_the_scrub_flow_reports_rot_and_a_scheduled_run_fails_on_it(home: Home, tmp_path: Path) -> None:
    clip = tmp_path / "a.wav"
    clip.write_bytes(b"b" * 4096)
    home.blobs.put_bytes(b"an object")
    _settle()
    hash_files([clip], cache=home.stat_cache)
    assert scrub_store(str(home.root)).problems == []
    _rot(home, clip)
    report = scrub_store(str(home.root))
    assert report.objects == 1 and report.stat_cache is not None and len(report.stat_cache.lied) == 1
    _rot(home, clip)  # rotted again, for the scheduled run
    with pytest.raises(VoxledgerError, match=r"scrub found 1 problem\(s\): .*a\.wav: the stat cache vouched"):
        scrub_store(str(home.root), fail_on_problems=True)


def test_the_scrub_deployment_registers_with_its_schedule(tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    spec = scrub_deployment(str(tmp_path / "home"), "0 4 * * 0", work_pool="vox-scrub")
    ensure_pools({"vox-scrub"})
    (deployment_id,) = register([spec])
    with get_client(sync_client=True) as client:
        got = client.read_deployment(deployment_id)
    assert (got.name, got.entrypoint, got.work_pool_name) == ("scrub-home", "voxledger/flows/store.py:scrub_store", "vox-scrub")
    assert [s.schedule.cron for s in got.schedules] == ["0 4 * * 0"]  # type: ignore[union-attr]
    assert got.parameters == {"home": str(tmp_path / "home"), "fail_on_problems": True}
    assert got.global_concurrency_limit is not None and got.global_concurrency_limit.limit == 1
    with pytest.raises(PlanError, match="not a five-field cron expression"):
        scrub_deployment(str(tmp_path), "every sunday")


def test_cli_deep_names_the_rotted_file_in_one_line_and_schedule_needs_deep(home: Home, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from voxledger.cli import main

    clip = tmp_path / "b.wav"
    clip.write_bytes(b"c" * 4096)
    _settle()
    hash_files([clip], cache=home.stat_cache)
    ok = CliRunner().invoke(main, ["--home", str(home.root), "store", "verify", "--deep"])
    assert ok.exit_code == 0 and "stat cache: 1 of 1 entries confirmed by a re-hash (1 files read beyond the store)" in ok.output, ok.output
    _rot(home, clip)
    bad = CliRunner().invoke(main, ["--home", str(home.root), "store", "verify", "--deep"])
    assert bad.exit_code == 1 and "1 stat-cache entr(ies) vouching for changed bytes" in bad.output, bad.output
    assert f"{clip}: the stat cache vouched for" in bad.output and "Traceback" not in bad.output
    usage = CliRunner().invoke(main, ["--home", str(home.root), "store", "verify", "--schedule", "0 4 * * 0"])
    assert usage.exit_code == 2 and "give --deep with it" in usage.output
