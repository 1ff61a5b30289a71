"""The store's transactions, as plain blocking functions of a connection.

They run on the store's single worker thread. Every write starts with ``BEGIN IMMEDIATE``:
it takes SQLite's one write lock up front (waiting up to ``busy_timeout``), so the reads
that decide a write (claim candidates, overlap checks, the cursor compare-and-set) see the
same data the write changes, whichever process wins. A deferred transaction would instead
fail with SQLITE_BUSY when it tries to upgrade its read lock, without waiting.

A write reads its instant (``now``: a :data:`Now`) only once ``BEGIN IMMEDIATE`` holds the
lock: a write that waited for another process's lock must not stamp its rows (claims,
leases, completions) with the time before it waited, which can be seconds in the past.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from soloist.clock import to_epoch_us
from soloist.models import (
    CANCELLED_MESSAGE,
    CLAIMABLE_STATES,
    CRASHED,
    Attempt,
    ErrorCode,
    JobRecord,
    Occurrence,
    Overlap,
    Renewed,
    State,
)
from soloist.stores.sqlite import codec
from soloist.stores.sqlite.codec import INSERT_OCCURRENCE

_CLAIMABLE = tuple(state.value for state in CLAIMABLE_STATES)

#: The instant of a write in epoch microseconds: the caller's ``now``, or the store's clock
#: read when called. Called inside the transaction, after ``BEGIN IMMEDIATE``.
Now = Callable[[], int]

# SQL is spelled out in full (no string building): every statement below is a constant.
# A fence is ``state = 'running' AND instance_id = ? AND fencing_token = ?``: the row is
# still running under this runner and this token. Rows are read by column name, so
# ``SELECT *`` / ``RETURNING *`` stay correct when a migration adds a column.
# The last parameter is allow_only (0 or 1): with 1, only overlap 'allow' rows are
# candidates (see Store.occurrence_claim).
_CANDIDATES = """
SELECT id, job, scope, task, overlap, due_at FROM occurrences
WHERE state IN (?, ?) AND due_at <= ? AND task IN (SELECT value FROM json_each(?))
  AND (? = 0 OR overlap = 'allow')
ORDER BY due_at, plan_time, rowid
"""
_ANY_CANDIDATE = """
SELECT 1 FROM occurrences
WHERE state IN (?, ?) AND due_at <= ? AND task IN (SELECT value FROM json_each(?))
  AND (? = 0 OR overlap = 'allow')
LIMIT 1
"""
_SKIP = """
UPDATE occurrences SET state = 'skipped', finished_at = ?, error_code = ?, error_message = ?
WHERE id IN (SELECT value FROM json_each(?))
"""
_CLAIM = """
UPDATE occurrences SET state = 'running', attempt = attempt + 1,
    fencing_token = fencing_token + 1, instance_id = ?, started_at = ?,
    lease_expires_at = ?, finished_at = NULL, error_code = NULL, error_message = NULL,
    result = NULL
WHERE id IN (SELECT value FROM json_each(?))
RETURNING *
"""
_RENEW = """
UPDATE occurrences SET lease_expires_at = ?
WHERE id = ? AND state = 'running' AND instance_id = ? AND fencing_token = ?
RETURNING id, cancel_requested
"""
# A retry (?1 = 'failed') of a row whose cancellation was requested is not made: dead,
# cancelled, finished at ?10 (see Store.occurrence_complete).
_COMPLETE = """
UPDATE occurrences SET
    state = CASE WHEN cancel_requested AND ?1 = 'failed' THEN 'dead' ELSE ?1 END,
    due_at = CASE WHEN cancel_requested AND ?1 = 'failed' THEN due_at
                  ELSE COALESCE(?2, due_at) END,
    lease_expires_at = NULL,
    finished_at = CASE WHEN cancel_requested AND ?1 = 'failed' THEN ?10 ELSE ?3 END,
    error_code = CASE WHEN cancel_requested AND ?1 = 'failed' THEN 'cancelled' ELSE ?4 END,
    error_message = ?5, result = ?6
