"""``train``: tiny-backend throughput, and what receipts + checkpoints cost against a bare loop.

Two same-run A/B figures for the demo's own speed-ups: the bare loop with transformers' plain
``"sdpa"`` attention against the backbone's float32 attention product under autocast (only bf16
training differs; in fp32 both compute the same), and the demo corpus built on one espeak-ng
helper against `espeak.HELPERS` (the trees must be byte-identical, or the section fails).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from voxledger.bench_sections.common import Figure, audit_policy, backend_hooks, in_child, stage_timers, train_plan
from voxledger.schemas.errors import VoxledgerError

TRAIN_METHODS = (("setup", "setup"), ("step", "train_step"), ("cv", "cv_loss"))


def _train_child(home: str, corpus: str, audit_rid: str, plan_doc: dict[str, Any]) -> dict[str, Any]:
    from voxledger.schemas.training import TrainingPlan
    from voxledger.stores.home import Home
    from voxledger.tasks.backends.base import get_backend
    from voxledger.tasks.stages.train import run_training

    plan = TrainingPlan.model_validate(plan_doc)
    # torch before the clock starts, as the bare loop imports it: looking a backend up imports no
    # torch, and train_adapter would pay it where the bare loop does not. Both import the model
    # stack (transformers, PEFT) inside setup, which neither's overhead figure counts
    import torch  # noqa: F401

    get_backend(plan.backend)
    with stage_timers(backend_hooks(plan.backend, TRAIN_METHODS)) as stages:
        t0 = time.perf_counter()
        out = run_training(Home(home), Path(corpus), audit_rid, plan, plan_name=f"{plan.name}.yaml")
        wall, r = time.perf_counter() - t0, out.receipt.result
    if out.cached:
        raise VoxledgerError(f"training run {out.receipt_id} was served from cache; the benchmark needs a fresh home")
    return {
        "wall_s": wall,
        "stages": dict(stages),
        "ckpt_s": sum(e.checkpoint_overhead_s for e in r.epochs),
        "loop_step_s": sum(e.wall_s for e in r.epochs),
        "utterances": sum(e.utterances_per_s * e.wall_s for e in r.epochs),
        "frames": sum(e.frames_per_s * e.wall_s for e in r.epochs),
        "steps": r.total_steps,
        "params": r.total_parameters,
        "precision": str(out.receipt.parameters.effective_config.get("precision_effective", plan.precision)),
    }


def _bare_train_child(corpus: str, plan_doc: dict[str, Any], attention: str | None = None) -> dict[str, Any]:
    """The same batches, steps, learning rates and CV passes as the loop; no checkpoints, no receipts.
    ``attention`` names another transformers attention function for the backbone (e.g. ``"sdpa"``)."""
    import torch

    from voxledger.schemas.training import TrainingPlan
    from voxledger.tasks.backends.base import get_backend
    from voxledger.tasks.training.loop import lr_at

    plan = TrainingPlan.model_validate(plan_doc)
    backend, step = get_backend(plan.backend), 0
    with stage_timers(backend_hooks(plan.backend, TRAIN_METHODS)) as stages:
        t0 = time.perf_counter()
        torch.set_num_threads(plan.threads)
        setup = backend.setup(Path(corpus), plan, None)
        if attention is not None:
            _use_attention(setup.model, attention)
        params = [p for p in setup.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=plan.optim.peak_lr, weight_decay=plan.optim.weight_decay, betas=(0.9, 0.98))
        per_epoch = min(len(backend.epoch_batches(0, plan.seed)), plan.steps_per_epoch or 1 << 30)
        torch.manual_seed(plan.seed)
        for epoch in range(plan.max_epochs):
            for batch in backend.epoch_batches(epoch, plan.seed)[:per_epoch]:
                backend.train_step(setup.model, batch, optimizer, lr_at(step, plan, per_epoch * plan.max_epochs), plan.optim.max_grad_norm)
                step += 1
            backend.cv_loss(setup.model, setup.cv_batches)
        wall = time.perf_counter() - t0
    return {"wall_s": wall, "stages": dict(stages), "steps": step}


def _use_attention(model: Any, name: str) -> None:
    """Point every transformers backbone inside ``model`` at the attention function ``name``
    (transformers looks it up from the config on each forward)."""
    from transformers import PreTrainedModel

    backbones = [m for m in model.modules() if isinstance(m, PreTrainedModel)]
    if not backbones:
        raise VoxledgerError("the model has no transformers backbone whose attention could be switched")
    for m in backbones:
        m.config._attn_implementation = name


def _corpus_child(out: str, size: str, helpers: int) -> dict[str, Any]:
    """Build the demo corpus with ``helpers`` espeak-ng helper threads; wall time and a digest of every file."""
    import hashlib

    from voxledger.tasks.corpus import espeak
    from voxledger.tasks.corpus.demo import build_demo_corpus

    espeak.HELPERS = helpers  # the number of threads `write_utterances` starts (this process only)
    t0 = time.perf_counter()
    info = build_demo_corpus(Path(out), size=size)  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    h = hashlib.sha256()
    for path in sorted(p for p in Path(out).rglob("*") if p.is_file()):
        h.update(str(path.relative_to(out)).encode() + b"\0" + path.read_bytes())
    return {"wall_s": wall, "utterances": info.utterance_count, "tree_sha256": h.hexdigest()}


def _outside(run: dict[str, Any]) -> float:
    """Wall time outside the timed stages: for training, everything but setup, steps and CV."""
    return float(run["wall_s"] - sum(run["stages"].values()))


def bench_train(work: Path, quick: bool) -> list[Figure]:
    """Tiny-backend throughput and the cost of receipts + checkpoints, against a bare loop.

    Overheads compare the time each run spends outside setup, steps and CV (timed in both), so
    step-to-step noise of a shared machine does not masquerade as overhead.
    """
    from voxledger.stores.home import Home
    from voxledger.tasks.corpus import espeak
    from voxledger.tasks.stages.audit import audit_corpus_fn

    size = "tiny" if quick else "full"
    serial = in_child(_corpus_child, str(work / "corpus-1-helper"), size, 1)
    built = in_child(_corpus_child, str(work / "train-corpus"), size, espeak.HELPERS)
    if built["tree_sha256"] != serial["tree_sha256"]:
        raise VoxledgerError(f"the demo corpus built on {espeak.HELPERS} espeak-ng helpers differs from the one built on 1")
    corpus = work / "train-corpus"
    plan = train_plan(quick)
    # every compared pair runs back to back (sdpa | bare | plan | epoch_only): this machine's speed
    # drifts over minutes, and one run apart, train_adapter measured 1.19x the bare loop's step time
    # where alternating runs measured 0.99-1.00x
    bare_sdpa = in_child(_bare_train_child, str(corpus), plan.model_dump(mode="json"), "sdpa")
    bare = in_child(_bare_train_child, str(corpus), plan.model_dump(mode="json"))
    runs = {}
    for name, p in (("plan", plan), ("epoch_only", train_plan(quick, checkpoint_every_steps=1 << 30))):
        home = Home(work / f"train-home-{name}")
        audit = audit_corpus_fn(home, corpus, audit_policy(), policy_name="bench-audit.yaml").receipt_id
        runs[name] = in_child(_train_child, str(home.root), str(corpus), audit, p.model_dump(mode="json"))
    run, k, step_s = runs["plan"], plan.checkpoint_every_steps, runs["plan"]["stages"]["step"]
    if bare["steps"] != run["steps"]:
        raise VoxledgerError(f"bare loop ran {bare['steps']} steps, the training run {run['steps']}: the comparison would be unfair")
    precision = run["precision"]
    label = f"train {plan.backend} full {run['params'] / 1e6:.1f} M params, {plan.threads} thread(s), {run['steps']} steps"
    return [
        Figure(f"{label}: utterances", run["utterances"] / run["loop_step_s"], "utterances/s"),
        Figure(f"{label}: frames", run["frames"] / run["loop_step_s"], "frames/s"),
        Figure("train_adapter: peak RSS (own process)", run["peak_rss_mb"], "MB"),
        Figure("bare training loop: peak RSS (own process)", bare["peak_rss_mb"], "MB"),
        Figure("receipts + checkpoints / step time (the loop's own record)", 100 * run["ckpt_s"] / run["loop_step_s"], "%", "<= 5"),
        Figure(
            "train_adapter vs bare loop: extra wall outside setup, steps, CV / step time",
            100 * (_outside(run) - _outside(bare)) / step_s,
            "%",
            "<= 5",
        ),
        Figure(
            f"checkpoint every {k} steps vs per epoch only: extra wall / step time",
            100 * (_outside(run) - _outside(runs["epoch_only"])) / step_s,
            "%",
        ),
        Figure(f"train_adapter: step time ({precision})", 1000 * step_s / run["steps"], "ms/step"),
        Figure(f"bare loop: step time ({precision})", 1000 * bare["stages"]["step"] / bare["steps"], "ms/step"),
        Figure("train_adapter vs bare loop: step time", step_s / bare["stages"]["step"], "x", "<= 1.2"),
        Figure(
            "train_adapter vs bare loop: total wall (setup and step noise included)",
            run["wall_s"] / bare["wall_s"],
            "x",
            "<= 1.2",
        ),
        Figure(
            f"bare loop, transformers' plain sdpa attention: step time ({precision})",
            1000 * bare_sdpa["stages"]["step"] / bare_sdpa["steps"],
            "ms/step",
        ),
        # the product in float32 only changes anything under autocast (bf16); in fp32 both runs compute the same thing
        Figure(
            "plain sdpa vs float32 attention product under autocast: bare step time",
            bare_sdpa["stages"]["step"] / bare["stages"]["step"],
            "x",
        ),
        Figure(f"demo corpus ({size}, {serial['utterances']} utterances), 1 espeak-ng helper", serial["wall_s"], "s"),
        Figure(
            f"demo corpus, {espeak.HELPERS} helpers vs 1 (identical bytes): wall speed-up",
            serial["wall_s"] / built["wall_s"],
            "x",
        ),
    ]
