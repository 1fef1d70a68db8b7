"""``voxledger checkpoints prune``: plan first (reviewable), then execute exactly that plan.

Per training run the plan keeps the best ``keep_best`` epochs by CV loss, the last epoch, and any
checkpoint that a promotion or package receipt refers to (directly or by its tree digest).
A blob is removed only if nothing outside the removed checkpoints refers to it. Execution
re-verifies every byte it is about to delete and re-checks protection against the current
catalog, so a plan made stale by a newer promotion is refused rather than followed.
"""

from __future__ import annotations

import json
from pathlib import Path

from voxledger.schemas.base import utc_now
from voxledger.schemas.canonical import canonical_bytes
from voxledger.schemas.errors import TrainingError
from voxledger.schemas.prune import PruneEntry, PruneParameters, PrunePlan, PruneReceipt
from voxledger.stores.home import Home
from voxledger.stores.queries import checkpoint_rows, references_for_pruning
from voxledger.stores.trees import load_manifest
from voxledger.tasks.receipting import build_receipt

PROTECTING_KINDS = ("promotion", "package")


def _protected(home: Home, exclude: set[str]) -> set[str]:
    """Digests referenced by any receipt other than the checkpoints being removed, plus tree contents."""
    rows, checkpoint_ids, raw = references_for_pruning(home.catalog, PROTECTING_KINDS)
    docs = [json.loads(r) for r in raw]
    refs: set[str] = set()
    for src, dst in rows:
        if src in exclude or dst in exclude:
            continue  # edges of the checkpoint receipts being removed do not protect
        refs |= {src, dst} - checkpoint_ids
    for d in docs:  # aliases and packages name trees inside their results
        refs |= {m["target_sha256"] for m in d.get("result", {}).get("moves", [])}
        refs |= {c["tree_sha256"] for c in d.get("result", {}).get("challengers", []) if c["name"] == d.get("result", {}).get("promoted")}
    expanded = set(refs)
    for sha in refs:
        try:
            expanded |= {e.sha256 for e in load_manifest(home.blobs, sha).entries}
        except Exception:  # noqa: BLE001 (most digests are not trees; only real manifests expand)
            continue
    return expanded


def make_plan(home: Home, keep_best: int = 1) -> PrunePlan:
    """Decide keep/remove for every checkpoint in the catalog."""
    rows = checkpoint_rows(home.catalog)
    by_run: dict[str, list[tuple[str, str, int, float, str]]] = {}
    for r in rows:
        by_run.setdefault(r[1], []).append(r)
    keep: list[PruneEntry] = []
    remove: list[tuple[str, str, int, float]] = []
    for ckpts in by_run.values():
        best = {c[0] for c in sorted(ckpts, key=lambda c: (c[3], c[2]))[:keep_best]}
        for c in ckpts:
            why = "best by CV loss" if c[0] in best else "last epoch" if c is ckpts[-1] else None
            if why:
                keep.append(PruneEntry(checkpoint_receipt=c[0], tree_sha256=c[4], epoch=c[2], cv_loss=c[3], reason=why))
            else:
                remove.append((c[0], c[4], c[2], c[3]))
    protected = _protected(home, {r[0] for r in remove})
    final_remove = []
    for rid, tree, epoch, cv in remove:
        if tree in protected:
            keep.append(
                PruneEntry(
                    checkpoint_receipt=rid, tree_sha256=tree, epoch=epoch, cv_loss=cv, reason="referenced by a promotion, package or run"
                )
            )
            continue
        blobs = [tree, *(e.sha256 for e in load_manifest(home.blobs, tree).entries)] if home.blobs.has(tree) else []
        blobs = sorted({b for b in blobs if b not in protected and home.blobs.has(b)})
        final_remove.append(
            PruneEntry(
                checkpoint_receipt=rid,
                tree_sha256=tree,
                epoch=epoch,
                cv_loss=cv,
                reason="not best, not last, unreferenced",
                blobs=tuple(blobs),
            )
        )
    return PrunePlan(keep_best=keep_best, keep=tuple(keep), remove=tuple(final_remove))


def execute_plan(home: Home, plan_path: Path, *, flow: str = "prune_checkpoints") -> tuple[str, PruneReceipt]:
    """Execute a reviewed plan file exactly; refuse if anything it removes is now protected."""
    started = utc_now()
    plan = PrunePlan.model_validate_json(plan_path.read_bytes())
    blobs = sorted({b for e in plan.remove for b in e.blobs})
    now_protected = _protected(home, {e.checkpoint_receipt for e in plan.remove}) & set(blobs)
    if now_protected:
        raise TrainingError(
            f"plan {plan_path} is stale: {len(now_protected)} blob(s) it removes are now referenced "
            f"(e.g. {sorted(now_protected)[0]}); make a new plan"
        )
    present = [b for b in blobs if home.blobs.has(b)]
    for b in present:
        home.blobs.verify(b)  # delete only bytes we can prove are what the plan names
    freed = sum(home.blobs.size_of(b) for b in present)
    plan_sha = home.blobs.put_bytes(canonical_bytes(plan))
    for b in present:
        path = home.blobs.path_of(b)
        path.chmod(0o644)
        path.unlink()
    parameters = PruneParameters(plan_sha256=plan_sha, removed_blobs=tuple(present), freed_bytes=freed)
    receipt = build_receipt(PruneReceipt, flow=flow, task="prune_checkpoints", started_at=started, parameters=parameters)
    return home.record(receipt), receipt
