"""Versioned schema of the PostgreSQL store.

``MIGRATIONS[i]`` brings an app's schema from version ``i`` to ``i + 1``. Released entries
are never edited: a schema change is a new entry at the end. Statements are templates in
which ``{schema}`` stands for the app's quoted schema name. A version that must compute
values SQL cannot (a stream's slot) also has a step in Python (:data:`PYTHON_STEPS`), run
after its statements in the same transaction.

:func:`migrate` reads the version first and, when it is current (the common case on every
start), returns without taking any lock. Otherwise it applies the missing migrations in one
transaction under ``pg_advisory_xact_lock`` keyed by the schema name, so when several
instances start at once the first migrates and the others wait, then find nothing to do.
DDL is transactional in PostgreSQL: a failed migration leaves nothing half done.

Times are ``timestamptz`` (microsecond precision, exactly a Python datetime's); JSON
columns are ``json`` rather than ``jsonb`` because ``json`` keeps the text as written, so
values read back exactly as stored (``jsonb`` would turn ``1e20`` into an integer).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors, sql

from soloist.errors import StoreError
from soloist.models import stream_slot

__all__ = ["MIGRATIONS", "PYTHON_STEPS", "migrate", "schema_version"]

Conn = psycopg.AsyncConnection[Any]

_CLAIMABLE = "state IN ('scheduled', 'failed')"

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE {schema}.occurrences (
            seq              bigint GENERATED ALWAYS AS IDENTITY,
            id               text PRIMARY KEY,
            dedupe_key       text NOT NULL UNIQUE,
            job              text NOT NULL,
            task             text NOT NULL,
            scope            text NOT NULL,
            plan_time        timestamptz NOT NULL,
            due_at           timestamptz NOT NULL,
            kind             text NOT NULL,
            state            text NOT NULL CHECK (state IN
                ('scheduled', 'running', 'succeeded', 'failed', 'dead', 'skipped')),
            attempt          integer NOT NULL DEFAULT 0,
            max_attempts     integer NOT NULL,
            overlap          text NOT NULL CHECK (overlap IN ('skip', 'allow', 'queue')),
            payload          json NOT NULL,
            instance_id      text,
            lease_expires_at timestamptz,
            fencing_token    bigint NOT NULL DEFAULT 0,
            created_at       timestamptz NOT NULL,
            started_at       timestamptz,
            finished_at      timestamptz,
            error_code       text,
            error_message    text,
            result           json
        )
        """,
        # Claims and next_due: claimable rows in claim order.
        "CREATE INDEX occurrences_claim ON {schema}.occurrences (due_at, plan_time, seq) "
        f"WHERE {_CLAIMABLE}",
        # Overlap rules: the earlier claimable siblings of a (job, scope)...
        "CREATE INDEX occurrences_siblings ON {schema}.occurrences "
        f"(job, scope, due_at, plan_time, seq) WHERE {_CLAIMABLE}",
        # Claimable skip/queue rows only (few, unlike a queue of tasks): the rows a claim
        # may have to mark skipped.
        "CREATE INDEX occurrences_exclusive ON {schema}.occurrences "
        f"(job, scope, due_at, plan_time, seq) WHERE {_CLAIMABLE} "
        "AND overlap IN ('skip', 'queue')",
        # Whether a (job, scope) has a running row.
        "CREATE INDEX occurrences_running ON {schema}.occurrences (job, scope) "
        "WHERE state = 'running'",
        # The reaper: expired leases among running rows.
        "CREATE INDEX occurrences_lease ON {schema}.occurrences (lease_expires_at) "
        "WHERE state = 'running'",
        # History, newest plan time first, all jobs or one.
        "CREATE INDEX occurrences_history ON {schema}.occurrences "
        "(plan_time DESC, created_at DESC, seq DESC)",
        "CREATE INDEX occurrences_job_history ON {schema}.occurrences "
        "(job, plan_time DESC, created_at DESC, seq DESC)",
        """
        CREATE TABLE {schema}.plan_cursors (
            job            text NOT NULL,
            scope          text NOT NULL,
            last_plan_time timestamptz,
            planned_count  bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (job, scope)
        )
        """,
        """
        CREATE TABLE {schema}.jobs (
            name       text PRIMARY KEY,
            task       text NOT NULL,
            schedule   json NOT NULL,
            dynamic    boolean NOT NULL DEFAULT false,
            paused     boolean NOT NULL DEFAULT false,
            payload    json NOT NULL,
            metadata   json NOT NULL,
            created_at timestamptz NOT NULL
        )
        """,
        # The audit log: one row per attempt that ended (completed, reaped or released).
        """
        CREATE TABLE {schema}.attempts (
            occurrence_id text NOT NULL,
            fencing_token bigint NOT NULL,
            attempt       integer NOT NULL,
            instance_id   text,
            started_at    timestamptz,
            finished_at   timestamptz NOT NULL,
            outcome       text NOT NULL,
            error_code    text,
            error_message text,
            PRIMARY KEY (occurrence_id, fencing_token)
        )
        """,
    ),
    (
        # 2: leader leases (one row per election, kept when it lapses: epochs never repeat)
        # and the heartbeats of live instances.
        """
        CREATE TABLE {schema}.leader_leases (
            name       text PRIMARY KEY,
            leader_id  text NOT NULL,
            epoch      bigint NOT NULL,
            elected_at timestamptz NOT NULL,
            expires_at timestamptz NOT NULL
        )
        """,
        """
        CREATE TABLE {schema}.instances (
            instance_id text PRIMARY KEY,
            mode        text NOT NULL,
            hostname    text NOT NULL,
            pid         integer NOT NULL,
            started_at  timestamptz NOT NULL,
            last_seen   timestamptz NOT NULL,
            expires_at  timestamptz NOT NULL,
            metadata    json NOT NULL
        )
        """,
        "CREATE INDEX instances_expiry ON {schema}.instances (expires_at)",
    ),
    (
        # 3: fewer index entries per write (each claim, completion and insert paid for all).
        # The reaper finds expired leases among the running rows through occurrences_running
        # (running rows are few: at most the slots of the live instances), so lease
        # renewals, which change only lease_expires_at, become HOT updates.
        "DROP INDEX {schema}.occurrences_lease",
        # Enqueued tasks (kind 'task', always overlap allow) need no sibling entry: a task's
        # job is the task's own name, which no scheduled job shares (one namespace), so the
        # overlap check of a skip/queue candidate never meets one.
        "CREATE INDEX occurrences_job_siblings ON {schema}.occurrences "
        f"(job, scope, due_at, plan_time, seq) WHERE {_CLAIMABLE} AND kind <> 'task'",
        "DROP INDEX {schema}.occurrences_siblings",
    ),
    (
        # 4: a crash is not a failure. Lease expiries so far and the budget of them
        # (models.DEFAULT_MAX_CRASHES when this was written); rows already there get both.
        # A constant default adds a column without rewriting the table.
        "ALTER TABLE {schema}.occurrences ADD COLUMN crashes integer NOT NULL DEFAULT 0",
        "ALTER TABLE {schema}.occurrences ADD COLUMN max_crashes integer NOT NULL DEFAULT 3",
    ),
    (
        # 5: the overlap group is (job, scope, task): in local mode every instance's copies
        # of a job share its name, each with a task of its own, and the copies a dead
        # instance left stay claimable for good. With the task in the index, the claim's
        # earlier-sibling probe goes straight to its own group instead of walking (and
        # reading the rows of) every other instance's copies. As many entries as before.
        "CREATE INDEX occurrences_group_siblings ON {schema}.occurrences "
        f"(job, scope, task, due_at, plan_time, seq) WHERE {_CLAIMABLE} AND kind <> 'task'",
        "DROP INDEX {schema}.occurrences_job_siblings",
    ),
    (
        # 6: the planning index and the planning partitions. A cursor's next_plan_time is
        # its entry in the index (NULL: out of it), found through a partial index that holds
        # only the entries; its slot (models.stream_slot, computed in Python) lets plan_due
        # keep to the slots of the partitions an instance holds. The slot stays nullable:
        # an instance of an older version may still write cursors during a rolling upgrade
        # (they stay out of the index until a newer planner revives them, slot included).
        # Cursors written before enter the index by _index_old_cursors (PYTHON_STEPS).
        "ALTER TABLE {schema}.plan_cursors ADD COLUMN next_plan_time timestamptz",
        "ALTER TABLE {schema}.plan_cursors ADD COLUMN slot integer",
        # In the order plan_due reads it (ties by job, then scope, bytewise), so that a
        # batch out of thousands of streams due at one instant reads only the batch; the
        # slot included, so that the slot filter reads no table row.
        'CREATE INDEX plan_cursors_due ON {schema}.plan_cursors (next_plan_time, job COLLATE "C", '
        'scope COLLATE "C") INCLUDE (slot) WHERE next_plan_time IS NOT NULL',
        # One lease row per partition, apart from the leader leases, never deleted: a
        # lapsed or released lease keeps its epoch, so epochs never repeat.
        """
        CREATE TABLE {schema}.partition_leases (
            partition  integer PRIMARY KEY,
            holder     text NOT NULL,
            epoch      bigint NOT NULL,
            expires_at timestamptz NOT NULL
        )
        """,
    ),
    (
        # 7: history retention (soloist.stores.postgres.history). Partial indexes of the
        # finished rows only: claims, renewals and releases (no finish time) add no entry
        # to them, and a renewal stays a HOT update. By finish time, for the oldest-first
        # walk of the pruner; by job and finish time, for keeping each job's newest
        # finished row. Built inside the migration's transaction, which holds writes back
        # while it reads the table once (seconds per million rows): IF NOT EXISTS, so that
        # a large table can get them first with CREATE INDEX CONCURRENTLY (docs: store
        # URLs, history retention).
        "CREATE INDEX IF NOT EXISTS occurrences_finished ON {schema}.occurrences "
        "(finished_at) WHERE finished_at IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS occurrences_job_finished ON {schema}.occurrences "
        "(job, finished_at) WHERE finished_at IS NOT NULL",
    ),
    (
        # 8: cancellation. Whether someone asked to cancel the occurrence: a running row's
        # runner learns it from its lease renewals. A constant default adds the column
        # without rewriting the table; rows already there get false.
        "ALTER TABLE {schema}.occurrences "
        "ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false",
    ),
    (
        # 9: pages of jobs (soloist.stores.postgres.pages). The names in byte order (COLLATE
        # "C", whatever the database's collation), so that a name prefix is one range of
        # it and a page after a name one walk; paused included, so that the walk and the
        # counts of GET /status read no table row. One entry per job: jobs change rarely.
        'CREATE INDEX IF NOT EXISTS jobs_by_name ON {schema}.jobs (name COLLATE "C") '
        "INCLUDE (paused)",
    ),
    (
        # 10: a job's last outcome (soloist.stores.postgres.pages): its finished rows in
        # history order, so that the probe reads one entry, however many rows wait after
        # the last finished one (a queue behind a slow handler, a catch-up backlog); the
        # walk of occurrences_job_history read and dropped each of them. Partial: claims,
        # renewals and releases add no entry. Built inside the migration's transaction (a
        # read of the table, seconds per million rows): IF NOT EXISTS, so that a large
        # table can get it first with CREATE INDEX CONCURRENTLY.
        "CREATE INDEX IF NOT EXISTS occurrences_job_last ON {schema}.occurrences "
        "(job, plan_time DESC, created_at DESC, seq DESC) WHERE finished_at IS NOT NULL",
    ),
)