WHERE id = ?7 AND state = 'running' AND instance_id = ?8 AND fencing_token = ?9
RETURNING id
"""
_LOG_COMPLETE = """
INSERT INTO attempts (occurrence_id, fencing_token, attempt, instance_id, started_at,
    finished_at, outcome, error_code, error_message)
SELECT id, fencing_token, attempt, instance_id, started_at, ?1,
    CASE WHEN cancel_requested AND ?2 = 'failed' THEN 'dead' ELSE ?2 END,
    CASE WHEN cancel_requested AND ?2 = 'failed' THEN 'cancelled' ELSE ?3 END, ?4
FROM occurrences
WHERE id = ?5 AND state = 'running' AND instance_id = ?6 AND fencing_token = ?7
"""
# (The messages are rows.RELEASED_MESSAGE and rows.RELEASED_CANCELLED, spelled out.)
# A row whose cancellation was requested is not given back: dead, cancelled (?1: now).
_RELEASE = """
UPDATE occurrences SET
    state = CASE WHEN cancel_requested THEN 'dead'
                 WHEN attempt <= 1 THEN 'scheduled' ELSE 'failed' END,
    attempt = CASE WHEN cancel_requested THEN attempt ELSE MAX(attempt - 1, 0) END,
    finished_at = CASE WHEN cancel_requested THEN ?1 ELSE finished_at END,
    lease_expires_at = NULL, error_code = 'cancelled',
    error_message = CASE WHEN cancel_requested
        THEN 'cancelled on request; its runner stopped before the attempt finished'
        ELSE 'lease released before the attempt finished' END
WHERE id = ?2 AND state = 'running' AND instance_id = ?3 AND fencing_token = ?4
RETURNING id
"""
_LOG_RELEASE = """
INSERT INTO attempts (occurrence_id, fencing_token, attempt, instance_id, started_at,
    finished_at, outcome, error_code, error_message)
SELECT id, fencing_token, attempt, instance_id, started_at, ?1,
    CASE WHEN cancel_requested THEN 'dead' ELSE 'released' END, 'cancelled',
    CASE WHEN cancel_requested
        THEN 'cancelled on request; its runner stopped before the attempt finished'
        ELSE 'lease released before the attempt finished' END
FROM occurrences
WHERE id = ?2 AND state = 'running' AND instance_id = ?3 AND fencing_token = ?4
"""
# Cancel (see Store.occurrence_cancel): a claimable row ends dead (cancelled) at ?1; a
# running one only gets its flag. No row: finished, already requested, or unknown.
_CANCEL = """
UPDATE occurrences SET
    state = CASE WHEN state = 'running' THEN state ELSE 'dead' END,
    finished_at = CASE WHEN state = 'running' THEN finished_at ELSE ?1 END,
    lease_expires_at = CASE WHEN state = 'running' THEN lease_expires_at ELSE NULL END,
    error_code = CASE WHEN state = 'running' THEN error_code ELSE 'cancelled' END,
    error_message = CASE WHEN state = 'running' THEN error_message ELSE ?2 END,
    cancel_requested = 1
WHERE id = ?3 AND (state IN ('scheduled', 'failed')
                   OR (state = 'running' AND cancel_requested = 0))
RETURNING *
"""
# The audit record of an attempt is copied from its row before the fenced write ends it,
# under the same fence and in the same transaction: a rejected write logs nothing.
_LOG_ATTEMPT = """
INSERT INTO attempts (occurrence_id, fencing_token, attempt, instance_id, started_at,
    finished_at, outcome, error_code, error_message)
SELECT id, fencing_token, attempt, instance_id, started_at, ?, ?, ?, ? FROM occurrences
WHERE id = ? AND state = 'running' AND instance_id = ? AND fencing_token = ?
"""
_LOG = """
INSERT INTO attempts (occurrence_id, fencing_token, attempt, instance_id, started_at,
    finished_at, outcome, error_code, error_message)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_ANY_EXPIRED = "SELECT 1 FROM occurrences WHERE state = 'running' AND lease_expires_at <= ? LIMIT 1"
