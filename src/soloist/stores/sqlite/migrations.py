"""Versioned schema of the SQLite store.

``MIGRATIONS[i]`` brings the schema from version ``i`` to ``i + 1``. Released entries are
never edited: a schema change is a new entry at the end. :func:`migrate` applies the missing
ones inside one ``BEGIN IMMEDIATE`` transaction, so when several processes start at once the
first takes the write lock and migrates, and the others wait, then find nothing to do.

A step is one SQL statement, or a Python function of the connection and the migration's
instant (epoch microseconds) for data that SQL cannot compute alone (a stream's slot is
:func:`soloist.models.stream_slot`, CRC-32 in Python).

Times are INTEGER microseconds since the Unix epoch (exact and sortable); JSON columns hold
``json.dumps`` text.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from soloist.clock import SystemClock, to_epoch_us
from soloist.errors import StoreError
from soloist.models import stream_slot

__all__ = ["MIGRATIONS", "apply_migration", "migrate", "schema_version"]

#: One step of a migration: a single SQL statement, or a function of the connection and
#: the migration's instant in epoch microseconds.
Step = str | Callable[[sqlite3.Connection, int], None]


def _index_existing_cursors(conn: sqlite3.Connection, at: int) -> None:
    """Migration 5: every cursor already there enters the planning index, due at its last
    plan time (``at`` when it was never planned) so the new planner re-plans it from there,
    with its slot (:func:`~soloist.models.stream_slot`)."""
    streams = conn.execute("SELECT job, scope FROM plan_cursors").fetchall()
    conn.executemany(
        "UPDATE plan_cursors SET slot = ?, next_plan_time = COALESCE(last_plan_time, ?) "
        "WHERE job = ? AND scope = ?",
        ((stream_slot(job, scope), at, job, scope) for job, scope in streams),
    )


# Each migration is a sequence of single statements: ``executescript`` would commit the
# surrounding transaction first and lose the atomicity this module relies on.
MIGRATIONS: tuple[tuple[Step, ...], ...] = (
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
    (
        # 5: the planning index. Each cursor's next instant to plan (NULL: out of the index)
        # and its stream's slot (stream_slot, 0 <= slot < SLOTS), filled in for the cursors
        # there; the partial index serves plan_due in order (ties by job, scope) and lets it
        # test the slot without reading the row.
        "ALTER TABLE plan_cursors ADD COLUMN next_plan_time INTEGER",
        "ALTER TABLE plan_cursors ADD COLUMN slot INTEGER",
        _index_existing_cursors,
        """
        CREATE INDEX plan_cursors_due ON plan_cursors (next_plan_time, job, scope, slot)
        WHERE next_plan_time IS NOT NULL
        """,
        # The leases of the planning partitions, apart from the leader leases; a row stays
        # when its lease lapses or is released, so epochs never repeat.
        """
        CREATE TABLE partition_leases (
            partition  INTEGER PRIMARY KEY,
            holder     TEXT NOT NULL,
            epoch      INTEGER NOT NULL,
            expires_at INTEGER NOT NULL
        )
        """,
    ),
    (
        # 6: cancellation. Whether someone asked to cancel the occurrence (0/1): a running
        # row's runner learns it from its lease renewals. Rows already there get 0.
        "ALTER TABLE occurrences ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0",
    ),
    (
        # 7: history retention (soloist.stores.sqlite.history). Partial indexes of the
        # finished rows only: claims, renewals and releases (no finish time) never touch
        # them. By finish time, for the oldest-first walk; by job and finish time, for
        # keeping each job's newest finished row. Creating them reads the table once,
        # holding the write lock (about a second per million rows).
        "CREATE INDEX IF NOT EXISTS occurrences_finished ON occurrences (finished_at) "
        "WHERE finished_at IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS occurrences_job_finished ON occurrences (job, finished_at) "
        "WHERE finished_at IS NOT NULL",
    ),
    (
        # 8: a job's last outcome (soloist.stores.sqlite.pages): its finished rows in
        # history order (read backwards: plan time, creation, rowid, all descending), so
        # that the probe reads one entry however many rows wait after the last finished
        # one; through occurrences_history it read and sorted every row of the job.
        "CREATE INDEX IF NOT EXISTS occurrences_job_last ON occurrences "
        "(job, plan_time, created_at) WHERE finished_at IS NOT NULL",
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


def apply_migration(conn: sqlite3.Connection, version: int, at: int) -> None:
    """Run the steps of migration ``version`` (1-based) at the instant ``at`` (epoch
    microseconds), inside the caller's transaction."""
    for step in MIGRATIONS[version - 1]:
        if isinstance(step, str):
            conn.execute(step)
        else:
            step(conn, at)


def migrate(conn: sqlite3.Connection, now: Callable[[], int] | None = None) -> list[int]:
    """Apply the missing migrations atomically; return the versions applied (often none).
    ``now``: the store's clock in epoch microseconds (read once the write lock is held;
    the system clock by default), the instant of data steps."""
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
        at = now() if now is not None else to_epoch_us(SystemClock().now())
        for version in applied:
            apply_migration(conn, version, at)
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
