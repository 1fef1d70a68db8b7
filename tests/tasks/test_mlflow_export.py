"""``export mlflow`` of the shared pipeline run's home, as docs/packaging.md writes it: MLflow's own client
reads back one run per stage receipt with the receipts' params, metrics and per-epoch curves, the package as
a registered version the line's ``champion`` alias names, and a second export writes nothing new. Every
outgoing connection but the loopback (the session's Prefect server) is refused while exports run."""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from voxledger.cli import main
from voxledger.schemas.evaluation import EvaluationReceipt
from voxledger.schemas.mlflow_export import MlflowExportReceipt
from voxledger.schemas.package import PackageReceipt
from voxledger.schemas.training import TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.stores.queries import alias_moves, receipts_of_kinds
from voxledger.tasks.mlflow_export import RECEIPT_TAG, folder_store, model_name, stage_kinds

pytestmark = pytest.mark.prefect
DOC = Path(__file__).resolve().parents[2] / "docs" / "packaging.md"


def doc_block(fence: str, marker: str) -> str:
    """The body of docs/packaging.md's code block that opens with ``marker`` (or, for python, the first one after it)."""
    text = DOC.read_text()
    if fence == "bash":
        (block,) = re.findall(rf"```bash\n{re.escape(marker)}\n(.*?)```", text, flags=re.S)
        return str(block)
    after = text[text.index(marker) :]
    return str(re.findall(r"```python\n(.*?)```", after, flags=re.S)[0])


_connect = socket.socket.connect


def _loopback_only(sock: socket.socket, address: Any) -> Any:
    host = address[0] if isinstance(address, tuple) else address
    if sock.family == socket.AF_UNIX or host in ("127.0.0.1", "::1", "localhost"):
        return _connect(sock, address)
    raise OSError(f"network refused in this test: {address}")


@contextmanager
def loopback_only() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", _loopback_only)
        yield


@dataclass
class Exported:
    home: Home
    folder: Path
    first: MlflowExportReceipt
    second: MlflowExportReceipt
    outputs: list[str]
    client: Any


def _run_doc_commands(home: Path, cwd: Path) -> list[str]:
    outputs = []
    for line in doc_block("bash", "# doc-test: mlflow").splitlines():
        argv = shlex.split(line)
        assert argv[:3] == ["voxledger", "export", "mlflow"], line
        r = CliRunner().invoke(main, ["--home", str(home), *argv[1:]])
        assert r.exit_code == 0, (line, r.output)
        outputs.append(r.stdout)
    return outputs


