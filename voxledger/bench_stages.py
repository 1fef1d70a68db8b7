"""Stage benchmarks of ``voxledger bench``: audit, training, evaluation, Prefect, a past demo run.

Every figure is a rate, or a ratio against a baseline measured in the same run: the cached audit
against the first pass, training with receipts and checkpoints against a bare loop over the same
batches, evaluation against the raw models called on the same clips, Prefect tasks against plain
calls. Each measured pass runs in a fresh spawned interpreter, so its peak RSS is its own (the
parent's imports and earlier passes never count) and no pass warms the next one's memory.
"""

from __future__ import annotations

import importlib
import io
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from voxledger.bench import Figure
from voxledger.schemas.errors import AuditFailedError, VoxledgerError

STAGE_SECTIONS = ("audit", "train", "eval", "prefect", "demo")
SAMPLE_RATE_HZ = 16000
# 4-5 letter words: three per one-second clip is ~13 letters/s, ordinary read speech, so the
# speaking-rate check runs without flagging; 40**3 distinct texts keep every transcript unique.
WORDS = (
    "amber", "birch", "cedar", "delta", "ember", "fable", "grain", "harbor", "ivory", "jolly",
    "kettle", "lemon", "maple", "noble", "olive", "pearl", "quiet", "river", "stone", "tiger",
    "umber", "vivid", "wheat", "young", "zebra", "acorn", "bloom", "cloud", "dune", "frost",
    "glade", "hazel", "inlet", "joint", "knoll", "linen", "marsh", "north", "orbit", "plume",
)  # fmt: skip
TINY_MODEL = {"hidden_size": 64, "backbone_layers": 2, "attention_heads": 4, "kv_heads": 2, "ffn_size": 128,
              "postnet_channels": 64, "encoder_layers": 2}  # fmt: skip


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _measured(fn: Callable[..., dict[str, Any]], args: tuple[Any, ...]) -> dict[str, Any]:
    out = fn(*args)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def in_child(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``fn(*args)`` in a fresh spawned interpreter; the result gains that process's ``peak_rss_mb``."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_measured, fn, args).result()


def audit_policy() -> Any:
    """The demo corpus's audit policy (plans/audit-demo.yaml) as a model: every check switched on."""
    from voxledger.schemas.audit import AuditPolicy, LeakageRule

    return AuditPolicy(
        name="bench-audit", min_duration_s=0.5, max_duration_s=20.0,
        leakage=(LeakageRule(key="speaker", partition=(("train", "dev"), ("target_train", "target_dev", "test"))),
                 LeakageRule(key="recording_id"), LeakageRule(key="text_norm")),
    )  # fmt: skip


# --- audit -------------------------------------------------------------------------------------


def _wav_header(n_samples: int) -> bytes:
    """The header soundfile writes for a mono 16-bit 16 kHz clip of ``n_samples`` samples."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.zeros(n_samples, np.int16), SAMPLE_RATE_HZ, format="WAV", subtype="PCM_16")
    return buf.getvalue()[: -2 * n_samples]


def _speech_shaped_noise(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` one-second int16 clips: low-passed noise under a 3-5 Hz syllable envelope, peak 0.3."""
    from scipy.signal import lfilter

    t = np.arange(SAMPLE_RATE_HZ) / SAMPLE_RATE_HZ
    noise = lfilter([1.0], [1.0, -0.9], rng.standard_normal((count, SAMPLE_RATE_HZ)), axis=1)
    rate, phase = rng.uniform(3.0, 5.0, (count, 1)), rng.uniform(0.0, np.pi, (count, 1))
    x = noise * (0.15 + 0.85 * np.abs(np.sin(np.pi * rate * t + phase)))
    return (x / np.abs(x).max(axis=1, keepdims=True) * 0.3 * 32767).astype("<i2")  # type: ignore[no-any-return]


def _noise_row(i: int) -> dict[str, Any]:
    """Manifest row ``i``: 100 speakers, 90 base (train/dev) and 10 target (target splits, test)."""
    speaker, group = i % 100, (i // 100) % 10
    split = ("target_train", "target_train", "target_dev", "test")[group % 4] if speaker >= 90 else ("dev" if group == 0 else "train")
    uid = f"u{i:05d}"
    text = " ".join(WORDS[(i // len(WORDS) ** k) % len(WORDS)] for k in range(3))
    return {"id": uid, "audio": f"wavs/{i // 1000:02d}/{uid}.wav", "text": text, "speaker": f"spk{speaker:03d}",
            "recording_id": uid, "split": split, "language": "en", "duration_s": 1.0, "sample_rate_hz": SAMPLE_RATE_HZ}  # fmt: skip


def build_noise_corpus(root: Path, n: int, seed: int = 0) -> Path:
    """A JSONL corpus of ``n`` distinct one-second speech-shaped noise clips that passes the audit.

    Clips are generated 1,000 at a time; the WAV header comes from soundfile once (every clip has
    the same length), so 10,000 files take seconds instead of a minute of per-file encoder calls.

    Raises:
        ValueError: ``n`` exceeds the number of distinct transcripts (64,000).
    """
    if n > len(WORDS) ** 3:
        raise ValueError(f"n={n} exceeds the {len(WORDS) ** 3} distinct transcripts of the noise corpus")
    header, rng, rows = _wav_header(SAMPLE_RATE_HZ), np.random.default_rng(seed), []
    for start in range(0, n, 1000):
        for j, clip in enumerate(_speech_shaped_noise(rng, min(1000, n - start))):
            row = _noise_row(start + j)
            path = root / row["audio"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(header + clip.tobytes())
            rows.append(row)
    (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def _audit_child(home: str, corpus: str) -> dict[str, Any]:
    from voxledger.stores.home import Home
    from voxledger.tasks.audit.run import audit_corpus_fn

    policy, imports_mb = audit_policy(), peak_rss_mb()
    t0 = time.perf_counter()
    out = audit_corpus_fn(Home(home), Path(corpus), policy, policy_name="bench-audit.yaml")
    r = out.receipt.result
    return {"wall_s": time.perf_counter() - t0, "cached": out.cached, "verdict": r.verdict, "counts": r.counts_by_code, "imports_mb": imports_mb}


def bench_audit(work: Path, n: int) -> list[Figure]:
    """Audit throughput and peak RSS, first pass and cached pass, each in its own process."""
    corpus = build_noise_corpus(work / "audit-corpus", n)
    home = str(work / "audit-home")
    first, cached = in_child(_audit_child, home, str(corpus)), in_child(_audit_child, home, str(corpus))
    if first["verdict"] != "pass":
        raise AuditFailedError(f"the synthetic audit corpus {corpus} failed its audit ({first['counts']}); the benchmark would measure a broken corpus")
    if first["cached"] or not cached["cached"]:
        raise VoxledgerError(f"audit cache: first pass cached={first['cached']}, second pass cached={cached['cached']}; expected False then True")
    return [
        Figure(f"audit {n:,} x 1 s clips, first pass", n / first["wall_s"], "utterances/s"),
        Figure("audit first pass: peak RSS (own process)", first["peak_rss_mb"], "MB"),
        Figure(f"audit {n:,} clips, cached pass", n / cached["wall_s"], "utterances/s"),
        Figure("audit cached pass: peak RSS (own process)", cached["peak_rss_mb"], "MB"),
        Figure("audit process RSS after imports (floor of both)", first["imports_mb"], "MB"),
        Figure("audit cached / first pass time", cached["wall_s"] / first["wall_s"], "x"),
    ]


# --- training ----------------------------------------------------------------------------------


def train_plan(quick: bool, **over: Any) -> Any:
    """The benchmark's base training plan: the demo's batch size and model, or a tiny smoke one.

    Patience exceeds the epoch count, so every run trains exactly the same steps.
    """
    from voxledger.schemas.training import OptimSettings, TrainingPlan

    fields: dict[str, Any] = dict(
        name="bench-train", mode="full", train_splits=("train",), cv_splits=("dev",), max_epochs=2 if quick else 3, patience=5,
        frames_per_batch=800 if quick else 3000, checkpoint_every_steps=2 if quick else 5, threads=1 if quick else 2,
        model=TINY_MODEL if quick else {}, optim=OptimSettings(warmup_steps=2 if quick else 10),
    )  # fmt: skip
    fields.update(over)
    return TrainingPlan(**fields)


def _train_child(home: str, corpus: str, audit_rid: str, plan_doc: dict[str, Any]) -> dict[str, Any]:
    from voxledger.schemas.training import TrainingPlan
    from voxledger.stores.home import Home
    from voxledger.tasks.training.run import train_adapter_fn

    plan = TrainingPlan.model_validate(plan_doc)
    t0 = time.perf_counter()
    out = train_adapter_fn(Home(home), Path(corpus), audit_rid, plan, plan_name=f"{plan.name}.yaml")
    wall, r = time.perf_counter() - t0, out.receipt.result
    if out.cached:
        raise VoxledgerError(f"training run {out.receipt_id} was served from cache; the benchmark needs a fresh home")
    return {"wall_s": wall, "step_s": sum(e.wall_s for e in r.epochs), "ckpt_s": sum(e.checkpoint_overhead_s for e in r.epochs),
            "utterances": sum(e.utterances_per_s * e.wall_s for e in r.epochs), "frames": sum(e.frames_per_s * e.wall_s for e in r.epochs),
            "steps": r.total_steps, "params": r.total_parameters}  # fmt: skip


def _bare_train_child(corpus: str, plan_doc: dict[str, Any]) -> dict[str, Any]:
    """The same batches, steps, learning rates and CV passes as the loop; no checkpoints, no receipts."""
    import torch
    from voxledger.schemas.training import TrainingPlan
    from voxledger.tasks.backends.base import get_backend
    from voxledger.tasks.training.loop import lr_at

    plan = TrainingPlan.model_validate(plan_doc)
    t0 = time.perf_counter()
    torch.set_num_threads(plan.threads)
    backend = get_backend(plan.backend)
    setup = backend.setup(Path(corpus), plan, None)
    params = [p for p in setup.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=plan.optim.peak_lr, weight_decay=plan.optim.weight_decay, betas=(0.9, 0.98))
    per_epoch = min(len(backend.epoch_batches(0, plan.seed)), plan.steps_per_epoch or 1 << 30)
    torch.manual_seed(plan.seed)
    step, step_s = 0, 0.0
    for epoch in range(plan.max_epochs):
        for batch in backend.epoch_batches(epoch, plan.seed)[:per_epoch]:
            t1 = time.perf_counter()
            backend.train_step(setup.model, batch, optimizer, lr_at(step, plan, per_epoch * plan.max_epochs), plan.optim.max_grad_norm)
            backend.batch_frames(batch)
            step_s, step = step_s + time.perf_counter() - t1, step + 1
        backend.cv_loss(setup.model, setup.cv_batches)
    return {"wall_s": time.perf_counter() - t0, "step_s": step_s, "steps": step}


def bench_train(work: Path, quick: bool) -> list[Figure]:
    """Tiny-backend throughput and the cost of receipts + checkpoints, against a bare loop."""
    from voxledger.stores.home import Home
    from voxledger.tasks.audit.run import audit_corpus_fn
    from voxledger.tasks.corpus.demo import build_demo_corpus

    corpus = build_demo_corpus(work / "train-corpus", size="tiny" if quick else "small").out_dir
    plan = train_plan(quick)
    runs = {}
    for name, p in (("plan", plan), ("epoch_only", train_plan(quick, checkpoint_every_steps=1 << 30))):
        home = Home(work / f"train-home-{name}")
        audit = audit_corpus_fn(home, corpus, audit_policy(), policy_name="bench-audit.yaml").receipt_id
        runs[name] = in_child(_train_child, str(home.root), str(corpus), audit, p.model_dump(mode="json"))
    bare = in_child(_bare_train_child, str(corpus), plan.model_dump(mode="json"))
    run, k = runs["plan"], plan.checkpoint_every_steps
    if bare["steps"] != run["steps"]:
        raise VoxledgerError(f"bare loop ran {bare['steps']} steps, the training run {run['steps']}: the comparison would be unfair")
    label = f"train tiny full {run['params'] / 1e6:.1f} M params, {plan.threads} thread(s), {run['steps']} steps"
    return [
        Figure(f"{label}: utterances", run["utterances"] / run["step_s"], "utterances/s"),
        Figure(f"{label}: frames", run["frames"] / run["step_s"], "frames/s"),
        Figure("train_adapter: peak RSS (own process)", run["peak_rss_mb"], "MB"),
        Figure("bare training loop: peak RSS (own process)", bare["peak_rss_mb"], "MB"),
        Figure("receipts + checkpoints / step time (the loop's own record)", 100 * run["ckpt_s"] / run["step_s"], "%", "<= 5"),
        Figure(f"checkpoint every {k} steps vs per epoch only: extra wall / step time",
               100 * (run["wall_s"] - runs["epoch_only"]["wall_s"]) / run["step_s"], "%"),
        Figure("train_adapter vs bare loop (same steps, same CV): extra wall / step time",
               100 * (run["wall_s"] - bare["wall_s"]) / bare["step_s"], "%", "<= 5"),
    ]  # fmt: skip


# --- Prefect -----------------------------------------------------------------------------------


def prefect_child(n_tasks: int) -> dict[str, float]:
    """Time flows of trivial tasks (stage task options, heartbeat off) and the plain calls."""
    import voxledger.flows  # noqa: F401  (offline defaults before prefect loads)
    from prefect import flow, task

    from voxledger.flows.runtime import quiet_prefect
    from voxledger.flows.stages import RETRIES

    @task(name="bench_noop", **RETRIES)  # type: ignore[call-overload]
    def noop(i: int) -> int:
        return i

    @flow(name="bench_tasks")
    def tasks_flow(n: int) -> int:
        return sum(noop(i) for i in range(n))

    @flow(name="bench_empty")
    def empty_flow(n: int) -> int:
        return n

    def timed(fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    direct = timed(lambda: [noop.fn(i) for i in range(n_tasks)])
    with quiet_prefect():
        first = timed(lambda: empty_flow(0))
        empty = min(timed(lambda: empty_flow(0)) for _ in range(3))
        full = min(timed(lambda: tasks_flow(n_tasks)) for _ in range(2))
    return {"direct_s": direct, "first_s": first, "empty_s": empty, "full_s": full}


def bench_prefect(work: Path, n_tasks: int) -> list[Figure]:
    """Orchestration cost per task; a subprocess (not a pool worker) so the temporary server exits cleanly."""
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect-home")}  # never the user's Prefect database
    code = "import json, sys; from voxledger.bench_stages import prefect_child; print('BENCH', json.dumps(prefect_child(int(sys.argv[1]))))"
    proc = subprocess.run([sys.executable, "-c", code, str(n_tasks)], env=env, capture_output=True, text=True, timeout=600, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("BENCH ")), None)
    if proc.returncode != 0 or line is None:
        raise VoxledgerError(f"prefect benchmark exited {proc.returncode}: {proc.stderr[-2000:]}")
    r = json.loads(line[6:])
    per_task = (r["full_s"] - r["empty_s"]) / n_tasks
    return [
        Figure("prefect: first flow of a process (starts the temporary server)", r["first_s"], "s"),
        Figure("prefect: empty flow, warm (heartbeat off)", r["empty_s"] * 1000, "ms"),
        Figure(f"prefect: flow of {n_tasks} trivial tasks, per task", per_task * 1000, "ms/task"),
        Figure("direct call of the same function", r["direct_s"] / n_tasks * 1000, "ms/call"),
        Figure("prefect task / direct call", per_task / max(r["direct_s"] / n_tasks, 1e-9), "x"),
    ]


# --- a past demo run ---------------------------------------------------------------------------


def bench_demo(home: str | None) -> list[Figure]:
    """Wall time per stage of the latest pipeline run in ``home``'s catalog (read only).

    With two or more runs, also the latest run's time over the first run's (a cached re-run
    shows how much the stage caches save). A home with no pipeline run gives one line saying so.
    """
    from voxledger.stores.catalog import Catalog
    from voxledger.stores.home import resolve_home

    root = resolve_home(home)
    db = root / "catalog.duckdb"
    runs: list[tuple[str, list[tuple[str, bool, float, str]]]] = []
    if db.is_file():
        with Catalog(db).connect(read_only=True) as con:
            if con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'pipeline_stages'").fetchone() != (0,):
                rows = con.execute("SELECT receipt_sha256, stage, cached, wall_s, status FROM pipeline_stages ORDER BY finished_at, receipt_sha256, seq").fetchall()
                for rid, *stage in rows:
                    if not runs or runs[-1][0] != rid:
                        runs.append((rid, []))
                    runs[-1][1].append(tuple(stage))  # type: ignore[arg-type]
    if not runs:
        return [Figure(f"pipeline runs in {root} (none yet: `voxledger demo run` makes one)", 0, "runs")]
    latest_id, latest = runs[-1]
    figures = [Figure(f"pipeline runs in {root}", len(runs), "runs")]
    figures += [Figure(f"latest run {latest_id[:12]}: {s} ({'cached' if c else 'ran'}, {st})", w, "s") for s, c, w, st in latest]
    figures.append(Figure(f"latest run {latest_id[:12]}: all stages", sum(w for _, _, w, _ in latest), "s"))
    if len(runs) > 1:
        first_id, first = runs[0]
        n_cached = sum(c for _, c, _, _ in latest)
        figures.append(Figure(f"latest ({n_cached} of {len(latest)} stages cached) / first run {first_id[:12]}: wall time",
                              sum(w for _, _, w, _ in latest) / max(sum(w for _, _, w, _ in first), 1e-9), "x"))  # fmt: skip
    return figures


def run_stages(work: Path, sections: tuple[str, ...], *, quick: bool, home: str | None = None) -> list[Figure]:
    """The stage sections named in ``sections``, in a fixed order; ``quick`` shrinks every size."""
    figures: list[Figure] = []
    if "audit" in sections:
        figures += bench_audit(work, 300 if quick else 10_000)
    if "train" in sections:
        figures += bench_train(work, quick)
    if "eval" in sections:
        figures += bench_eval(work, quick)
    if "prefect" in sections:
        figures += bench_prefect(work, 20 if quick else 200)
    if "demo" in sections:
        figures += bench_demo(home)
    return figures