#: Cursors filled per statement by :func:`_index_old_cursors`.
CURSOR_BATCH = 5000
# The cursors in key order, from the start or after a key (a keyset walk of the primary key).
_OLD_CURSORS = (
    "SELECT job, scope FROM {schema}.plan_cursors {after} ORDER BY job, scope LIMIT %(limit)s"
)
_AFTER = "WHERE (job, scope) > (%(job)s, %(scope)s)"
# A cursor planned before re-plans from its last plan time (the planner walks its schedule
# on from there, as the old planner did); one never planned is due at the store's now.
_INDEX_CURSORS = """
UPDATE {schema}.plan_cursors c
SET slot = s.slot,
    next_plan_time = COALESCE(c.last_plan_time, %(now)s::timestamptz, statement_timestamp())
FROM unnest(%(jobs)s::text[], %(scopes)s::text[], %(slots)s::integer[]) AS s(job, scope, slot)
WHERE c.job = s.job AND c.scope = s.scope
"""


async def _index_old_cursors(conn: Conn, schema: str, now: datetime | None) -> None:
    """Migration 6, after its SQL: enter every existing cursor in the planning index, in
    batches of :data:`CURSOR_BATCH` in key order, each with its slot computed here
    (:func:`~soloist.models.stream_slot` is CRC-32, which SQL does not offer)."""
    first = _sql(_OLD_CURSORS.replace("{after}", ""), schema)
    after = _sql(_OLD_CURSORS.replace("{after}", _AFTER), schema)
    update = _sql(_INDEX_CURSORS, schema)
    select, params = first, {"limit": CURSOR_BATCH}
    while True:
        rows = await (await conn.execute(select, params)).fetchall()
        if not rows:
            return
        jobs, scopes = [row[0] for row in rows], [row[1] for row in rows]
        slots = [stream_slot(j, s) for j, s in zip(jobs, scopes, strict=True)]
        values = {"jobs": jobs, "scopes": scopes, "slots": slots, "now": now}
        await conn.execute(update, values)
        select, params = after, {"limit": CURSOR_BATCH, "job": jobs[-1], "scope": scopes[-1]}