@pytest.fixture(scope="module")
def exported(first_run, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:  # type: ignore[no-untyped-def]
    from mlflow import MlflowClient

    work = tmp_path_factory.mktemp("mlflow")
    shutil.copytree(first_run[0], work / "h", ignore=shutil.ignore_patterns("prefect", "*.lock", "pipeline.holder"))
    with pytest.MonkeyPatch.context() as mp, loopback_only():
        mp.chdir(work)
        outputs = _run_doc_commands(work / "h", work)
    home = Home(work / "h")
    ids = [rid for rid, _ in receipts_of_kinds(home.catalog, ["mlflow_export"])]
    assert len(ids) == 2, ids
    first, second = (home.receipts.read(rid, MlflowExportReceipt) for rid in ids)
    uri = folder_store(work / "mlflow")
    yield Exported(home, work / "mlflow", first, second, outputs, MlflowClient(tracking_uri=uri, registry_uri=uri))


def _runs(client: Any, experiment_id: str) -> list[Any]:
    return list(client.search_runs([experiment_id], max_results=1000))


def test_one_run_per_stage_receipt_with_its_params_metrics_curves_and_digests(exported: Exported) -> None:
    home, client = exported.home, exported.client
    stage_receipts = dict(receipts_of_kinds(home.catalog, stage_kinds()))
    runs = {r.data.tags[RECEIPT_TAG]: r for r in _runs(client, exported.first.result.experiment_id)}
    assert set(runs) == set(stage_receipts) and len(runs) >= 7, sorted(stage_receipts.values())
    assert {"training_run", "promotion", "evaluation", "package", "audit"} <= set(stage_receipts.values())
    for rid, run in runs.items():
        receipt = home.receipts.read(rid)
        assert run.data.tags["voxledger.kind"] == stage_receipts[rid] and run.info.status == "FINISHED"
        assert {k.removeprefix("voxledger.output."): v for k, v in run.data.tags.items() if k.startswith("voxledger.output.")} == {
            a.role: a.sha256 for a in receipt.subjects
        }
        assert run.info.start_time == int(receipt.started_at.timestamp() * 1000)
    # the shared home may hold more than the demo's one adapter run (other tests of its group add theirs): each is checked
    lora = [rid for rid, kind in stage_receipts.items() if kind == "training_run" and "lora" in runs[rid].data.params["mode"]]
    assert lora
    for train_rid in lora:
        run, training = runs[train_rid], home.receipts.read(train_rid, TrainingRunReceipt)
        assert (
            run.data.params["backend"] == training.parameters.backend
            and run.data.params["bound.plan_sha256"] == training.parameters.bound.plan_sha256
        )
        for curve in ("cv_loss", "train_loss"):
            history = client.get_metric_history(run.info.run_id, f"epochs.{curve}")
            assert sorted((m.step, m.value) for m in history) == [(e.epoch, getattr(e, curve)) for e in training.result.epochs]
        assert run.data.metrics["best_cv_loss"] == training.result.best_cv_loss
    assert max(len(home.receipts.read(rid, TrainingRunReceipt).result.epochs) for rid in lora) >= 2
    eval_rid = next(rid for rid, kind in stage_receipts.items() if kind == "evaluation")
    evaluation, metrics = home.receipts.read(eval_rid, EvaluationReceipt), runs[eval_rid].data.metrics
    checked = 0
    for summary in evaluation.result.summaries:
        for metric, interval in summary.overall.items():
            assert metrics[f"summaries.{summary.candidate}.overall.{metric}.mean"] == interval.mean
            checked += 1
    assert checked >= 10
    (artifact,) = client.list_artifacts(run.info.run_id)
    assert artifact.path == "receipt.json"
    assert Path(client.download_artifacts(run.info.run_id, "receipt.json", str(exported.folder.parent / "dl"))).read_bytes() == (
        home.blobs.get_bytes(train_rid)
    )


def test_the_package_is_a_registered_version_and_champion_follows_the_alias_history(exported: Exported) -> None:
    home, client = exported.home, exported.client
    rows, _ = alias_moves(home.catalog, "champion", "9999-12-31T00:00:00Z")  # the move in force (the shared home may hold several)
    ((line, _, target, *_),) = rows
    assert line == "spk_t/tiny" and model_name(line) == "spk_t.tiny"
    champion = client.get_model_version_by_alias("spk_t.tiny", "champion")
    package_rid = champion.tags[RECEIPT_TAG]
    package = home.receipts.read(package_rid, PackageReceipt)
    assert champion.tags["voxledger.package_sha256"] == package.result.package_sha256
    assert package.parameters.checkpoint_tree_sha256 == target and package.parameters.promotion_receipt == rows[0][6]
    assert client.get_registered_model("spk_t.tiny").tags["voxledger.line"] == "spk_t/tiny"
    versions = exported.first.result.versions  # one per succeeded package (the shared home may hold several)
    v = next(v for v in versions if v.version == str(champion.version))
    assert (v.model, v.created) == ("spk_t.tiny", True) and all(w.created for w in versions)
    local = client.download_artifacts(champion.run_id, f"package/{package.result.package_sha256}.tar", str(exported.folder.parent / "pk"))
    assert Path(local).read_bytes() == home.blobs.get_bytes(package.result.package_sha256)
    aliases = {a.alias: a for a in exported.first.result.aliases}
    assert set(aliases) == {"champion", "candidate"} and all(a.changed for a in aliases.values())
    assert aliases["champion"].version == str(champion.version)
    assert aliases["candidate"].version == str(client.get_model_version_by_alias("spk_t.tiny", "candidate").version)


def test_a_second_export_writes_nothing_and_says_so(exported: Exported) -> None:
    first, second = exported.first.result, exported.second.result
    assert first.runs_created == len(first.runs) and first.versions_created == len(first.versions) >= 1 and first.aliases_changed == 2
    assert (second.runs_created, second.versions_created, second.aliases_changed, second.abandoned_runs_deleted) == (0, 0, 0, 0)
    assert [r.run_id for r in second.runs] == [r.run_id for r in first.runs] and not any(r.created for r in second.runs)
    assert len(_runs(exported.client, second.experiment_id)) == len(first.runs)
    assert len(exported.client.search_model_versions()) == len(first.versions)
    assert "(0 new)" in exported.outputs[1] and f"({len(first.runs)} new)" in exported.outputs[0]
    assert {i.sha256 for i in exported.second.inputs} == {r.receipt_sha256 for r in second.runs}


def test_an_export_cut_short_is_finished_by_the_next(exported: Exported, tmp_path: Path) -> None:
    """A run left without its receipt tag (an export stopped mid-run) is deleted and that receipt exported again."""
    from voxledger.tasks.mlflow_export import export_mlflow_fn

    victim = exported.second.result.runs[0]
    exported.client.delete_tag(victim.run_id, RECEIPT_TAG)
    with loopback_only():
        third = export_mlflow_fn(exported.home, folder_store(exported.folder)).receipt.result
    assert (third.abandoned_runs_deleted, third.runs_created, third.versions_created) == (1, 1, 0)
    redone = next(r for r in third.runs if r.receipt_sha256 == victim.receipt_sha256)
    assert redone.created and redone.run_id != victim.run_id
    assert len(_runs(exported.client, third.experiment_id)) == len(exported.first.result.runs)


def test_a_package_missing_from_the_store_is_named_and_the_next_export_finishes(exported: Exported, tmp_path: Path) -> None:
    from voxledger.schemas.errors import BlobMissingError
    from voxledger.tasks.mlflow_export import export_mlflow_fn

    # the first package in export order loses its bytes: the first attempt stops there, before any version
    first_package = next(r for r in exported.first.result.runs if r.kind == "package")
    sha = exported.home.receipts.read(first_package.receipt_sha256, PackageReceipt).result.package_sha256
    v = next(v for v in exported.first.result.versions if v.package_sha256 == sha)
    blob = exported.home.blobs.path_of(v.package_sha256)
    blob.rename(tmp_path / "aside")
    try:
        with pytest.raises(BlobMissingError, match=f"package {v.package_sha256} .*`voxledger store pull`"):
            export_mlflow_fn(exported.home, folder_store(tmp_path / "store"))
    finally:
        (tmp_path / "aside").rename(blob)
    done = export_mlflow_fn(exported.home, folder_store(tmp_path / "store")).receipt.result
    # the first attempt wrote every run before the package's; the second wrote the rest, once each
    assert done.versions_created == len(done.versions) and done.runs_created == len(done.runs) - [r.kind for r in done.runs].index(
        "package"
    )
    assert len(_runs(exported.client.__class__(tracking_uri=folder_store(tmp_path / "store")), done.experiment_id)) == len(done.runs)
    # artifacts beside the database, never in the working folder
    assert (tmp_path / "store" / "artifacts").is_dir() and not Path("mlruns").exists()


def test_the_doc_reads_the_store_back_with_mlflows_client(exported: Exported, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(exported.folder.parent)
        exec(compile(doc_block("python", "# doc-test: mlflow"), str(DOC), "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(exported.first.result.runs) + 1
    champion = exported.client.get_model_version_by_alias("spk_t.tiny", "champion")
    v = next(v for v in exported.first.result.versions if v.version == str(champion.version))
    assert lines[-1] == f"{v.version} {v.package_sha256}"


def test_without_the_extra_the_command_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # what `import mlflow` meets where the extra is not installed
    r = CliRunner().invoke(main, ["--home", str(tmp_path / "h"), "export", "mlflow", str(tmp_path / "m")])
    assert r.exit_code == 1 and "pip install 'voxledger[mlflow]'" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "m").exists()


def test_only_the_export_module_imports_mlflow() -> None:
    """mlflow is an optional extra: no other module of voxledger may import it (every other command runs without it)."""
    from tests.test_layers import PACKAGE, _imports

    importers = sorted(
        str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if any(n == "mlflow" or n.startswith("mlflow.") for n in _imports(p))
    )
    assert importers == ["tasks/mlflow_export.py"]


def test_the_recorded_uri_holds_no_password_and_mlflow_telemetry_is_off() -> None:
    from mlflow.environment_variables import MLFLOW_DISABLE_TELEMETRY

    from voxledger.tasks.mlflow_export import load_mlflow, public_uri

    assert public_uri("https://joe:s3cret@mlflow.example.org:5000/x") == "https://mlflow.example.org:5000/x"
    assert public_uri("sqlite:////tmp/m/mlflow.db") == "sqlite:////tmp/m/mlflow.db"
    load_mlflow()
    assert MLFLOW_DISABLE_TELEMETRY.get() is True  # set before MLflow loads, unless the user set it


def test_a_folder_and_a_tracking_uri_together_are_refused(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        main, ["--home", str(tmp_path / "h"), "export", "mlflow", str(tmp_path / "m"), "--tracking-uri", "sqlite:///x.db"]
    )
    assert r.exit_code == 2 and "not both" in r.output and not (tmp_path / "m").exists()
