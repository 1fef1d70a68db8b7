"""Named catalog queries used by tasks and the CLI, so no SQL string lives outside ``stores/``."""

from __future__ import annotations

from typing import Any

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


def promotion_that_moved(catalog: Catalog, line: str, alias: str, target_sha256: str, run_rid: str, policy_sha256: str) -> str | None:
    """The newest succeeded promotion of ``run_rid`` under a policy that moved ``line``'s ``alias`` to a target."""
    with catalog.connect(read_only=True) as con:
        row = con.execute(
            "SELECT r.receipt_sha256 FROM receipts r JOIN alias_history a ON a.receipt_sha256 = r.receipt_sha256"
            " WHERE r.kind = 'promotion' AND r.status = 'succeeded' AND a.line = ? AND a.alias = ? AND a.target_sha256 = ?"
            " AND r.doc->>'$.parameters.training_run' = ? AND r.doc->>'$.parameters.policy_sha256' = ?"
            " ORDER BY r.finished_at DESC LIMIT 1",
            [line, alias, target_sha256, run_rid, policy_sha256],
        ).fetchone()
    return str(row[0]) if row else None


def alias_targets(catalog: Catalog, alias: str) -> dict[str, str]:
    """line -> the artifact ``alias`` points at now in that line (lines where it never moved are absent)."""
    with catalog.connect(read_only=True) as con:
        rows = con.execute("SELECT line, target_sha256 FROM aliases WHERE alias = ? ORDER BY line", [alias]).fetchall()
    return {str(line): str(target) for line, target in rows}


def latest_alias_move(catalog: Catalog, line: str, alias: str) -> tuple[str, str | None, str] | None:
    """(target, base, promotion receipt) of the latest move of ``line``'s ``alias``, or None."""
    with catalog.connect(read_only=True) as con:
        row = con.execute(
            "SELECT target_sha256, base_sha256, receipt_sha256 FROM alias_history WHERE line = ? AND alias = ?"
            " ORDER BY moved_at DESC LIMIT 1",
            [line, alias],
        ).fetchone()
    return (str(row[0]), row[1], str(row[2])) if row else None


def model_lines(catalog: Catalog) -> list[str]:
    """Every model line whose aliases ever moved, by name."""
    with catalog.connect(read_only=True) as con:
        return [str(r[0]) for r in con.execute("SELECT line FROM model_lines ORDER BY line").fetchall()]


def checkpoint_rows(catalog: Catalog) -> list[tuple[str, str, int, float, str]]:
    """(receipt, run key, epoch, CV loss, tree) of every checkpoint, by run and epoch."""
    with catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT receipt_sha256, run_key, epoch, cv_loss, tree_sha256 FROM checkpoints ORDER BY run_key, epoch"
        ).fetchall()
    return [(str(a), str(b), int(c), float(d), str(e)) for a, b, c, d, e in rows]


def backends_of_checkpoint(catalog: Catalog, tree_sha256: str) -> list[str]:
    """Backends of the recorded training runs that checkpointed ``tree_sha256`` (a model or adapter tree)."""
    with catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT DISTINCT t.backend FROM checkpoints c JOIN training_epochs t ON t.run_key = c.run_key"
            " WHERE c.tree_sha256 = ? ORDER BY 1",
            [tree_sha256],
        ).fetchall()
    return [str(r[0]) for r in rows]


def references_for_pruning(catalog: Catalog, kinds: tuple[str, ...]) -> tuple[list[tuple[str, str]], set[str], list[str]]:
    """Every edge (src, dst), every checkpoint receipt id, and the documents of receipts of ``kinds``."""
    with catalog.connect(read_only=True) as con:
        edges = [(str(s), str(d)) for s, d in con.execute("SELECT src, dst FROM edges").fetchall()]
        checkpoints = {str(r[0]) for r in con.execute("SELECT receipt_sha256 FROM checkpoints").fetchall()}
        docs = [str(r[0]) for r in con.execute("SELECT doc FROM receipts WHERE list_contains(?, kind)", [list(kinds)]).fetchall()]
    return edges, checkpoints, docs


def receipt_labels(con: Any) -> dict[str, str]:
    """Receipt id -> "kind (task)" for every receipt (labels of a lineage picture)."""
    return {str(r): str(label) for r, label in con.execute("SELECT receipt_sha256, kind || ' (' || task || ')' FROM receipts").fetchall()}


def packages_with_prefix(catalog: Catalog, prefix: str, limit: int = 3) -> list[str]:
    """Recorded package digests starting with ``prefix`` (at most ``limit``)."""
    with catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT DISTINCT package_sha256 FROM packages WHERE starts_with(package_sha256, ?) LIMIT ?", [prefix, limit]
        ).fetchall()
    return [str(r[0]) for r in rows]


def package_receipt_of(catalog: Catalog, package_sha256: str) -> str | None:
    """The newest succeeded package receipt that built this package digest."""
    with catalog.connect(read_only=True) as con:
        row = con.execute(
            "SELECT receipt_sha256 FROM packages WHERE package_sha256 = ? AND status = 'succeeded' ORDER BY finished_at DESC LIMIT 1",
            [package_sha256],
        ).fetchone()
    return str(row[0]) if row else None