# A crash is not a failure (see Store.occurrence_reap): within its crash budget the row is
# claimable again at once, its attempt given back and its due_at kept; past it, dead. SET
# expressions read the row as it was before the update.
_REAP = """
UPDATE occurrences SET
    state = CASE WHEN crashes >= max_crashes OR cancel_requested THEN 'dead'
                 WHEN attempt <= 1 THEN 'scheduled' ELSE 'failed' END,
    attempt = CASE WHEN crashes < max_crashes AND NOT cancel_requested
                   THEN MAX(attempt - 1, 0) ELSE attempt END,
    crashes = crashes + 1,
    finished_at = CASE WHEN crashes < max_crashes AND NOT cancel_requested
                       THEN NULL ELSE :now END,
    lease_expires_at = NULL,
    error_code = CASE WHEN cancel_requested THEN 'cancelled'
                      WHEN crashes < max_crashes THEN :expired ELSE :loop END,
    error_message = 'lease of ' || COALESCE(instance_id, '?') || CASE
        WHEN cancel_requested THEN ' expired after its cancellation was requested'
        WHEN crashes < max_crashes
        THEN ' expired (crash ' || (crashes + 1) || ' of ' || max_crashes || ' allowed)'
        ELSE ' expired (crash ' || (crashes + 1) || ', max_crashes=' || max_crashes
             || '): its runner keeps dying' END
WHERE state = 'running' AND lease_expires_at <= :now
RETURNING *
"""
# History, newest first; one constant per filter combination so each can use its index.
_LIST = {
    (False, False): "SELECT * FROM occurrences "
    "ORDER BY plan_time DESC, created_at DESC, rowid DESC LIMIT ?",
    (True, False): "SELECT * FROM occurrences WHERE job = ? "
    "ORDER BY plan_time DESC, created_at DESC, rowid DESC LIMIT ?",
    (False, True): "SELECT * FROM occurrences WHERE state = ? "
    "ORDER BY plan_time DESC, created_at DESC, rowid DESC LIMIT ?",
    (True, True): "SELECT * FROM occurrences WHERE job = ? AND state = ? "
    "ORDER BY plan_time DESC, created_at DESC, rowid DESC LIMIT ?",
}
_INSERT_JOB = """
INSERT INTO jobs (name, task, schedule, dynamic, paused, payload, metadata, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, COALESCE(?, ?))
"""
# A dynamic job's stream enters the planning index never planned (a cursor left by a job
# of the same name before is reset), due at the job's created_at.
_INDEX_NEW_STREAM = """
INSERT INTO plan_cursors (job, scope, last_plan_time, planned_count, next_plan_time, slot)
VALUES (?, ?, NULL, 0, ?, ?)
ON CONFLICT (job, scope) DO UPDATE SET last_plan_time = NULL, planned_count = 0,
    next_plan_time = excluded.next_plan_time, slot = excluded.slot
"""
# The paused flag, created_at and origin (dynamic) belong to the store, not the code.
_UPSERT_JOB = (
    _INSERT_JOB + "ON CONFLICT (name) DO UPDATE SET task = excluded.task, "
    "schedule = excluded.schedule, payload = excluded.payload, metadata = excluded.metadata"
)


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction: ``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def occurrence_get(conn: sqlite3.Connection, occurrence_id: str) -> Occurrence | None:
    row = conn.execute("SELECT * FROM occurrences WHERE id = ?", (occurrence_id,)).fetchone()
    return codec.occurrence(row) if row is not None else None


def occurrence_insert(
    conn: sqlite3.Connection, params: tuple[object, ...], dedupe_key: str, now: Now
) -> tuple[Occurrence, bool]:
    """``params``: ``codec.insert_params``, created_at added here."""
    with transaction(conn):
        created = conn.execute(INSERT_OCCURRENCE, (*params, now())).rowcount == 1
        # Inserted just now or there before: either way the row exists in this transaction.
        row = conn.execute("SELECT * FROM occurrences WHERE dedupe_key = ?", (dedupe_key,))
        stored = codec.occurrence(row.fetchone())
    return stored, created


