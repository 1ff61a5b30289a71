"""Versioned schema of the SQLite store.

``MIGRATIONS[i]`` brings the schema from version ``i`` to ``i + 1``. Released entries are
never edited: a schema change is a new entry at the end. :func:`migrate` applies the missing
ones inside one ``BEGIN IMMEDIATE`` transaction, so when several processes start at once the
first takes the write lock and migrates, and the others wait, then find nothing to do.

Times are INTEGER microseconds since the Unix epoch (exact and sortable); JSON columns hold
``json.dumps`` text.
"""

from __future__ import annotations

import sqlite3

from soloist.clock import SystemClock, to_epoch_us
from soloist.errors import StoreError

__all__ = ["MIGRATIONS", "migrate", "schema_version"]

# Each migration is a sequence of single statements: ``executescript`` would commit the
# surrounding transaction first and lose the atomicity this module relies on.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE occurrences (
            id               TEXT PRIMARY KEY,
            dedupe_key       TEXT NOT NULL UNIQUE,
            job              TEXT NOT NULL,
            task             TEXT NOT NULL,
            scope            TEXT NOT NULL,
            plan_time        INTEGER NOT NULL,
            due_at           INTEGER NOT NULL,
            kind             TEXT NOT NULL,
            state            TEXT NOT NULL,
            attempt          INTEGER NOT NULL DEFAULT 0,
            max_attempts     INTEGER NOT NULL DEFAULT 1,
            overlap          TEXT NOT NULL,
            payload          TEXT NOT NULL DEFAULT '{}',
            instance_id      TEXT,
            lease_expires_at INTEGER,
            fencing_token    INTEGER NOT NULL DEFAULT 0,
            created_at       INTEGER NOT NULL,
            started_at       INTEGER,
            finished_at      INTEGER,
            error_code       TEXT,
            error_message    TEXT,
            result           TEXT
        )
        """,
        # Claims and next_due scan claimable rows by due time.
        "CREATE INDEX occurrences_claim ON occurrences (state, due_at)",
        # The reaper looks for expired leases among running rows.
        "CREATE INDEX occurrences_lease ON occurrences (state, lease_expires_at)",
        # History listings, newest plan time first.
        "CREATE INDEX occurrences_history ON occurrences (job, plan_time)",
        # Overlap checks: is a (job, scope) running?
        "CREATE INDEX occurrences_overlap ON occurrences (job, scope, state)",
        """
        CREATE TABLE plan_cursors (
            job            TEXT NOT NULL,
            scope          TEXT NOT NULL,
            last_plan_time INTEGER,
            planned_count  INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (job, scope)
        )
        """,
        """
        CREATE TABLE jobs (
            name       TEXT PRIMARY KEY,
            task       TEXT NOT NULL,
            schedule   TEXT NOT NULL,
            dynamic    INTEGER NOT NULL DEFAULT 0,
            paused     INTEGER NOT NULL DEFAULT 0,
            payload    TEXT NOT NULL DEFAULT '{}',
            metadata   TEXT NOT NULL DEFAULT '{}',
            created_at INTEGER NOT NULL
        )
        """,
    ),
    (
        # 2: the audit log of attempts (one row per claim that ended).
        """
        CREATE TABLE attempts (
            occurrence_id TEXT NOT NULL,
            fencing_token INTEGER NOT NULL,
            attempt       INTEGER NOT NULL,
            instance_id   TEXT,
            started_at    INTEGER,
            finished_at   INTEGER NOT NULL,
            outcome       TEXT NOT NULL,
            error_code    TEXT,
            error_message TEXT,
            PRIMARY KEY (occurrence_id, fencing_token)
        )
        """,
    ),
    (
        # 3: leader leases (one row per election, kept when it lapses: epochs never repeat)
        # and the heartbeats of live instances.
        """
        CREATE TABLE leader_leases (
            name       TEXT PRIMARY KEY,
            leader_id  TEXT NOT NULL,
            epoch      INTEGER NOT NULL,
            elected_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL
        )
        """,
        """
        CREATE TABLE instances (
            instance_id TEXT PRIMARY KEY,
            mode        TEXT NOT NULL,
            hostname    TEXT NOT NULL,
            pid         INTEGER NOT NULL,
            started_at  INTEGER NOT NULL,
            last_seen   INTEGER NOT NULL,
            expires_at  INTEGER NOT NULL,
            metadata    TEXT NOT NULL DEFAULT '{}'
        )
        """,
        "CREATE INDEX instances_expiry ON instances (expires_at)",
    ),
    (
        # 4: a crash is not a failure. Lease expiries so far and the budget of them
        # (models.DEFAULT_MAX_CRASHES when this was written); rows already there get both.
        "ALTER TABLE occurrences ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE occurrences ADD COLUMN max_crashes INTEGER NOT NULL DEFAULT 3",
    ),
)

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS soloist_schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at INTEGER NOT NULL
)
"""


def schema_version(conn: sqlite3.Connection) -> int:
    """The newest applied migration (0 for an empty database)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'soloist_schema_version'"
    ).fetchone()
    if exists is None:
        return 0
    row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM soloist_schema_version").fetchone()
    return int(row[0])


def migrate(conn: sqlite3.Connection) -> list[int]:
    """Apply the missing migrations atomically; return the versions applied (often none)."""
    if schema_version(conn) == len(MIGRATIONS):
        return []  # the common case: read only, no write lock taken
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_VERSION_TABLE)
        current = schema_version(conn)
        if current > len(MIGRATIONS):
            raise StoreError(
                f"store schema version {current} is newer than this soloist supports "
                f"({len(MIGRATIONS)}); upgrade soloist"
            )
        applied = list(range(current + 1, len(MIGRATIONS) + 1))
        for version in applied:
            for statement in MIGRATIONS[version - 1]:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO soloist_schema_version (version, applied_at) VALUES (?, ?)",
                (version, to_epoch_us(SystemClock().now())),
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return applied