#: Steps in Python run after the SQL of their version, in the same transaction: version
#: number to ``step(conn, schema, now)``, ``now`` being the store's clock (None: the
#: database's).
PYTHON_STEPS: dict[int, Callable[[Conn, str, datetime | None], Awaitable[None]]] = {
    6: _index_old_cursors,
}

_VERSION = "SELECT COALESCE(max(version), 0) FROM {schema}.schema_version"
_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS {schema}.schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
_RECORD = "INSERT INTO {schema}.schema_version (version) VALUES (%s)"
# One lock per schema: apps in other schemas of the database migrate independently.
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
_SCHEMA_EXISTS = "SELECT 1 FROM pg_namespace WHERE nspname = %s"


def _sql(template: str, schema: str) -> sql.Composed:
    return sql.SQL(template).format(schema=sql.Identifier(schema))


async def schema_version(conn: Conn, schema: str) -> int:
    """The newest migration applied to ``schema`` (0 when it has none, or does not exist).
    ``conn`` must be in autocommit mode (a failed read must not abort a transaction)."""
    try:
        row = await (await conn.execute(_sql(_VERSION, schema))).fetchone()
    except (errors.UndefinedTable, errors.InvalidSchemaName):
        return 0
    return int(row[0]) if row is not None else 0


async def migrate(conn: Conn, schema: str, now: datetime | None = None) -> list[int]:
    """Bring ``schema`` to the newest version; return the versions applied (often none).
    ``conn`` must be in autocommit mode. ``now``: the store's clock for the steps that
    need one (None: the database's)."""
    if await schema_version(conn, schema) == len(MIGRATIONS):
        return []  # the common case: one read, no lock
    async with conn.transaction():
        await conn.execute(_LOCK, (f"soloist:migrate:{schema}",))
        if await (await conn.execute(_SCHEMA_EXISTS, (schema,))).fetchone() is None:
            await conn.execute(_sql("CREATE SCHEMA {schema}", schema))
        await conn.execute(_sql(_VERSION_TABLE, schema))
        row = await (await conn.execute(_sql(_VERSION, schema))).fetchone()
        current = int(row[0]) if row is not None else 0
        if current > len(MIGRATIONS):
            raise StoreError(
                f"store schema {schema!r} is at version {current}, newer than this soloist "
                f"supports ({len(MIGRATIONS)}); upgrade soloist"
            )
        applied = list(range(current + 1, len(MIGRATIONS) + 1))
        for version in applied:
            for statement in MIGRATIONS[version - 1]:
                await conn.execute(_sql(statement, schema))
            step = PYTHON_STEPS.get(version)
            if step is not None:
                await step(conn, schema, now)
            await conn.execute(_sql(_RECORD, schema), (version,))
    return applied
