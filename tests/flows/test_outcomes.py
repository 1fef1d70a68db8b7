"""Records that say exactly what happened: each stage records its own failure, reuse verifies the
bytes it reuses, stage plan digests join the plans the stages used, and CLI work shows in Prefect."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.flows.conftest import run
from voxledger.cli import main
from voxledger.schemas.errors import TrainingError, VoxledgerError
from voxledger.schemas.pipeline import PipelineRunReceipt
from voxledger.stores.home import Home

pytestmark = pytest.mark.prefect

ORDER = ["audit", "train_base", "train_adapter", "promote", "evaluate", "package", "export_packets"]
# where each stage's work is looked up by its flow module (the task calls it from there)
TARGETS = {
    "audit": ("voxledger.flows.audit", "audit_corpus_fn"),
    "train_base": ("voxledger.flows.train", "run_training"),
    "train_adapter": ("voxledger.flows.train", "run_training"),
    "promote": ("voxledger.flows.promote", "prepare_promotion"),
    "evaluate": ("voxledger.flows.evaluate", "evaluate_plan_fn"),
    "package": ("voxledger.flows.package", "package_adapter_fn"),
    "export_packets": ("voxledger.flows.packets", "export_packets_for_evaluation"),
}


def _inject(monkeypatch: pytest.MonkeyPatch, stage: str, exc: Exception) -> None:
    import importlib

    module, name = TARGETS[stage]
    mod = importlib.import_module(module)
    real = getattr(mod, name)

    def failing(*args: Any, **kwargs: Any) -> Any:
        # both trainings share one function: fail only the one under test (base plan is "base.yaml")
        if stage.startswith("train_") and (kwargs.get("plan_name") == "base.yaml") != (stage == "train_base"):
            return real(*args, **kwargs)
        raise exc

    monkeypatch.setattr(mod, name, failing)


def _latest_failed_run(home: Home) -> PipelineRunReceipt:
    with home.catalog.connect(read_only=True) as con:
        rid = con.execute(
            "SELECT receipt_sha256 FROM receipts WHERE kind = 'pipeline_run' AND status = 'failed' ORDER BY finished_at DESC LIMIT 1"
        ).fetchone()
    assert rid is not None
    return home.receipts.read(rid[0], PipelineRunReceipt)


@pytest.mark.parametrize(
    ("stage", "error"),
    [(s, TrainingError(f"injected failure in {s}")) for s in ORDER] + [("evaluate", RuntimeError("injected defect"))],
    ids=[*ORDER, "evaluate-unexpected"],
)
def test_a_failing_stage_is_recorded_as_itself(
    first_run, corpus: Path, monkeypatch: pytest.MonkeyPatch, stage: str, error: Exception
) -> None:  # type: ignore[no-untyped-def]
    home_dir, plans, first, _ = first_run
    _inject(monkeypatch, stage, error)
    with pytest.raises(type(error)) as info:
        run(home_dir, corpus, plans)
    receipt = _latest_failed_run(Home(home_dir))
    if isinstance(info.value, VoxledgerError):
        assert info.value.receipt_id is not None
        assert f"pipeline stopped at {stage}" in str(info.value)
    names = [s.stage for s in receipt.stages]
    upto = ORDER.index(stage)
    assert names == ORDER[: upto + 1], "later stages must be absent"
    for s in receipt.stages[:upto]:  # earlier stages: succeeded and untouched (the first run's receipts, from cache)
        assert (s.status, s.receipt_id, s.cached) == ("succeeded", first[s.stage]["receipt_id"], True)
    failed = receipt.stages[upto]
    assert failed.status == "failed" and "injected" in failed.detail
    assert receipt.status == "failed" and receipt.error is not None and receipt.error.startswith(f"{stage}: ")


def test_stage_plan_digests_join_the_plans_the_stages_used(first_run) -> None:  # type: ignore[no-untyped-def]
    home = Home(first_run[0])
    with home.catalog.connect(read_only=True) as con:
        rows = con.execute(
            """
            WITH run AS (SELECT receipt_sha256 AS rid, doc FROM receipts WHERE kind = 'pipeline_run' AND status = 'succeeded'
                         ORDER BY finished_at LIMIT 1),
                 wanted AS (SELECT key, value->>'$' AS digest FROM run, json_each(run.doc->'$.parameters.stage_plans')),
                 stage_receipts AS (SELECT e.src AS stage_rid FROM edges e, run WHERE e.dst = run.rid AND e.role LIKE 'stage:%'),
                 used AS (SELECT p.doc->>'$.parameters.plan_sha256' AS digest FROM edges e
                          JOIN stage_receipts s ON e.dst = s.stage_rid
                          JOIN receipts p ON p.receipt_sha256 = e.src AND p.kind = 'plan')
            SELECT w.key, w.digest, (SELECT count(*) FROM used u WHERE u.digest = w.digest) FROM wanted w ORDER BY w.key
            """
        ).fetchall()
    assert [r[0] for r in rows] == sorted(
        ["adapter_training", "audit_policy", "base_training", "evaluation", "listening_protocol", "promotion_policy"]
    )
    assert all(n >= 1 for _, _, n in rows), f"stage plan digests with no plan receipt among the stages' inputs: {rows}"


def _flip_byte(path: Path) -> None:
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_tampered_clip_checkpoint_and_plan_are_regenerated(first_run, corpus: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src_home, plans, first, _ = first_run
    home_dir = tmp_path / "h"
    shutil.copytree(src_home, home_dir, ignore=shutil.ignore_patterns("prefect", "*.lock"))
    home = Home(home_dir)
    ev = home.receipts.read_document(first["evaluate"]["receipt_id"])
    clip = next(a["sha256"] for a in ev["subjects"] if a["role"].startswith("audio:adapter"))
    run_doc = home.receipts.read_document(first["train_adapter"]["receipt_id"])
    best = next(a["sha256"] for a in run_doc["subjects"] if a["role"] == "best")
    checkpoint_file = json.loads(home.blobs.get_bytes(best))["entries"][0]["sha256"]
    plan = ev["parameters"]["plan_sha256"]
    for sha in (clip, checkpoint_file, plan):
        _flip_byte(home.blobs.path_of(sha))
    second = run(home_dir, corpus, plans)
    assert all(s["status"] == "succeeded" for s in second["stages"])
    # the damaged checkpoint made the adapter's training run again; the clip (the gate evaluation
    # makes the same clip) and the plan were regenerated by the first stage that needed them
    assert not second["train_adapter"]["cached"]
    for sha in (clip, checkpoint_file, plan):
        home.blobs.verify(sha)  # healed in place (deterministic regeneration on this machine)
    quarantined = sorted(p.name.split(".")[0] for p in (home_dir / "store" / "quarantine").iterdir())
    assert set(quarantined) >= {clip, checkpoint_file, plan}  # the damaged copies are kept, out of the store
    result = CliRunner().invoke(main, ["--home", str(home_dir), "store", "verify"])
    assert result.exit_code == 0, result.output


def test_a_receipt_naming_a_damaged_output_is_never_recorded(home: Home) -> None:
    from voxledger.schemas.base import utc_now
    from voxledger.schemas.core import IngestParameters, IngestReceipt
    from voxledger.schemas.errors import DigestMismatchError
    from voxledger.tasks.receipting import artifact, build_receipt

    sha = home.blobs.put_bytes(b"some output")
    _flip_byte(home.blobs.path_of(sha))
    receipt = build_receipt(IngestReceipt, flow="t", task="t", started_at=utc_now(),
                            subjects=[artifact(home.blobs, "file", sha, "application/octet-stream")],
                            parameters=IngestParameters(source="bytes", name="x", file_count=1, total_bytes=11))  # fmt: skip
    with pytest.raises(DigestMismatchError, match=sha):
        home.record(receipt)
    assert home.blobs.put_bytes(b"some output") == sha  # putting the right bytes again heals the object
    home.record(receipt)


def test_cli_work_shows_in_prefect_history(first_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from prefect.client.orchestration import get_client

    from voxledger.tasks.listening.from_evaluation import stimuli_from_evaluation

    home_dir, plans, first, _ = first_run

    def cli(*args: str) -> str:
        result = CliRunner().invoke(main, ["--home", str(home_dir), *args])
        return f"{result.exit_code}\n{result.output}"

    out = cli("package", "build", first["train_adapter"]["receipt_id"][:12], "--checkpoint", "best", "--unpromoted", "--json")
    assert out.startswith("0\n"), out
    stimuli = tmp_path / "stimuli.json"
    stimuli.write_text(stimuli_from_evaluation(Home(home_dir), first["evaluate"]["receipt_id"]).model_dump_json())
    out = cli("packets", "export", "--plan", str(plans / "listening.yaml"), "--stimuli", str(stimuli), str(tmp_path / "packets"), "--json")
    assert out.startswith("0\n"), out
    packet_set = json.loads(out.split("\n", 1)[1])["receipt"]
    (tmp_path / "bogus.json").write_text("{}")
    out = cli("ratings", "aggregate", packet_set, str(tmp_path / "bogus.json"))
    assert out.startswith("1\n") and "Traceback" not in out  # refused, cleanly, and still a recorded flow run

    async def names() -> dict[str, list[str]]:
        async with get_client() as client:
            runs = await client.read_flow_runs(limit=200)
            flows = {f.id: f.name for f in await client.read_flows(limit=200)}
        found: dict[str, list[str]] = {}
        for r in runs:
            found.setdefault(flows.get(r.flow_id, "?"), []).append(r.state_type.value if r.state_type else "?")
        return found

    found = asyncio.run(names())
    assert "COMPLETED" in found.get("package", []), found
    assert "COMPLETED" in found.get("packets", []), found
    assert "FAILED" in found.get("ratings", []), found


def test_demo_report_reads_the_numbers_from_the_receipts(first_run) -> None:  # type: ignore[no-untyped-def]
    home_dir, _, first, _ = first_run
    result = CliRunner().invoke(main, ["--home", str(home_dir), "demo", "report", first["pipeline_receipt"][:12], "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [s["stage"] for s in report["stages"]] == ORDER
    ev = Home(home_dir).receipts.read_document(first["evaluate"]["receipt_id"])
    wer = {s["candidate"]: s["overall"]["wer:whisper_en"]["mean"] for s in ev["result"]["summaries"]}
    assert {c["candidate"]: c["wer_mean"] for c in report["candidates"]} == wer