def occurrence_insert_many(
    conn: sqlite3.Connection, items: Sequence[tuple[object, ...]], now: Now
) -> int:
    """Insert ``items`` (``codec.insert_params``; existing keys ignored) in one transaction;
    return how many were created. A conflict changes nothing, so the connection's change
    count tells."""
    with transaction(conn):
        before = conn.total_changes
        created = now()
        conn.executemany(INSERT_OCCURRENCE, ((*item, created) for item in items))
        return conn.total_changes - before


def occurrence_claim(
    conn: sqlite3.Connection,
    instance_id: str,
    tasks: list[str],
    limit: int,
    lease_ttl_us: int,
    now: Now,
    allow_only: bool = False,
) -> list[Occurrence]:
    names, only = json.dumps(tasks), int(allow_only)
    # Cheap read first: idle pollers then never take the write lock.
    if conn.execute(_ANY_CANDIDATE, (*_CLAIMABLE, now(), names, only)).fetchone() is None:
        return []
    with transaction(conn):
        at = now()
        claim_ids, skip_ids = _select_claims(conn, (*_CLAIMABLE, at, names, only), limit, at)
        if skip_ids:
            reason = "skipped: a previous occurrence of this job and scope was running"
            conn.execute(_SKIP, (at, ErrorCode.OVERLAP.value, reason, json.dumps(skip_ids)))
        lease = at + lease_ttl_us
        rows = conn.execute(_CLAIM, (instance_id, at, lease, json.dumps(claim_ids))).fetchall()
    order = {occurrence_id: index for index, occurrence_id in enumerate(claim_ids)}
    # RETURNING has no defined order; give rows back in claim order.
    return sorted((codec.occurrence(row) for row in rows), key=lambda occ: order[occ.id])


def _select_claims(
    conn: sqlite3.Connection, args: tuple[object, ...], limit: int, at: int
) -> tuple[list[str], list[str]]:
    """Walk due candidates in order, applying the overlap rules, until ``limit`` claims."""
    claim_ids: list[str] = []
    skip_ids: list[str] = []
    # Per group: the earliest started_at of its running rows, or None if none runs (read
    # once per group); ``batch``: the groups claimed in this batch (started at ``at``).
    busy: dict[tuple[str, str, str], int | None] = {}
    batch: set[tuple[str, str, str]] = set()
    candidates = conn.execute(_CANDIDATES, args)
    try:
        for occurrence_id, job, scope, task, overlap, due_at in candidates:
            if len(claim_ids) >= limit:
                break
            key = (job, scope, task)  # the overlap group (see Store.occurrence_claim)
            if overlap != Overlap.ALLOW.value:
                if key not in busy:
                    busy[key] = _running_since(conn, job, scope, task)
                started = busy[key]
                if key in batch:
                    started = at if started is None else min(started, at)
                if started is not None:
                    # skip only if a sibling already ran when this one was due; if both
                    # are late, this one waits its turn like queue.
                    if overlap == Overlap.SKIP.value and started < due_at:
                        skip_ids.append(occurrence_id)
                    continue  # leave it scheduled until the running one ends
            batch.add(key)  # later candidates of this group see this claim
            claim_ids.append(occurrence_id)
    finally:
        candidates.close()
    return claim_ids, skip_ids


def _running_since(conn: sqlite3.Connection, job: str, scope: str, task: str) -> int | None:
    """Earliest started_at of the group's running rows, or None if none is running."""
    row = conn.execute(
        "SELECT MIN(COALESCE(started_at, ?)), COUNT(*) FROM occurrences "
        "WHERE job = ? AND scope = ? AND task = ? AND state = 'running'",
        (0, job, scope, task),
    ).fetchone()
    return None if row is None or row[1] == 0 else int(row[0])


Params = Callable[[int], Sequence[tuple[object, ...]]]


