"""Training on the tiny backend: receipts and curves, exact resume after SIGKILL, refusals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.corpus_factory import build_small_corpus
from voxledger.schemas.audit import AuditPolicy
from voxledger.schemas.errors import DigestMismatchError, TrainingError
from voxledger.schemas.training import LoraSettings, OptimSettings, TrainingPlan
from voxledger.stores.home import Home
from voxledger.tasks.plans import load_plan
from voxledger.tasks.stages.audit import audit_corpus_fn
from voxledger.tasks.stages.train import run_training

ROOT = Path(__file__).resolve().parents[2]
TINY_MODEL = {"hidden_size": 64, "backbone_layers": 2, "attention_heads": 4, "kv_heads": 2, "ffn_size": 128,
              "postnet_channels": 64, "encoder_layers": 2}  # fmt: skip


def base_plan(**over: object) -> TrainingPlan:
    fields = dict(name="t-base", mode="full", train_splits=("train",), cv_splits=("dev",), max_epochs=3, steps_per_epoch=4,
                  frames_per_batch=800, checkpoint_every_steps=2, threads=1, model=TINY_MODEL, optim=OptimSettings(warmup_steps=2))  # fmt: skip
    fields.update(over)
    return TrainingPlan(**fields)  # type: ignore[arg-type]


def lora_plan() -> TrainingPlan:
    return TrainingPlan(name="t-lora", mode="lora", train_splits=("target_train",), cv_splits=("target_dev",), new_speaker="spk_t",
                        max_epochs=2, frames_per_batch=800, checkpoint_every_steps=2, threads=1, lora=LoraSettings(),
                        optim=OptimSettings(warmup_steps=2, weight_decay=0.0))  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_small_corpus(tmp_path_factory.mktemp("corpus") / "c")


def audited(home: Home, corpus: Path) -> str:
    policy = load_plan(ROOT / "plans" / "audit-demo.yaml", AuditPolicy)
    out = audit_corpus_fn(home, corpus, policy, policy_name="audit-demo.yaml")
    assert out.receipt.result.verdict == "pass", out.receipt.result.counts_by_code
    return out.receipt_id


def test_base_then_lora_records_curves_checkpoints_and_lineage(tmp_path: Path, corpus: Path) -> None:
    home = Home(tmp_path / "h")
    audit = audited(home, corpus)
    base = run_training(home, corpus, audit, base_plan(), plan_name="t-base.yaml")
    r = base.receipt.result
    assert len(r.epochs) == 3 and r.stop_reason == "max_epochs"
    assert r.epochs[-1].train_loss < r.epochs[0].train_loss  # it learns
    assert base.receipt.parameters.effective_config["model"]["hidden_size"] == 64
    lora = run_training(home, corpus, audit, lora_plan(), plan_name="t-lora.yaml", base_sha=base.receipt.subject("best").sha256)
    assert 0 < lora.receipt.result.trainable_parameters < lora.receipt.result.total_parameters / 5
    again = run_training(home, corpus, audit, lora_plan(), plan_name="t-lora.yaml", base_sha=base.receipt.subject("best").sha256)
    assert again.cached and again.receipt_id == lora.receipt_id
    with home.catalog.connect(read_only=True) as con:
        curves = con.execute("SELECT mode, count(*) FROM training_epochs GROUP BY mode ORDER BY mode").fetchall()
        n_ckpt = con.execute("SELECT count(*) FROM checkpoints").fetchone()
    assert curves == [("full", 3), ("lora", 2)] and n_ckpt == (5,)
    # the adapter's lineage reaches the audit receipt through the base model's training run
    from voxledger.stores.lineage import walk

    with home.catalog.connect(read_only=True) as con:
        up = walk(con, lora.receipt.subject("last").sha256, "up", 10)
    assert audit in {e.src for e in up}


def test_crash_after_an_epoch_was_recorded_does_not_record_it_twice(tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from voxledger.tasks.training import loop

    home = Home(tmp_path / "h")
    audit = audited(home, corpus)
    plan = base_plan(max_epochs=2, checkpoint_every_steps=1000)  # no mid-epoch checkpoint: the crash leaves none
    real = loop.write_checkpoint

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("killed between recording epoch 0 and its boundary checkpoint")

    monkeypatch.setattr(loop, "write_checkpoint", crash)
    with pytest.raises(KeyboardInterrupt):
        run_training(home, corpus, audit, plan, plan_name="t-base.yaml")
    monkeypatch.setattr(loop, "write_checkpoint", real)
    out = run_training(home, corpus, audit, plan, plan_name="t-base.yaml")
    assert len(out.receipt.result.epochs) == 2
    with home.catalog.connect(read_only=True) as con:
        per_epoch = con.execute("SELECT epoch, count(*) FROM checkpoints GROUP BY epoch ORDER BY epoch").fetchall()
    assert per_epoch == [(0, 1), (1, 1)]


def test_failed_audit_and_changed_corpus_are_refused(tmp_path: Path, corpus: Path) -> None:
    import shutil

    home = Home(tmp_path / "h")
    bad = tmp_path / "bad"
    shutil.copytree(corpus, bad)
    rows = [json.loads(x) for x in (bad / "manifest.jsonl").read_text().splitlines()]
    rows[0]["split"] = "test"  # spk_a now in the target group: speaker leakage
    (bad / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    policy = load_plan(ROOT / "plans" / "audit-demo.yaml", AuditPolicy)
    failed = audit_corpus_fn(home, bad, policy, policy_name="audit-demo.yaml")
    with pytest.raises(TrainingError, match="failed .*split_leakage"):
        run_training(home, bad, failed.receipt_id, base_plan(), plan_name="t-base.yaml")
    good = tmp_path / "good"
    shutil.copytree(corpus, good)
    audit = audited(home, good)
    (good / "wavs" / "spk_a_0.wav").write_bytes((good / "wavs" / "spk_a_1.wav").read_bytes())
    with pytest.raises(TrainingError, match="changed since audit"):
        run_training(home, good, audit, base_plan(), plan_name="t-base.yaml")


def test_changed_base_corrupt_checkpoint_and_rebound_run_are_refused(tmp_path: Path, corpus: Path) -> None:
    home = Home(tmp_path / "h")
    audit = audited(home, corpus)
    base = run_training(home, corpus, audit, base_plan(max_epochs=1), plan_name="t-base.yaml")
    # tamper with the stored base weights: materialising the base must fail on the digest
    tree = json.loads(home.blobs.get_bytes(base.receipt.subject("best").sha256))
    weights = home.blobs.path_of(tree["entries"][0]["sha256"])
    weights.chmod(0o644)
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(DigestMismatchError):
        run_training(home, corpus, audit, lora_plan(), plan_name="t-lora.yaml", base_sha=base.receipt.subject("best").sha256)
    # a run folder whose checkpoints were made for other inputs is refused, naming the change
    run_dir = tmp_path / "run"
    run_training(home, corpus, audit, base_plan(max_epochs=1, name="r"), plan_name="r1.yaml", run_dir=run_dir)
    with pytest.raises(TrainingError, match="bound inputs changed .*plan_sha256"):
        run_training(home, corpus, audit, base_plan(max_epochs=1, name="r", seed=5), plan_name="r2.yaml", run_dir=run_dir)
    newest = sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    (newest / "trainable.safetensors").write_bytes(b"garbage")
    with pytest.raises(TrainingError, match="is corrupt: trainable.safetensors"):
        # (the finished r1 run itself would be served from cache, so ask for the other plan again)
        run_training(home, corpus, audit, base_plan(max_epochs=1, name="r", seed=5), plan_name="r2.yaml", run_dir=run_dir)


TRAIN = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from tests.tasks.test_training import base_plan
from voxledger.stores.home import Home
from voxledger.tasks.stages.train import run_training
out = run_training(Home(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], base_plan(max_epochs=2), plan_name="t-base.yaml", run_dir=Path(sys.argv[1]) / "run")
print(out.receipt.subject("last").sha256, out.receipt.result.resumed_at_steps)
"""


