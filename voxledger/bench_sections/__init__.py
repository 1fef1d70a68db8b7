"""Stage benchmarks of ``voxledger bench``: audit, training, evaluation, Prefect, a past demo run.

Every figure is a rate, or a ratio against a baseline measured in the same run: the cached audit
against the first pass, training with receipts and checkpoints against a bare loop over the same
batches, evaluation against the raw models called on the same clips, Prefect tasks against plain
calls. Each measured pass runs in its own spawned process (see ``common``).
"""

from __future__ import annotations

from pathlib import Path

from voxledger.bench_sections.audit import bench_asr_agreement, bench_audit, bench_audit_rerun, build_noise_corpus
from voxledger.bench_sections.common import (
    Figure,
    audit_policy,
    in_child,
    peak_rss_mb,
    stage_timers,
    train_plan,
)
from voxledger.bench_sections.evaluation import bench_eval
from voxledger.bench_sections.orchestration import bench_cli_audit, bench_demo, bench_prefect, prefect_child
from voxledger.bench_sections.train import bench_train

STAGE_SECTIONS = (
    "cli",
    "audit",
    "train",
    "features",
    "eval",
    "prefect",
    "demo",
    "stats",
    "corpus-scale",
    "store-dvc",
    "sync",
    "listening-server",
    "pipeline-rerun",
    "verify",
    "sweep",
)
__all__ = [
    "STAGE_SECTIONS",
    "audit_policy",
    "bench_audit",
    "bench_cli_audit",
    "bench_demo",
    "bench_eval",
    "bench_prefect",
    "bench_train",
    "build_noise_corpus",
    "in_child",
    "peak_rss_mb",
    "prefect_child",
    "run_stages",
    "stage_timers",
    "train_plan",
]


def run_stages(
    work: Path, sections: tuple[str, ...], *, quick: bool, home: str | None = None, replications: int | None = None
) -> list[Figure]:
    """The stage sections named in ``sections``, in a fixed order; ``quick`` shrinks every size;
    ``replications`` sets the simulated data sets per row of ``stats``."""
    figures: list[Figure] = []
    if "cli" in sections:
        from voxledger.bench_sections.cli_reads import bench_cli_reads

        figures += bench_cli_reads(work, 3 if quick else 7)
    if "audit" in sections:
        figures += bench_audit(work, 300 if quick else 10_000)
        figures += bench_asr_agreement(8 if quick else 40)
        figures += bench_audit_rerun(work, 4 if quick else 40)
    if "train" in sections:
        figures += bench_train(work, quick)
    if "features" in sections:
        from voxledger.bench_sections.features import bench_features

        figures += bench_features(work, quick)
    if "eval" in sections:
        from voxledger.bench_sections.asr_models import bench_asr_models

        figures += bench_eval(work, quick)
        figures += bench_asr_models(4 if quick else 16)
    if "prefect" in sections:
        figures += bench_prefect(work, 20 if quick else 200)
        figures += bench_cli_audit(work, "tiny" if quick else "full")
    if "demo" in sections:
        figures += bench_demo(home)
    if "stats" in sections:
        from voxledger.bench_sections.stats import bench_stats

        figures += bench_stats(quick, replications)
    if "corpus-scale" in sections:
        from voxledger.bench_sections.corpus_scale import bench_corpus_scale

        figures += bench_corpus_scale(work, 300 if quick else None)
    if "store-dvc" in sections:
        from voxledger.bench_sections.store_dvc import bench_store_dvc

        figures += bench_store_dvc(work, 300 if quick else 10_000)
    if "sync" in sections:
        from voxledger.bench_sections.sync import bench_sync

        figures += bench_sync(work, 200 if quick else 10_000)
    if "listening-server" in sections:
        from voxledger.bench_sections.listening_server import bench_listening_server

        figures += bench_listening_server(work, 10 if quick else 50)
    if "pipeline-rerun" in sections:
        from voxledger.bench_sections.pipeline_rerun import bench_pipeline_rerun

        figures += bench_pipeline_rerun(work, 2 if quick else 5)
    if "verify" in sections:
        from voxledger.bench_sections.verify import bench_reuse_output_checks, bench_scrub_throughput

        figures += bench_scrub_throughput(work, 40 if quick else 1000)
        figures += bench_reuse_output_checks(home)
    if "sweep" in sections:
        from voxledger.bench_sections.sweep import bench_sweep

        figures += bench_sweep(work, quick)
    if "install" in sections:
        from voxledger.bench_sections.install import bench_install_compile

        figures += bench_install_compile(work, quick)
    return figures