def _fenced_updates(
    conn: sqlite3.Connection,
    sql: str,
    now: Now,
    params: Params,
    logs: Params | None = None,
    log_sql: str = _LOG_ATTEMPT,
) -> set[str]:
    """Run one fenced ``UPDATE ... RETURNING id`` per item of ``params(now)``, all in one
    transaction; with ``logs`` (``logs(now)``: one per item), first append each attempt's
    audit record (``log_sql``)."""
    applied: set[str] = set()
    with transaction(conn):
        at = now()
        records = logs(at) if logs is not None else None
        for index, item in enumerate(params(at)):
            if records is not None:
                conn.execute(log_sql, records[index])
            row = conn.execute(sql, item).fetchone()
            if row is not None:
                applied.add(row[0])
    return applied


def lease_renew(
    conn: sqlite3.Connection,
    instance_id: str,
    claims: Sequence[tuple[str, int]],
    lease_ttl_us: int,
    now: Now,
) -> Renewed:
    renewed: list[str] = []
    cancel: list[str] = []
    with transaction(conn):
        lease = now() + lease_ttl_us
        for occurrence_id, token in claims:
            row = conn.execute(_RENEW, (lease, occurrence_id, instance_id, token)).fetchone()
            if row is not None:
                renewed.append(row[0])
                if row[1]:
                    cancel.append(row[0])
    return Renewed(renewed, cancel)


def occurrence_cancel(
    conn: sqlite3.Connection, occurrence_id: str, now: Now
) -> tuple[Occurrence, bool] | None:
    """See Store.occurrence_cancel: one write transaction, so no claim interleaves."""
    with transaction(conn):
        row = conn.execute(_CANCEL, (now(), CANCELLED_MESSAGE, occurrence_id)).fetchone()
        if row is not None:
            return codec.occurrence(row), True
        row = conn.execute("SELECT * FROM occurrences WHERE id = ?", (occurrence_id,)).fetchone()
    return (codec.occurrence(row), False) if row is not None else None


def occurrence_complete(
    conn: sqlite3.Connection, outcomes: Sequence[tuple[object, ...]], now: Now
) -> set[str]:
    """``outcomes``: (state, retry_at or None for now, error_code, error_message, result,
    id, instance_id, fencing_token)."""

    def params(at: int) -> list[tuple[object, ...]]:
        out: list[tuple[object, ...]] = []
        for state, retry_at, *rest in outcomes:
            retry = state == State.FAILED.value
            due = (retry_at if retry_at is not None else at) if retry else None
            out.append((state, due, None if retry else at, *rest, at))
        return out

    def logs(at: int) -> list[tuple[object, ...]]:
        return [(at, o[0], o[2], o[3], *o[5:8]) for o in outcomes]

    return _fenced_updates(conn, _COMPLETE, now, params, logs, _LOG_COMPLETE)


def lease_release(
    conn: sqlite3.Connection, instance_id: str, claims: Sequence[tuple[str, int]], now: Now
) -> set[str]:
    def params(at: int) -> list[tuple[object, ...]]:
        return [(at, i, instance_id, t) for i, t in claims]

    return _fenced_updates(conn, _RELEASE, now, params, params, _LOG_RELEASE)


def occurrence_reap(conn: sqlite3.Connection, now: Now) -> list[Occurrence]:
    # Every instance reaps often; only take the write lock when something has expired.
    if conn.execute(_ANY_EXPIRED, (now(),)).fetchone() is None:
        return []
    with transaction(conn):
        at = now()
        params = {
            "now": at,
            "expired": ErrorCode.LEASE_EXPIRED.value,
            "loop": ErrorCode.CRASH_LOOP.value,
        }
        reaped = [codec.occurrence(row) for row in conn.execute(_REAP, params).fetchall()]
        # The audit record of each attempt that ended, from its row as updated (runner,
        # token and started_at unchanged); a crash gave its attempt back.
        conn.executemany(_LOG, (_reaped_attempt(occ, at) for occ in reaped))
    return sorted(reaped, key=lambda o: (o.plan_time, o.id))


