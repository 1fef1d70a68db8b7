"""Named catalog queries used by tasks and the CLI, so no SQL string lives outside ``stores/``."""

from __future__ import annotations

from voxledger.stores.catalog import Catalog


def receipts_of_run(catalog: Catalog, run_key: str) -> list[str]:
    """Ids of the checkpoint receipts recorded for a training run key, by epoch."""
    with catalog.connect(read_only=True) as con:
        rows = con.execute("SELECT receipt_sha256 FROM checkpoints WHERE run_key = ? ORDER BY epoch", [run_key]).fetchall()
    return [str(r[0]) for r in rows]


def registered_plans(catalog: Catalog, source_name: str, plan_kind: str) -> list[tuple[str, str]]:
    """(plan receipt id, plan digest) of every registration of a plan file name and kind."""
    with catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT receipt_sha256, doc->>'$.parameters.plan_sha256' FROM receipts WHERE kind = 'plan'"
            " AND doc->>'$.parameters.source_name' = ? AND doc->>'$.parameters.plan_kind' = ?"
            " ORDER BY finished_at",
            [source_name, plan_kind],
        ).fetchall()
    return [(str(rid), str(sha)) for rid, sha in rows]


def promotion_that_moved(catalog: Catalog, alias: str, target_sha256: str, run_rid: str, policy_sha256: str) -> str | None:
    """The newest succeeded promotion of ``run_rid`` under a policy that moved ``alias`` to a target."""
    with catalog.connect(read_only=True) as con:
        row = con.execute(
            "SELECT r.receipt_sha256 FROM receipts r JOIN alias_history a ON a.receipt_sha256 = r.receipt_sha256"
            " WHERE r.kind = 'promotion' AND r.status = 'succeeded' AND a.alias = ? AND a.target_sha256 = ?"
            " AND r.doc->>'$.parameters.training_run' = ? AND r.doc->>'$.parameters.policy_sha256' = ?"
            " ORDER BY r.finished_at DESC LIMIT 1",
            [alias, target_sha256, run_rid, policy_sha256],
        ).fetchone()
    return str(row[0]) if row else None


def alias_target(catalog: Catalog, alias: str) -> str | None:
    """The artifact an alias points at now, or None for an alias that never moved."""
    with catalog.connect(read_only=True) as con:
        row = con.execute("SELECT target_sha256 FROM aliases WHERE alias = ?", [alias]).fetchone()
    return str(row[0]) if row else None


def latest_alias_move(catalog: Catalog, alias: str) -> tuple[str, str | None, str] | None:
    """(target, base, promotion receipt) of an alias's latest move, or None."""
    with catalog.connect(read_only=True) as con:
        row = con.execute(
            "SELECT target_sha256, base_sha256, receipt_sha256 FROM alias_history WHERE alias = ? ORDER BY moved_at DESC LIMIT 1", [alias]
        ).fetchone()
    return (str(row[0]), row[1], str(row[2])) if row else None


def checkpoint_rows(catalog: Catalog) -> list[tuple[str, str, int, float, str]]:
    """(receipt, run key, epoch, CV loss, tree) of every checkpoint, by run and epoch."""
    with catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT receipt_sha256, run_key, epoch, cv_loss, tree_sha256 FROM checkpoints ORDER BY run_key, epoch"
        ).fetchall()
    return [(str(a), str(b), int(c), float(d), str(e)) for a, b, c, d, e in rows]


def references_for_pruning(catalog: Catalog, kinds: tuple[str, ...]) -> tuple[list[tuple[str, str]], set[str], list[str]]:
    """Every edge (src, dst), every checkpoint receipt id, and the documents of receipts of ``kinds``."""
    with catalog.connect(read_only=True) as con:
        edges = [(str(s), str(d)) for s, d in con.execute("SELECT src, dst FROM edges").fetchall()]
        checkpoints = {str(r[0]) for r in con.execute("SELECT receipt_sha256 FROM checkpoints").fetchall()}
        docs = [str(r[0]) for r in con.execute("SELECT doc FROM receipts WHERE list_contains(?, kind)", [list(kinds)]).fetchall()]
    return edges, checkpoints, docs
