"""`voxledger store push|pull|status` from the command line, against a real S3 server (moto), as
Prefect flows: one home publishes, another ingests, the counts say what happened, bad settings
get one clear line, and a transient store error is retried by the engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from tests.factories import ingest_receipt
from tests.stores import test_s3
from voxledger.flows.sync import transient_store_error
from voxledger.schemas.errors import VoxledgerError
from voxledger.stores.home import Home
from voxledger.stores.s3 import S3BlobStore

endpoint, client, make_store = test_s3.endpoint, test_s3.client, test_s3.make_store


def _cli(home: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "voxledger.cli", "--home", str(home), *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def _invoke(home: Path, env: dict[str, str], *args: str) -> Any:
    """The same command in this process (click's runner): the CLI boundary is the same code."""
    from click.testing import CliRunner

    from voxledger.cli import main

    return CliRunner().invoke(main, ["--home", str(home), *args], env=env)


@pytest.mark.prefect
def test_push_then_pull_then_status_from_the_cli(make_store: Any, tmp_path: Path) -> None:
    remote: S3BlobStore = make_store()
    env = {**test_s3.FAKE_ENV, "VOXLEDGER_S3_BUCKET": remote.config.bucket, "VOXLEDGER_S3_PREFIX": "team",
           "VOXLEDGER_S3_ENDPOINT_URL": str(remote.config.endpoint_url)}  # fmt: skip
    a, b = Home(tmp_path / "a"), Home(tmp_path / "b")
    rids = a.record_many([ingest_receipt(i, out=a.blobs.put_bytes(b"cli-%d" % i)) for i in range(3)])

    before = _invoke(a.root, env, "store", "status", "--json")
    assert before.exit_code == 0, before.output
    assert json.loads(before.output) | {"store": ""} == {"store": "", "local_receipts": 3, "known_shared": 0, "not_pushed": 3,
                                                         "cursor": None, "new_segments": 0}  # fmt: skip

    pushed = _cli(a.root, env, "store", "push", "--json")
    assert pushed.returncode == 0, pushed.stderr
    doc = json.loads(pushed.stdout)
    assert (doc["receipts_copied"], doc["blobs_copied"], doc["missing_blobs"]) == (3, 3, [])
    again = _invoke(a.root, env, "store", "push")
    assert again.exit_code == 0 and "0 receipts and 0 blobs" in again.output, again.output

    pulled = _cli(b.root, env, "store", "pull", "--json")
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["catalog_rows_new"] == 3
    assert sorted(b.receipts.ids()) == sorted(rids)
    with b.catalog.connect(read_only=True) as con:
        flows = con.execute("SELECT count(*) FROM receipts").fetchone()
    assert flows == (3,)
    status = _invoke(b.root, env, "store", "status")
    assert status.exit_code == 0 and "3 known shared, 0 not pushed" in status.output and "segments in the bucket: 0" in status.output

    # the runs are Prefect flows: both show in the run history
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as pc:
        names = {r.name for r in pc.read_flows()}
    assert {"push", "pull"} <= names


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "set VOXLEDGER_S3_BUCKET"),
        ({"VOXLEDGER_S3_BUCKET": "b", "VOXLEDGER_S3_WORKERS": "many"}, "VOXLEDGER_S3_WORKERS='many' is not a whole number"),
    ],
)
@pytest.mark.prefect
def test_bad_settings_are_one_line(tmp_path: Path, env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in [k for k in os.environ if k.startswith("VOXLEDGER_S3_")]:
        monkeypatch.delenv(k)
    out = _invoke(tmp_path / "h", env, "store", "push")
    assert out.exit_code != 0 and message in out.output and "Traceback" not in out.output, out.output


def test_transient_errors_are_retried_and_others_are_not() -> None:
    def client_error(status: int, code: str) -> ClientError:
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")

    wrapped = VoxledgerError("PutObject failed")
    wrapped.__cause__ = EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
    assert transient_store_error(wrapped)
    assert transient_store_error(client_error(503, "SlowDown"))
    assert transient_store_error(client_error(500, "InternalError"))
    from botocore.exceptions import IncompleteReadError

    assert transient_store_error(IncompleteReadError(actual_bytes=5, expected_bytes=10))  # a body cut short
    assert not transient_store_error(client_error(403, "AccessDenied"))
    assert not transient_store_error(client_error(412, "PreconditionFailed"))
    assert not transient_store_error(VoxledgerError("object abc does not hash to its key"))


@pytest.mark.prefect
def test_the_push_flow_retries_a_dropped_connection(make_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from voxledger.flows import sync as flows_sync
    from voxledger.stores import sync as stores_sync

    remote: S3BlobStore = make_store()
    for k, v in {**test_s3.FAKE_ENV, "VOXLEDGER_S3_BUCKET": remote.config.bucket, "VOXLEDGER_S3_PREFIX": "team",
                 "VOXLEDGER_S3_ENDPOINT_URL": str(remote.config.endpoint_url)}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    home = Home(tmp_path / "h")
    home.record_many([ingest_receipt(i, out=home.blobs.put_bytes(b"retry-%d" % i)) for i in range(2)])
    real, calls = stores_sync.push_to, []

    def flaky(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            err = VoxledgerError("PutObject on the shared store failed")
            raise err from EndpointConnectionError(endpoint_url=str(remote.config.endpoint_url))
        return real(*args, **kw)

    monkeypatch.setattr(stores_sync, "push_to", flaky)
    monkeypatch.setitem(flows_sync.push_task.__dict__, "retry_delay_seconds", [0])
    out = flows_sync.push(str(home.root))
    assert len(calls) == 2 and out["receipts_copied"] == 2
