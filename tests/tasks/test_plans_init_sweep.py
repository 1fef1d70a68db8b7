"""``voxledger init --sweep`` writes a small sweep of the adapter plan that validates with the plans beside it."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from voxledger.cli import main
from voxledger.schemas.sweep import SweepPlan
from voxledger.schemas.training import TrainingPlan
from voxledger.tasks.plans import PlanRef, load_plan
from voxledger.tasks.stages.sweep import beside, members

SPLITS = ("--target", "spk_t", "--train-split", "target_train", "--dev-split", "target_dev")


def test_init_writes_a_default_sweep_only_when_asked(corpus: Path, tmp_path: Path) -> None:
    plain = CliRunner().invoke(main, ["init", str(corpus), "--out", str(tmp_path / "plain"), *SPLITS])
    assert plain.exit_code == 0, plain.output
    assert not (tmp_path / "plain" / "sweep.yaml").exists()

    out = tmp_path / "plans"
    res = CliRunner().invoke(main, ["init", str(corpus), "--out", str(out), "--name", "My Voice", "--sweep", *SPLITS])
    assert res.exit_code == 0, res.output
    assert f"wrote {out / 'sweep.yaml'}" in res.output
    first = (out / "sweep.yaml").read_text().splitlines()[0]
    assert first.startswith(f"# voxledger sweep run {out}/sweep.yaml --corpus {corpus} --audit AUDIT_RECEIPT --base ")
    plan = PlanRef.load(out / "sweep.yaml", SweepPlan)
    training, policy = beside(plan, out)  # the files it names, and every member's derived plan, validate
    assert (plan.validated(SweepPlan).name, plan.validated(SweepPlan).workers) == ("my-voice-lr", 2)
    lr = load_plan(out / "train-adapter.yaml", TrainingPlan).optim.peak_lr
    derived = [(m.name, ref.validated(TrainingPlan)) for m, ref in members(plan, training)]
    assert [(name, p.optim.peak_lr, p.name) for name, p in derived] == [
        ("m0", lr / 2, "my-voice-lr-m0"),
        ("m1", lr, "my-voice-lr-m1"),
        ("m2", lr * 2, "my-voice-lr-m2"),
    ]
    assert yaml.safe_load((out / "sweep.yaml").read_text())["policy"] == "promote.yaml" and policy.source_name == "promote.yaml"