def _train_proc(home: Path, corpus: Path, audit: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", TRAIN, str(home), str(corpus), audit, str(ROOT)], stdout=subprocess.PIPE, text=True)


def test_sigkill_mid_epoch_then_resume_gives_identical_bytes(tmp_path: Path, corpus: Path) -> None:
    ref_home, crash_home = tmp_path / "ref", tmp_path / "crash"
    audits = {h: audited(Home(h), corpus) for h in (ref_home, crash_home)}
    # the uninterrupted reference runs in this process; the crash and the resume each in a process of their own
    ref = run_training(Home(ref_home), corpus, audits[ref_home], base_plan(max_epochs=2), plan_name="t-base.yaml", run_dir=ref_home / "run")
    ref_out = f"{ref.receipt.subject('last').sha256} {ref.receipt.result.resumed_at_steps}"
    proc = _train_proc(crash_home, corpus, audits[crash_home])
    ckpt = crash_home / "run" / "checkpoints" / "step-00000002"  # mid-epoch 0 (4 steps per epoch)
    deadline = time.monotonic() + 240
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before the kill: nothing was proved"
    resumed = _train_proc(crash_home, corpus, audits[crash_home])
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0
    ref_digest, resumed_digest = ref_out.split()[0], out.split()[0]
    assert ref_out.split(maxsplit=1)[1].strip() == "()", ref_out
    assert out.split(maxsplit=1)[1].strip() == "(2,)", f"the second run did not resume at step 2: {out}"
    assert resumed_digest == ref_digest  # same tree digest = byte-identical adapter files
