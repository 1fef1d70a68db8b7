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
