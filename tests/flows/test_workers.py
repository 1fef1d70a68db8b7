"""Stages on Prefect's own workers, over a shared S3 store: two ``prefect worker start`` processes on
two pools, each with its own home, run the audit and the base training deployed by
``voxledger deploy --shared-store``; a third, empty home pulls the bucket and holds what a
single-home run of the same plans produces (same cache keys, same output digests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.corpus_factory import build_small_corpus
from tests.flows.conftest import write_plans
from tests.stores import test_s3
from voxledger.flows.deploy import deployment_specs, ensure_pools, register
from voxledger.schemas.pipeline import PipelinePlan
from voxledger.stores.home import Home
from voxledger.tasks.plans import load_plan

pytestmark = pytest.mark.prefect

endpoint, client, make_store = test_s3.endpoint, test_s3.client, test_s3.make_store


def _worker(pool: str, home: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type", "process", "--limit", "1"]
    env = {**os.environ, **env, "VOXLEDGER_HOME": str(home), "PREFECT_WORKER_QUERY_SECONDS": "1"}  # looks every second, not 10
    return subprocess.Popen(cmd, env=env, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _outputs(home: Home) -> set[tuple[str, str, str]]:
    """(kind, cache key, subjects) of every stage receipt: what must match across machines. A
    training key names its audit receipt, whose id differs between two runs (its timestamps), so
    for training the outputs (checkpoint and best/last tree digests) are what is compared."""
    with home.catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT kind, CASE WHEN kind = 'audit' THEN doc->>'$.cache_key' ELSE '' END, doc->>'$.subjects' FROM receipts"
            " WHERE kind IN ('audit', 'training_run', 'checkpoint')"
        ).fetchall()
    return {(k, key, subjects) for k, key, subjects in rows}


def _deployed(
    remote: Any, tmp_path: Path, name: str, stage_pools: dict[str, str], base_epochs: int | None = None
) -> tuple[dict[str, str], Path, Path, list[Any]]:
    """A corpus, the test plans (pipeline ``name`` on pool ``<name>-cpu``), every deployment registered
    with ``--shared-store``: (S3 environment for workers, corpus, plans folder, specs)."""
    s3_env = {**test_s3.FAKE_ENV, "VOXLEDGER_S3_BUCKET": remote.config.bucket, "VOXLEDGER_S3_PREFIX": "team",
              "VOXLEDGER_S3_ENDPOINT_URL": str(remote.config.endpoint_url)}  # fmt: skip
    corpus = build_small_corpus(tmp_path / "corpus")
    plans = write_plans(tmp_path / "plans")
    if base_epochs is not None:
        base = yaml.safe_load((plans / "base.yaml").read_text()) | {"max_epochs": base_epochs}
        (plans / "base.yaml").write_text(yaml.safe_dump(base))
    pipe = yaml.safe_load((plans / "pipeline.yaml").read_text()) | {"name": name, "work_pool": f"{name}-cpu", "stage_pools": stage_pools}
    (plans / "pipeline.yaml").write_text(yaml.safe_dump(pipe))
    specs = deployment_specs(load_plan(plans / "pipeline.yaml", PipelinePlan), plans / "pipeline.yaml", home="unused", corpus=str(corpus),
                             shared_store=True)  # fmt: skip
    ensure_pools({f"{name}-cpu", *stage_pools.values()})
    register(specs)
    return s3_env, corpus, plans, specs


def test_two_workers_on_two_pools_share_one_bucket(make_store: Any, tmp_path: Path) -> None:
    from prefect.deployments import run_deployment

    remote = make_store()
    s3_env, corpus, plans, specs = _deployed(remote, tmp_path, "wk", {"train_base": "wk-gpu"}, base_epochs=1)
    assert all(s.parameters.get("home") == "" and s.env == {"VOXLEDGER_SYNC": "1"} for s in specs)

    workers = [_worker("wk-cpu", tmp_path / "home-cpu", s3_env, tmp_path / "cpu.log"),
               _worker("wk-gpu", tmp_path / "home-gpu", s3_env, tmp_path / "gpu.log")]  # fmt: skip
    try:
        audit_run = run_deployment("audit/wk-audit", timeout=600, poll_interval=1)
        assert audit_run.state is not None and audit_run.state.is_completed(), (tmp_path / "cpu.log").read_text()[-3000:]
        # which audit? the bucket says: a third home pulls it (as the pipeline's machine would)
        catalog = Home(tmp_path / "home-catalog")
        _pull(catalog, s3_env)
        with catalog.catalog.connect(read_only=True) as con:
            (audit_rid,) = con.execute("SELECT receipt_sha256 FROM receipts WHERE kind = 'audit'").fetchone()
        assert not (tmp_path / "home-gpu").exists()  # the training worker has not run anything yet
        train_run = run_deployment("train/wk-train_base", parameters={"audit_rid": audit_rid}, timeout=600, poll_interval=1)
        assert train_run.state is not None and train_run.state.is_completed(), (tmp_path / "gpu.log").read_text()[-3000:]
    finally:
        for w in workers:
            _stop(w)
    assert audit_rid in set(Home(tmp_path / "home-gpu").receipts.ids())  # the training worker pulled its input first
    _pull(catalog, s3_env)
    # the same stages in one home, in this process: same cache keys and output digests
    from voxledger.flows.audit import audit
    from voxledger.flows.train import train

    single = Home(tmp_path / "home-single")
    rid = audit(str(single.root), str(corpus), str(plans / "audit.yaml")).receipt_id
    train(str(single.root), str(corpus), rid, str(plans / "base.yaml"))
    assert _outputs(catalog) == _outputs(single) and len(_outputs(single)) >= 3
    with catalog.catalog.connect(read_only=True) as con:
        bound = con.execute("SELECT doc->>'$.parameters.bound.audit_receipt' FROM receipts WHERE kind = 'training_run'").fetchall()
    assert bound == [(audit_rid,)]  # lineage across machines: the run names the audit the other worker recorded


def _pull(home: Home, env: dict[str, str]) -> None:
    from voxledger.stores.s3 import S3BlobStore, S3Config
    from voxledger.stores.sync import ingest_from

    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        ingest_from(S3BlobStore(S3Config.from_env()), home)


@pytest.mark.slow
def test_a_worker_killed_mid_training_leaves_nothing_partial_and_the_retry_resumes(make_store: Any, tmp_path: Path) -> None:
    from prefect.deployments import run_deployment

    from voxledger.flows.audit import audit
    from voxledger.stores.s3 import S3BlobStore, S3Config
    from voxledger.stores.sync import push_to

    remote = make_store()
    s3_env, corpus, plans, _ = _deployed(remote, tmp_path, "kill", {"train_base": "kill-gpu"}, base_epochs=6)
    first = Home(tmp_path / "home-first")
    audit_rid = audit(str(first.root), str(corpus), str(plans / "audit.yaml")).receipt_id
    push_to(first, S3BlobStore(S3Config(bucket=remote.config.bucket, prefix="team", endpoint_url=remote.config.endpoint_url)))
    objects_before = _keys(remote)

    gpu_home = tmp_path / "home-gpu"
    worker = _worker("kill-gpu", gpu_home, s3_env, tmp_path / "gpu-1.log")
    try:
        run = run_deployment("train/kill-train_base", parameters={"audit_rid": audit_rid}, timeout=0)
        deadline = time.monotonic() + 300
        while not list(gpu_home.glob("runs/*/checkpoints/step-*")):  # mid-training: a checkpoint is on disk
            assert time.monotonic() < deadline, (tmp_path / "gpu-1.log").read_text()[-3000:]
            time.sleep(0.2)
        os.killpg(worker.pid, signal.SIGKILL)  # the worker and the flow run it started
        worker.wait()
    finally:
        _stop(worker)
    assert _keys(remote) == objects_before  # nothing of the killed stage reached the bucket, not even in part
    retry_worker = _worker("kill-gpu", gpu_home, s3_env, tmp_path / "gpu-2.log")
    try:
        retry = run_deployment("train/kill-train_base", parameters={"audit_rid": audit_rid}, timeout=600)
        assert retry.id != run.id and retry.state is not None and retry.state.is_completed(), (tmp_path / "gpu-2.log").read_text()[-3000:]
    finally:
        _stop(retry_worker)
    check = Home(tmp_path / "home-check")
    _pull(check, s3_env)
    with check.catalog.connect(read_only=True) as con:
        runs = con.execute("SELECT doc->>'$.parameters.resumed_at_steps', status FROM receipts WHERE kind = 'training_run'").fetchall()
    assert len(runs) == 1 and runs[0][1] == "succeeded", runs  # one completed stage receipt
    assert runs[0][0] != "[]", "the retry on the same worker home resumes from the killed run's checkpoint, and says so"
    for key in _keys(remote):  # every object in the bucket is whole
        if "/objects/" in key:
            check_digest = key.rsplit("/", 2)[-2] + key.rsplit("/", 1)[-1]
            remote.verify(check_digest)


def _keys(remote: Any) -> set[str]:
    pages = remote.client.get_paginator("list_objects_v2").paginate(Bucket=remote.config.bucket)
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


@pytest.mark.slow
def test_the_pipeline_dispatches_training_to_the_gpu_pool(make_store: Any, tmp_path: Path) -> None:
    from prefect.deployments import run_deployment

    remote = make_store()
    s3_env, corpus, plans, _ = _deployed(remote, tmp_path, "pp", {"train_base": "pp-gpu", "train_adapter": "pp-gpu"})
    cpu_home, gpu_home = tmp_path / "home-cpu", tmp_path / "home-gpu"
    workers = [_worker("pp-cpu", cpu_home, s3_env, tmp_path / "cpu.log"), _worker("pp-gpu", gpu_home, s3_env, tmp_path / "gpu.log")]
    try:
        run = run_deployment("pipeline/pp-pipeline", timeout=900)
        assert run.state is not None and run.state.is_completed(), (tmp_path / "cpu.log").read_text()[-4000:]
    finally:
        for w in workers:
            _stop(w)
    check = Home(tmp_path / "home-check")
    _pull(check, s3_env)
    with check.catalog.connect(read_only=True) as con:
        (stages,) = con.execute("SELECT doc->'$.stages' FROM receipts WHERE kind = 'pipeline_run' AND status = 'succeeded'").fetchone()
    import json

    recorded = {s["stage"]: s["receipt_id"] for s in json.loads(stages)}
    assert set(recorded) == {"audit", "train_base", "train_adapter", "promote", "evaluate", "package"}
    gpu, cpu = set(Home(gpu_home).receipts.ids()), set(Home(cpu_home).receipts.ids())
    # training was recorded on the GPU worker's home, the rest on the pipeline's (CPU) worker
    assert {recorded["train_base"], recorded["train_adapter"]} <= gpu
    assert recorded["promote"] in cpu and recorded["promote"] not in gpu
    assert all(rid in set(check.receipts.ids()) for rid in recorded.values())
