"""The journal of a served listening test: links, events and answers per rater, in one SQLite file.

Every accepted request is one transaction (``synchronous=FULL`` in WAL mode), so a process killed
at any point keeps each event and answer it acknowledged and none it did not. The file lives in
the home (``listening/served/<packet set>/sessions.sqlite``); only the server writes it, from one
thread. Secrets are never stored: links and cookies are kept as their sha256.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_served_sessions",
        """
        CREATE TABLE raters (
            rater_id TEXT PRIMARY KEY,
            packet_sha256 TEXT NOT NULL,
            session_id TEXT NOT NULL,
            link_id TEXT UNIQUE,
            link_sha256 TEXT,
            revoked INTEGER NOT NULL DEFAULT 0,
            cookie_sha256 TEXT,
            page TEXT,
            started_epoch_ms INTEGER,
            user_agent TEXT NOT NULL DEFAULT '',
            finished_at TEXT,
            submission_sha256 TEXT
        );
        CREATE TABLE events (
            rater_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            t_ms INTEGER NOT NULL,
            event TEXT NOT NULL,
            trial TEXT,
            stimulus TEXT,
            detail TEXT,
            PRIMARY KEY (rater_id, seq)
        );
        CREATE TABLE answers (
            rater_id TEXT NOT NULL,
            trial TEXT NOT NULL,
            stimulus TEXT NOT NULL,
            criterion TEXT NOT NULL,
            score REAL NOT NULL,
            t_ms INTEGER NOT NULL,
            PRIMARY KEY (rater_id, trial, stimulus, criterion)
        );
        """,
    ),
)


@dataclass(frozen=True)
class RaterRow:
    """One rater's row: the link (as a digest), the current page and cookie, progress marks."""

    rater_id: str
    packet_sha256: str
    session_id: str
    link_id: str | None
    link_sha256: str | None
    revoked: bool
    cookie_sha256: str | None
    page: str | None
    started_epoch_ms: int | None
    user_agent: str
    finished_at: str | None
    submission_sha256: str | None


@dataclass(frozen=True)
class EventRow:
    """One event as the server recorded it: sequence number, server time since the rater's start."""

    seq: int
    t_ms: int
    event: str
    trial: str | None
    stimulus: str | None
    detail: str | None


@dataclass(frozen=True)
class AnswerRow:
    """The last score given for one cell, at the server time of its ``rate`` event."""

    trial: str
    stimulus: str
    criterion: str
    score: float
    t_ms: int