def _reaped_attempt(occ: Occurrence, at: int) -> tuple[object, ...]:
    dead = occ.state == State.DEAD
    return (
        occ.id,
        occ.fencing_token,
        occ.attempt if dead else occ.attempt + 1,
        occ.instance_id,
        to_epoch_us(occ.started_at) if occ.started_at is not None else None,
        at,
        State.DEAD.value if dead else CRASHED,
        occ.error_code,
        occ.error_message,
    )


def occurrence_attempts(conn: sqlite3.Connection, occurrence_id: str) -> list[Attempt]:
    rows = conn.execute(
        "SELECT * FROM attempts WHERE occurrence_id = ? ORDER BY fencing_token", (occurrence_id,)
    ).fetchall()
    return [codec.attempt(row) for row in rows]


def occurrence_next_due(conn: sqlite3.Connection, tasks: list[str]) -> int | None:
    row = conn.execute(
        "SELECT MIN(due_at) FROM occurrences WHERE state IN (?, ?) "
        "AND task IN (SELECT value FROM json_each(?))",
        (*_CLAIMABLE, json.dumps(tasks)),
    ).fetchone()
    return row[0] if row is not None else None


def occurrence_list(
    conn: sqlite3.Connection, job: str | None, state: str | None, limit: int
) -> list[Occurrence]:
    args = [value for value in (job, state) if value is not None]
    sql = _LIST[(job is not None, state is not None)]
    rows = conn.execute(sql, (*args, limit)).fetchall()
    return [codec.occurrence(row) for row in rows]


def occurrence_counts(conn: sqlite3.Connection, now: int) -> tuple[list[sqlite3.Row], int]:
    """Counts by (job, state) and the due count, in one read transaction (one snapshot)."""
    conn.execute("BEGIN")
    try:
        pairs = conn.execute(
            "SELECT job, state, COUNT(*) AS n FROM occurrences GROUP BY job, state"
        ).fetchall()
        row = conn.execute(
            "SELECT COUNT(*) FROM occurrences WHERE state IN (?, ?) AND due_at <= ?",
            (*_CLAIMABLE, now),
        ).fetchone()
    finally:
        conn.execute("COMMIT")
    return pairs, int(row[0]) if row is not None else 0


# -- jobs ------------------------------------------------------------------------------------
def job_upsert(conn: sqlite3.Connection, records: Sequence[tuple[object, ...]], now: Now) -> None:
    """``records``: ``codec.job_params``."""
    with transaction(conn):
        at = now()
        conn.executemany(_UPSERT_JOB, ((*record, at) for record in records))


def job_add(
    conn: sqlite3.Connection,
    record: tuple[object, ...],
    stream: tuple[str, str, int],
    now: Now,
) -> bool:
    """Insert a job (``codec.job_params``) and, in the same transaction, its ``stream``'s
    cursor ((job, scope, slot)) due at the job's created_at; False if the name is taken
    (then nothing is written)."""
    with transaction(conn):
        sql = _INSERT_JOB + "ON CONFLICT (name) DO NOTHING RETURNING created_at"
        row = conn.execute(sql, (*record, now())).fetchone()
        if row is None:
            return False
        job, scope, slot = stream
        conn.execute(_INDEX_NEW_STREAM, (job, scope, row[0], slot))
        return True


def job_get(conn: sqlite3.Connection, name: str) -> JobRecord | None:
    row = conn.execute("SELECT * FROM jobs WHERE name = ?", (name,)).fetchone()
    return codec.job(row) if row is not None else None


def job_list(conn: sqlite3.Connection) -> list[JobRecord]:
    rows = conn.execute("SELECT * FROM jobs ORDER BY name").fetchall()
    return [codec.job(row) for row in rows]


def job_delete(conn: sqlite3.Connection, name: str) -> bool:
    with transaction(conn):
        conn.execute("DELETE FROM plan_cursors WHERE job = ?", (name,))
        return conn.execute("DELETE FROM jobs WHERE name = ?", (name,)).rowcount == 1


def job_set_paused(conn: sqlite3.Connection, name: str, paused: bool) -> bool:
    with transaction(conn):
        return (
            conn.execute("UPDATE jobs SET paused = ? WHERE name = ?", (int(paused), name)).rowcount
            == 1
        )
