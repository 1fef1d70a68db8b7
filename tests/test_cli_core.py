"""The CLI as a user drives it: exit codes, JSON output, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from voxledger.cli import main
from voxledger.stores.home import Home

pytestmark = pytest.mark.prefect  # store put runs as a Prefect flow


def run(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--home", str(home), *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_put_verify_show_lineage_query_export(tmp_path: Path) -> None:
    h = tmp_path / "home"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("hello")
    code, out = run(h, "store", "put", str(tmp_path / "d"), "--json")
    assert code == 0, out
    put = json.loads(out)
    code, out = run(h, "store", "verify")
    assert code == 0 and "3 objects verified" in out  # file, manifest, receipt
    code, out = run(h, "receipt", "show", put["receipt"][:12])
    shown = json.loads(out)
    assert code == 0 and shown["kind"] == "ingest"
    # store put runs as a Prefect flow: the receipt names the flow and its task run
    assert shown["producer"]["flow"] == "store_put" and shown["producer"]["task_run_id"]
    code, out = run(h, "lineage", put["sha256"], "--up")
    assert code == 0 and "[tree]" in out and "ingest" in out
    code, out = run(h, "query", "SELECT kind, count(*) AS n FROM receipts GROUP BY kind", "--json")
    assert code == 0 and json.loads(out) == [{"kind": "ingest", "n": 1}]
    code, out = run(h, "export", "in-toto", put["receipt"])
    statement = json.loads(out)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"][0]["digest"]["sha256"] == put["sha256"]
    assert statement["predicate"]["receipt_sha256"] == put["receipt"]


def test_failures_exit_non_zero_with_a_reason(tmp_path: Path) -> None:
    h = tmp_path / "home"
    # a read command pointed at a home that does not exist (a mistyped --home) is refused, naming
    # the folder, and creates nothing there
    for args in (("query", "SELECT 1"), ("receipt", "show", "deadbeefdeadbeef"), ("alias", "history", "champion"),
                 ("provenance", "speaker", "spk1"), ("lineage", "deadbeefdeadbeef"), ("demo", "report"), ("capabilities",)):  # fmt: skip
        code, out = run(h, *args)
        assert code == 1 and out.startswith("Error: HomeNotFoundError: no voxledger home at " + str(h)), (args, out)
        assert not h.exists(), args
    Home(h)  # an empty home: the same commands now answer from it
    code, out = run(h, "query", "SELECT 1")
    assert code == 0, out
    code, out = run(h, "query", "DROP TABLE receipts")
    assert code != 0 and "read-only" in out
    code, out = run(h, "receipt", "show", "deadbeefdeadbeef")
    assert code != 0 and "no receipt or artifact" in out
    (tmp_path / "f").write_bytes(b"data")
    code, out = run(h, "store", "put", str(tmp_path / "f"), "--json")
    digest = json.loads(out)["sha256"]
    obj = h / "store" / "objects" / "sha256" / digest[:2] / digest[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"tampered")
    code, out = run(h, "store", "verify")
    assert code != 0 and digest in out and "corrupt" in out


def test_a_read_command_names_the_default_home_it_did_not_find(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VOXLEDGER_HOME", raising=False)
    result = CliRunner().invoke(main, ["query", "SELECT 1"], catch_exceptions=False)
    assert result.exit_code == 1 and f"no voxledger home at {tmp_path / '.voxledger'}:" in result.output, result.output
    monkeypatch.setenv("VOXLEDGER_HOME", str(tmp_path / "elsewhere"))
    result = CliRunner().invoke(main, ["alias", "history", "champion"], catch_exceptions=False)
    assert result.exit_code == 1 and f"no voxledger home at {tmp_path / 'elsewhere'}:" in result.output, result.output
    assert list(tmp_path.iterdir()) == []  # nothing created
    (tmp_path / "afile").write_text("not a home")
    monkeypatch.setenv("VOXLEDGER_HOME", str(tmp_path / "afile"))  # (--home itself must name a folder: click refuses a file)
    result = CliRunner().invoke(main, ["query", "SELECT 1"], catch_exceptions=False)
    assert result.exit_code == 1 and f"no voxledger home at {tmp_path / 'afile'}: it is a file, not a folder" in result.output, (
        result.output
    )


def test_schemas_are_current() -> None:
    result = CliRunner().invoke(main, ["receipt", "schemas"])
    assert result.exit_code == 0, result.output


def test_progress_lines_reach_the_prefect_run_log(tmp_path: Path) -> None:
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    (tmp_path / "f.bin").write_bytes(b"progress")
    code, out = run(tmp_path / "home", "store", "put", str(tmp_path / "f.bin"), "--json")
    assert code == 0, out
    code, shown = run(tmp_path / "home", "receipt", "show", json.loads(out)["receipt"])
    flow_run = json.loads(shown)["producer"]["flow_run_id"]

    async def messages() -> list[str]:
        async with get_client() as client:
            logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run])))
        return [log.message for log in logs]

    assert f"storing {tmp_path / 'f.bin'}" in asyncio.run(messages())  # kept in the run's history, not only on the console