def alias_moves(catalog: Catalog, alias: str | None, at: str | None, line: str | None = None) -> tuple[list[tuple[Any, ...]], list[str]]:
    """Alias history rows (line, alias, target, base, moved_at, reason, receipt), optionally one line,
    one alias and only the move in force at ISO time ``at`` (per line and alias); plus every
    ``LINE:ALIAS`` the history knows."""
    sql = "SELECT line, alias, target_sha256, base_sha256, moved_at, reason, receipt_sha256 FROM alias_history WHERE 1=1"
    params: list[Any] = []
    if line:
        sql += " AND line = ?"
        params.append(line)
    if alias:
        sql += " AND alias = ?"
        params.append(alias)
    if at:
        sql += " AND moved_at <= ?::TIMESTAMPTZ QUALIFY row_number() OVER (PARTITION BY line, alias ORDER BY moved_at DESC) = 1"
        params.append(at)
    sql += " ORDER BY line, moved_at, alias"
    with catalog.connect(read_only=True) as con:
        rows = [tuple(r) for r in con.execute(sql, params).fetchall()]
        known = [f"{r[0]}:{r[1]}" for r in con.execute("SELECT DISTINCT line, alias FROM alias_history ORDER BY line, alias").fetchall()]
    return rows, known


def aggregated_submissions(catalog: Catalog, packet_set_id: str) -> dict[str, str]:
    """packet digest -> submission digest, for submissions an aggregate of this packet set used.

    Should two aggregates name different submissions of one packet (a catalog written before the
    accept decision was taken under the commit lock), the earliest aggregate's submission counts.
    """
    return {packet: sha for packet, (sha, _, _) in _aggregated(catalog, packet_set_id).items()}


def aggregated_sessions(catalog: Catalog, packet_set_id: str) -> dict[str, tuple[str, str]]:
    """session id -> (submission digest, rater id), for submissions an aggregate of this packet set used."""
    out: dict[str, tuple[str, str]] = {}
    for sha, rater, session in _aggregated(catalog, packet_set_id, per_packet=False).values():
        out.setdefault(session, (sha, rater))
    return out


def _aggregated(catalog: Catalog, packet_set_id: str, *, per_packet: bool = True) -> dict[str, tuple[str, str, str]]:
    """packet digest (or submission digest) -> (submission digest, rater id, session id), earliest aggregate first."""
    with catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT s.doc->>'$.parameters.packet_sha256', s.doc->>'$.parameters.submission_sha256',"
            " s.doc->>'$.parameters.rater_id', s.doc->>'$.parameters.session_id', min(a.finished_at) AS first_at"
            " FROM receipts s JOIN edges e ON e.src = s.receipt_sha256 AND e.role = 'submission'"
            " JOIN receipts a ON a.receipt_sha256 = e.dst AND a.kind = 'aggregate'"
            " WHERE s.kind = 'submission' AND s.doc->>'$.parameters.packet_set_receipt_sha256' = ?"
            " GROUP BY ALL ORDER BY first_at, 2",
            [packet_set_id],
        ).fetchall()
    out: dict[str, tuple[str, str, str]] = {}
    for packet, sha, rater, session, _ in rows:
        out.setdefault(str(packet) if per_packet else str(sha), (str(sha), str(rater), str(session)))
    return out


def latest_pipeline_run(catalog: Catalog, status: str = "succeeded") -> str | None:
    """The newest pipeline-run receipt with this status."""
    with catalog.connect(read_only=True) as con:
        row = con.execute(
            "SELECT receipt_sha256 FROM receipts WHERE kind = 'pipeline_run' AND status = ? ORDER BY finished_at DESC LIMIT 1", [status]
        ).fetchone()
    return str(row[0]) if row else None


def output_trees(catalog: Catalog, digests: list[str]) -> set[str]:
    """Which of ``digests`` some receipt recorded as a tree output (so its files are in the store)."""
    if not digests:
        return set()
    from voxledger.stores.trees import TREE_MEDIA_TYPE

    with catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT sha256 FROM artifacts WHERE media_type = ? AND list_contains(?, sha256)", [TREE_MEDIA_TYPE, digests]
        ).fetchall()
    return {str(r[0]) for r in rows}


def receipts_of_kinds(catalog: Catalog, kinds: list[str]) -> list[tuple[str, str]]:
    """(receipt id, kind) of every receipt of ``kinds``, oldest first (``export mlflow``)."""
    with catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT receipt_sha256, kind FROM receipts WHERE list_contains(?, kind) ORDER BY finished_at, receipt_sha256", [kinds]
        ).fetchall()
    return [(str(a), str(b)) for a, b in rows]


def succeeded_packages(catalog: Catalog) -> list[tuple[str, str, str]]:
    """(package receipt, package digest, checkpoint tree) of every succeeded package build, oldest first."""
    with catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT receipt_sha256, package_sha256, checkpoint_tree_sha256 FROM packages WHERE status = 'succeeded'"
            " ORDER BY finished_at, receipt_sha256"
        ).fetchall()
    return [(str(a), str(b), str(c)) for a, b, c in rows]


def evaluation_observations(catalog: Catalog, plan_sha256: str) -> dict[tuple[str, str], dict[str, float]]:
    """(candidate, prompt) -> metric -> value of the first seed of every evaluation of ``plan_sha256`` (the newest wins)."""
    with catalog.connect(read_only=True) as con:
        rows = con.execute(
            "SELECT o.candidate, o.prompt_id, o.metric, o.value FROM observations o JOIN receipts r USING (receipt_sha256)"
            " WHERE o.plan_sha256 = ? AND o.seed = (SELECT min(seed) FROM observations WHERE plan_sha256 = ?)"
            " ORDER BY r.finished_at",
            [plan_sha256, plan_sha256],
        ).fetchall()
    out: dict[tuple[str, str], dict[str, float]] = {}
    for candidate, prompt, metric, value in rows:
        out.setdefault((str(candidate), str(prompt)), {})[str(metric)] = float(value)
    return out