class SessionStore:
    """The served test's journal; one writer (the server's event loop), short transactions."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA synchronous=FULL")
        self._con.execute("PRAGMA busy_timeout=10000")
        self._migrate()

    def _migrate(self) -> None:
        self._con.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY)")
        done = {r[0] for r in self._con.execute("SELECT name FROM migrations")}
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            self._con.execute("BEGIN IMMEDIATE")
            for statement in filter(str.strip, sql.split(";")):
                self._con.execute(statement)
            self._con.execute("INSERT INTO migrations VALUES (?)", (name,))
            self._con.execute("COMMIT")

    def close(self) -> None:
        """Close the connection (every transaction is already committed)."""
        self._con.close()

    def add_rater(self, rater_id: str, packet_sha256: str, session_id: str) -> None:
        """Register a rater of the set once (later calls keep the first session id)."""
        self._con.execute(
            "INSERT OR IGNORE INTO raters (rater_id, packet_sha256, session_id) VALUES (?, ?, ?)", (rater_id, packet_sha256, session_id)
        )

    def raters(self) -> list[RaterRow]:
        """Every rater of the set, by rater id."""
        rows = self._con.execute(f"SELECT {_RATER_COLUMNS} FROM raters ORDER BY rater_id").fetchall()
        return [_rater(r) for r in rows]

    def rater(self, rater_id: str) -> RaterRow | None:
        """The rater's row, or None."""
        row = self._con.execute(f"SELECT {_RATER_COLUMNS} FROM raters WHERE rater_id = ?", (rater_id,)).fetchone()
        return _rater(row) if row else None

    def by_link(self, link_id: str) -> RaterRow | None:
        """The rater whose link has this id, or None."""
        row = self._con.execute(f"SELECT {_RATER_COLUMNS} FROM raters WHERE link_id = ?", (link_id,)).fetchone()
        return _rater(row) if row else None

    def by_cookie(self, cookie_sha256: str) -> RaterRow | None:
        """The rater whose current cookie hashes to this, or None."""
        row = self._con.execute(f"SELECT {_RATER_COLUMNS} FROM raters WHERE cookie_sha256 = ?", (cookie_sha256,)).fetchone()
        return _rater(row) if row else None

    def set_link(self, rater_id: str, link_id: str, link_sha256: str) -> None:
        """Give the rater a new link (the old one stops working) and end their cookie."""
        self._con.execute(
            "UPDATE raters SET link_id = ?, link_sha256 = ?, revoked = 0, cookie_sha256 = NULL, page = NULL WHERE rater_id = ?",
            (link_id, link_sha256, rater_id),
        )

    def revoke(self, rater_id: str) -> bool:
        """Revoke the rater's link and cookie; False when the rater is unknown."""
        cur = self._con.execute("UPDATE raters SET revoked = 1, cookie_sha256 = NULL, page = NULL WHERE rater_id = ?", (rater_id,))
        return cur.rowcount == 1

    def set_cookie(self, rater_id: str, cookie_sha256: str, user_agent: str) -> None:
        """The browser that opened the link; an earlier browser's cookie stops working."""
        self._con.execute(
            "UPDATE raters SET cookie_sha256 = ?, page = NULL, user_agent = ? WHERE rater_id = ?", (cookie_sha256, user_agent, rater_id)
        )

    def set_page(self, rater_id: str, page: str) -> None:
        """The page now open; POSTs from an earlier page (another tab, before a reload) are refused."""
        self._con.execute("UPDATE raters SET page = ? WHERE rater_id = ?", (page, rater_id))

    def record_event(self, rater_id: str, event: EventRow, answer: AnswerRow | None, started_epoch_ms: int | None) -> None:
        """One event (and the answer it gives), atomically; the first event also fixes the start time."""
        con = self._con
        con.execute("BEGIN IMMEDIATE")
        try:
            con.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
                (rater_id, event.seq, event.t_ms, event.event, event.trial, event.stimulus, event.detail),
            )
            if answer is not None:
                con.execute(
                    "INSERT INTO answers VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (rater_id, trial, stimulus, criterion) "
                    "DO UPDATE SET score = excluded.score, t_ms = excluded.t_ms",
                    (rater_id, answer.trial, answer.stimulus, answer.criterion, answer.score, answer.t_ms),
                )
            if started_epoch_ms is not None:
                con.execute("UPDATE raters SET started_epoch_ms = ? WHERE rater_id = ?", (started_epoch_ms, rater_id))
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def events(self, rater_id: str) -> list[EventRow]:
        """The rater's events in sequence order."""
        rows = self._con.execute(
            "SELECT seq, t_ms, event, trial, stimulus, detail FROM events WHERE rater_id = ? ORDER BY seq", (rater_id,)
        ).fetchall()
        return [EventRow(*r) for r in rows]

    def answers(self, rater_id: str) -> list[AnswerRow]:
        """The rater's answers, one per cell, in the order they were first given."""
        rows = self._con.execute(
            "SELECT trial, stimulus, criterion, score, t_ms FROM answers WHERE rater_id = ? ORDER BY rowid", (rater_id,)
        ).fetchall()
        return [AnswerRow(*r) for r in rows]

    def finish(self, rater_id: str, finished_at: str, submission_sha256: str) -> None:
        """Mark the rater's submission written."""
        self._con.execute(
            "UPDATE raters SET finished_at = ?, submission_sha256 = ? WHERE rater_id = ?", (finished_at, submission_sha256, rater_id)
        )

    def counts(self) -> dict[str, tuple[int, int]]:
        """rater id -> (events, answers) recorded."""
        ev = dict(self._con.execute("SELECT rater_id, count(*) FROM events GROUP BY rater_id").fetchall())
        an = dict(self._con.execute("SELECT rater_id, count(*) FROM answers GROUP BY rater_id").fetchall())
        return {r.rater_id: (int(ev.get(r.rater_id, 0)), int(an.get(r.rater_id, 0))) for r in self.raters()}


_RATER_COLUMNS = (
    "rater_id, packet_sha256, session_id, link_id, link_sha256, revoked, cookie_sha256, page, started_epoch_ms, "
    "user_agent, finished_at, submission_sha256"
)


def _rater(row: tuple[object, ...]) -> RaterRow:
    r = list(row)
    r[5] = bool(r[5])
    return RaterRow(*r)  # type: ignore[arg-type]
