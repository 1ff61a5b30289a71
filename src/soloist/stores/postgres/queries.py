"""The store's SQL: one statement per store call, rendered once per schema.

Every write that ends an attempt (complete, reap, release) appends its audit record to
``attempts`` in the same statement, from the rows its fenced ``UPDATE`` returned: a write
the fence rejects logs nothing.

Every template names tables as ``{schema}.name``; :class:`Queries` renders them with the
schema quoted by :class:`psycopg.sql.Identifier`. All values are parameters. Each statement
first fixes its instant in a ``clock`` CTE: the caller's ``now`` if given, else the
database's ``statement_timestamp()``, so that one statement uses one instant throughout and
the database clock decides when nobody passes one.

A fence is ``state = 'running' AND instance_id = %(instance)s AND fencing_token = <token>``:
the row is still running under this runner with this token. Batched writes join the rows to
``unnest`` of parameter arrays, so a batch of any size is one statement; ``RETURNING``
reports which writes applied.

Wake-ups: a statement that makes occurrences claimable soon (due within
:data:`WAKE_HORIZON`) also runs ``pg_notify`` on the app's channel, in its own transaction,
so listeners are told exactly when the rows become visible. PostgreSQL folds identical
notifications of one transaction into one.
"""

# S608 flags SQL built with f-strings. Here only module constants are joined (column lists,
# the clock CTE, the fence); values are always %(name)s parameters and the schema is
# rendered by psycopg's sql.Identifier in Queries.
# ruff: noqa: S608

from __future__ import annotations

from datetime import timedelta

from psycopg import sql

__all__ = [
    "ATTEMPT_COLUMNS",
    "NOW_CTE",
    "OCCURRENCE_COLUMNS",
    "STEP_ITEMS",
    "WAKE_HORIZON",
    "WAKE_INSERTED",
    "Queries",
    "render",
]

#: Rows due no later than this after they are written wake listening instances.
WAKE_HORIZON = timedelta(seconds=60)

#: Column order of every occurrence row the queries return (see ``codec.occurrence``).
OCCURRENCE_COLUMNS = (
    "id, dedupe_key, job, task, scope, plan_time, due_at, kind, state, attempt, "
    "max_attempts, overlap, payload, instance_id, lease_expires_at, fencing_token, "
    "created_at, started_at, finished_at, error_code, error_message, result, crashes, "
    "max_crashes, cancel_requested"
)
_COLS = OCCURRENCE_COLUMNS
# The claim's columns: the payload as text (see ``codec.occurrence``).
_CLAIMED_COLS = _COLS.replace("payload,", "payload::text,")
#: The ``clock`` CTE fixing a statement's instant: the caller's ``%(now)s``, else the server's.
NOW_CTE = (
    "clock AS MATERIALIZED (SELECT COALESCE(%(now)s::timestamptz, statement_timestamp()) AS now)"
)
_NOW = NOW_CTE
_WAKE = "SELECT pg_notify(%(channel)s, 'occurrence')"
_FENCE = "o.state = 'running' AND o.instance_id = %(instance)s AND o.fencing_token = c.token"
_SOON = "<= (SELECT now FROM clock) + {horizon}"
_RELEASED = "'lease released before the attempt finished'"
_RELEASED_CANCELLED = "'cancelled on request; its runner stopped before the attempt finished'"
#: Column order of the audit log (see ``codec.attempt``).
ATTEMPT_COLUMNS = (
    "occurrence_id, fencing_token, attempt, instance_id, started_at, finished_at, outcome, "
    "error_code, error_message"
)
_ATTEMPT_COLUMNS = ATTEMPT_COLUMNS

# A candidate is due, claimable and of a listed task. Overlap (allow never blocks): a
# skip/queue candidate is eligible only if its overlap group (job, scope, task) has no
# running row and no earlier claimable due row (rows of kind 'task' aside: they never share
# a job name with skip/queue rows, and index occurrences_group_siblings leaves them out).
# Within one snapshot at most one non-allow row per group is eligible, and the row lock
# plus PostgreSQL's re-check of a row changed since the snapshot stop two claimers from
# both taking it, so concurrent claims never start two rows of a non-allow group. The task
# is in the siblings index (migration 5), not in occurrences_running: the running rows of a
# (job, scope) are few (at most the slots of the live instances).
# Blocked rows are filtered before LIMIT: they do not use up the batch. Skip rows blocked
# by a sibling that was already running when they were due (started_at < due_at) become
# skipped in the same statement; the others wait like queue rows (a sibling claimed in
# this batch starts now, never before a due row's due_at, so it never causes a skip). The
# running probe reads occurrences_running and the group's few running rows.
# %(allow_only)s (the executor claiming ahead): only 'allow' rows are candidates, and the
# claim skips nothing. A filter on the walked rows like the others, so the plan is the
# same index walk in claim order that stops after LIMIT rows.
_CLAIM = f"""
WITH {_NOW},
candidates AS MATERIALIZED (
    SELECT o.id FROM {{schema}}.occurrences o
    WHERE o.state IN ('scheduled', 'failed') AND o.due_at <= (SELECT now FROM clock)
      AND o.task = ANY(%(tasks)s::text[])
      AND (o.overlap = 'allow' OR (
        NOT %(allow_only)s::boolean
        AND NOT EXISTS (SELECT FROM {{schema}}.occurrences r
                    WHERE r.job = o.job AND r.scope = o.scope AND r.task = o.task
                      AND r.state = 'running')
        AND NOT EXISTS (
            SELECT FROM {{schema}}.occurrences e
            WHERE e.job = o.job AND e.scope = o.scope AND e.task = o.task
              AND e.state IN ('scheduled', 'failed')
              AND e.kind <> 'task' AND e.due_at <= (SELECT now FROM clock)
              AND (e.due_at, e.plan_time, e.seq) < (o.due_at, o.plan_time, o.seq))))
    ORDER BY o.due_at, o.plan_time, o.seq
    LIMIT %(limit)s
    FOR UPDATE OF o SKIP LOCKED
),
claimed AS (
    UPDATE {{schema}}.occurrences o SET
        state = 'running', attempt = o.attempt + 1, fencing_token = o.fencing_token + 1,
        instance_id = %(instance)s, started_at = clock.now,
        lease_expires_at = clock.now + %(ttl)s::interval, finished_at = NULL,
        error_code = NULL, error_message = NULL, result = NULL
    FROM candidates c, clock WHERE o.id = c.id
    RETURNING o.*
),
to_skip AS MATERIALIZED (
    -- Driven from the running rows (few), each looking up its own group's overdue "skip"
    -- rows by index: never a walk over every overdue row, which a backlog makes huge.
    SELECT k.id FROM {{schema}}.occurrences r CROSS JOIN LATERAL (
        SELECT s.id FROM {{schema}}.occurrences s
        WHERE s.job = r.job AND s.scope = r.scope AND s.task = r.task
          AND s.state IN ('scheduled', 'failed') AND s.overlap = 'skip'
          AND s.due_at > r.started_at AND s.due_at <= (SELECT now FROM clock)
          AND s.id NOT IN (SELECT id FROM claimed)
        FOR UPDATE OF s SKIP LOCKED
    ) AS k
    WHERE r.state = 'running' AND r.task = ANY(%(tasks)s::text[])
      AND NOT %(allow_only)s::boolean
),
skipped AS (
    UPDATE {{schema}}.occurrences o SET
        state = 'skipped', finished_at = clock.now, error_code = 'overlap',
        error_message = 'skipped: a previous occurrence of this job and scope was running'
    FROM to_skip k, clock WHERE o.id = k.id
)
SELECT {_CLAIMED_COLS} FROM claimed ORDER BY due_at, plan_time, seq
"""

_RENEW = f"""
WITH {_NOW}
UPDATE {{schema}}.occurrences o SET lease_expires_at = clock.now + %(ttl)s::interval
FROM unnest(%(ids)s::text[], %(tokens)s::bigint[]) AS c(id, token), clock
WHERE o.id = c.id AND {_FENCE}
RETURNING o.id, o.cancel_requested
"""

# A retry of a row whose cancellation was requested is not made: dead, cancelled (see
# Store.occurrence_complete); the audit record is copied from the row as updated.
_RETRY = "c.state = 'failed' AND NOT o.cancel_requested"
_COMPLETE = f"""
WITH {_NOW},
done AS (
    UPDATE {{schema}}.occurrences o SET
        state = CASE WHEN c.state = 'failed' AND o.cancel_requested THEN 'dead'
                     ELSE c.state END,
        due_at = CASE WHEN {_RETRY} THEN COALESCE(c.retry_at, clock.now) ELSE o.due_at END,
        lease_expires_at = NULL,
        finished_at = CASE WHEN {_RETRY} THEN NULL ELSE clock.now END,
        error_code = CASE WHEN c.state = 'failed' AND o.cancel_requested THEN 'cancelled'
                          ELSE c.error_code END,
        error_message = c.error_message, result = c.result::json
    FROM unnest(%(ids)s::text[], %(tokens)s::bigint[], %(states)s::text[],
                %(retry_at)s::timestamptz[], %(codes)s::text[], %(messages)s::text[],
                %(results)s::text[])
         AS c(id, token, state, retry_at, error_code, error_message, result), clock
    WHERE o.id = c.id AND {_FENCE}
    RETURNING o.id, o.state, o.due_at, o.fencing_token, o.attempt, o.instance_id,
              o.started_at, o.error_code, o.error_message
),
logged AS (
    INSERT INTO {{schema}}.attempts ({_ATTEMPT_COLUMNS})
    SELECT id, fencing_token, attempt, instance_id, started_at, (SELECT now FROM clock),
           state, error_code, error_message
    FROM done
)
SELECT ARRAY(SELECT id FROM done),
       (SELECT count(*) FROM ({_WAKE} FROM done
                              WHERE state = 'failed' AND due_at {_SOON} LIMIT 1) AS wake)
"""

# RETURNING gives the new values: the attempt that ended is the new attempt + 1 (a running
# row's attempt is at least 1).
_RELEASE = f"""
WITH {_NOW},
released AS (
    UPDATE {{schema}}.occurrences o SET
        state = CASE WHEN o.cancel_requested THEN 'dead'
                     WHEN o.attempt <= 1 THEN 'scheduled' ELSE 'failed' END,
        attempt = CASE WHEN o.cancel_requested THEN o.attempt
                       ELSE GREATEST(o.attempt - 1, 0) END,
        finished_at = CASE WHEN o.cancel_requested THEN clock.now ELSE o.finished_at END,
        lease_expires_at = NULL, error_code = 'cancelled',
        error_message = CASE WHEN o.cancel_requested THEN {_RELEASED_CANCELLED}
                             ELSE {_RELEASED} END
    FROM unnest(%(ids)s::text[], %(tokens)s::bigint[]) AS c(id, token), clock
    WHERE o.id = c.id AND {_FENCE}
    RETURNING o.id, o.fencing_token,
              CASE WHEN o.cancel_requested THEN o.attempt ELSE o.attempt + 1 END AS attempt,
              o.instance_id, o.started_at, o.state, o.error_message
),
logged AS (
    INSERT INTO {{schema}}.attempts ({_ATTEMPT_COLUMNS})
    SELECT id, fencing_token, attempt, instance_id, started_at, (SELECT now FROM clock),
           CASE WHEN state = 'dead' THEN 'dead' ELSE 'released' END, 'cancelled',
           error_message
    FROM released
)
SELECT ARRAY(SELECT id FROM released),
       (SELECT count(*) FROM ({_WAKE} FROM released WHERE state <> 'dead' LIMIT 1) AS wake)
"""

# Cancel (see Store.occurrence_cancel): one UPDATE, so a claim that holds the row is waited
# for and the row re-checked as that claim left it (running: only the flag is set); a claim
# that comes second finds the row dead (or skips it while this holds its lock).
_CANCEL = f"""
WITH {_NOW}
UPDATE {{schema}}.occurrences o SET
    state = CASE WHEN o.state = 'running' THEN o.state ELSE 'dead' END,
    finished_at = CASE WHEN o.state = 'running' THEN o.finished_at ELSE clock.now END,
    lease_expires_at = CASE WHEN o.state = 'running' THEN o.lease_expires_at END,
    error_code = CASE WHEN o.state = 'running' THEN o.error_code ELSE 'cancelled' END,
    error_message = CASE WHEN o.state = 'running' THEN o.error_message
                         ELSE %(message)s END,
    cancel_requested = true
FROM clock
WHERE o.id = %(id)s AND (o.state IN ('scheduled', 'failed')
                         OR (o.state = 'running' AND NOT o.cancel_requested))
RETURNING {_COLS}
"""

# A reaped row runs again: within its crash budget and not cancelled.
_AGAIN = "o.crashes < o.max_crashes AND NOT o.cancel_requested"
# Rows another reaper (or a renewing runner) holds are skipped, not waited for. A crash
# is not a failure (see Store.occurrence_reap): within its crash budget a row is claimable
# again at once, its attempt given back (the attempt that ended is then the new attempt
# + 1) and its due_at kept; past it, dead. SET expressions read the row before the update.
_REAP = f"""
WITH {_NOW},
expired AS MATERIALIZED (
    SELECT o.id FROM {{schema}}.occurrences o
    WHERE o.state = 'running' AND o.lease_expires_at <= (SELECT now FROM clock)
    FOR UPDATE OF o SKIP LOCKED
),
reaped AS (
    UPDATE {{schema}}.occurrences o SET
        state = CASE WHEN o.crashes >= o.max_crashes OR o.cancel_requested THEN 'dead'
                     WHEN o.attempt <= 1 THEN 'scheduled' ELSE 'failed' END,
        attempt = CASE WHEN {_AGAIN} THEN GREATEST(o.attempt - 1, 0) ELSE o.attempt END,
        crashes = o.crashes + 1,
        finished_at = CASE WHEN {_AGAIN} THEN NULL ELSE clock.now END,
        lease_expires_at = NULL,
        error_code = CASE WHEN o.cancel_requested THEN 'cancelled'
                          WHEN o.crashes < o.max_crashes THEN 'lease_expired'
                          ELSE 'crash_loop' END,
        error_message = 'lease of ' || COALESCE(o.instance_id, '?') || CASE
            WHEN o.cancel_requested THEN ' expired after its cancellation was requested'
            WHEN o.crashes < o.max_crashes
            THEN ' expired (crash ' || (o.crashes + 1) || ' of ' || o.max_crashes || ' allowed)'
            ELSE ' expired (crash ' || (o.crashes + 1) || ', max_crashes=' || o.max_crashes
                 || '): its runner keeps dying' END
    FROM expired e, clock WHERE o.id = e.id
    RETURNING o.*
),
logged AS (
    INSERT INTO {{schema}}.attempts ({_ATTEMPT_COLUMNS})
    SELECT id, fencing_token, CASE WHEN state = 'dead' THEN attempt ELSE attempt + 1 END,
           instance_id, started_at, (SELECT now FROM clock),
           CASE WHEN state = 'dead' THEN 'dead' ELSE 'crashed' END, error_code, error_message
    FROM reaped
)
SELECT {_COLS},
       (SELECT count(*) FROM ({_WAKE} FROM reaped WHERE state <> 'dead' LIMIT 1) AS wake)
FROM reaped ORDER BY plan_time, seq
"""

_INSERT_COLUMNS = (
    "id, dedupe_key, job, task, scope, plan_time, due_at, kind, state, max_attempts, "
    "overlap, payload, max_crashes, created_at"
)
_INSERT = f"""
WITH {_NOW},
inserted AS (
    INSERT INTO {{schema}}.occurrences ({_INSERT_COLUMNS})
    SELECT %(id)s, %(dedupe_key)s, %(job)s, %(task)s, %(scope)s, %(plan_time)s, %(due_at)s,
           %(kind)s, 'scheduled', %(max_attempts)s, %(overlap)s, %(payload)s::json,
           %(max_crashes)s, clock.now
    FROM clock
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING {_COLS}
)
SELECT {_COLS},
       (SELECT count(*) FROM ({_WAKE} FROM inserted WHERE due_at {_SOON}) AS wake)
FROM inserted
"""
# The same, due the statement's instant plus %(delay)s: ``enqueue`` in one round trip. It
# answers only what the database decided, created_at and due_at (the rest of the new row is
# the item's: ``codec.inserted``), not the 24 columns of the row; no row on a known key.
_INSERT_NOW = (
    _INSERT.replace("%(plan_time)s, %(due_at)s", "clock.now + %(delay)s, clock.now + %(delay)s")
    .replace(f"RETURNING {_COLS}", "RETURNING created_at, due_at")
    .replace(f"SELECT {_COLS},", "SELECT created_at, due_at,")
)
assert _INSERT_NOW.count("%(delay)s") == 2 and _COLS not in _INSERT_NOW

# Many new occurrences from ``codec.items_params``, in key order: ids, keys and payloads
# are JSON arrays (``json`` keeps each payload's text as written, so payloads read back
# exactly), the other columns arrays sent in binary, zipped by ROWS FROM. A column array
# of one element (a value shared by all rows) is padded with NULLs by ROWS FROM: COALESCE
# repeats its element (those columns are NOT NULL, so a NULL is always padding).
_INSERT_ITEMS = f"""
    INSERT INTO {{schema}}.occurrences ({_INSERT_COLUMNS})
    SELECT i.id, i.dedupe_key, COALESCE(i.job, (%(jobs)b::text[])[1]),
           COALESCE(i.task, (%(tasks)b::text[])[1]), COALESCE(i.scope, (%(scopes)b::text[])[1]),
           COALESCE(i.plan_time, (%(plan_times)b::timestamptz[])[1]),
           COALESCE(i.due_at, (%(dues)b::timestamptz[])[1]),
           COALESCE(i.kind, (%(kinds)b::text[])[1]), 'scheduled',
           COALESCE(i.max_attempts, (%(max_attempts)b::integer[])[1]),
           COALESCE(i.overlap, (%(overlaps)b::text[])[1]), i.payload,
           COALESCE(i.max_crashes, (%(max_crashes)b::integer[])[1]), clock.now
    FROM ROWS FROM (
            json_array_elements_text(%(ids)s::json), json_array_elements_text(%(keys)s::json),
            unnest(%(jobs)b::text[]), unnest(%(tasks)b::text[]), unnest(%(scopes)b::text[]),
            unnest(%(plan_times)b::timestamptz[]), unnest(%(dues)b::timestamptz[]),
            unnest(%(kinds)b::text[]), unnest(%(max_attempts)b::integer[]),
            unnest(%(overlaps)b::text[]), json_array_elements(%(payloads)s::json),
            unnest(%(max_crashes)b::integer[]))
         AS i(id, dedupe_key, job, task, scope, plan_time, due_at, kind, max_attempts,
              overlap, payload, max_crashes), clock
"""
_INSERT_MANY = f"""
WITH {_NOW},
inserted AS (
    {_INSERT_ITEMS}
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING due_at
)
SELECT (SELECT count(*) FROM inserted),
       (SELECT count(*) FROM ({_WAKE} FROM inserted WHERE due_at {_SOON} LIMIT 1) AS wake)
"""

# The same insert for the items of many plan steps (:mod:`.planning`): one more column,
# ``step``, the position of the step each item belongs to, so that a statement inserts
# only the items of the steps that applied.
STEP_ITEMS = _INSERT_ITEMS.replace(
    "unnest(%(max_crashes)b::integer[]))",
    "unnest(%(max_crashes)b::integer[]), unnest(%(item_steps)b::integer[]))",
).replace("overlap, payload, max_crashes), clock", "overlap, payload, max_crashes, step), clock")
assert STEP_ITEMS.count("item_steps") == 1 and STEP_ITEMS.count("max_crashes, step)") == 1
#: Wakes listeners if a row of the CTE ``inserted`` (with a ``due_at`` column) is due soon.
WAKE_INSERTED = (
    f"(SELECT count(*) FROM ({_WAKE} FROM inserted WHERE due_at {_SOON} LIMIT 1) AS wake)"
)

# Counts for metrics: one snapshot. The due count walks the claim index (its predicate is
# the claimable states, its first column due_at); the pairs need a scan of the table, which
# metrics read at most every few seconds. An empty table yields no row (due is then 0).
_COUNTS = f"""
WITH {_NOW}
SELECT job, state, count(*),
       (SELECT count(*) FROM {{schema}}.occurrences
        WHERE state IN ('scheduled', 'failed') AND due_at <= (SELECT now FROM clock))
FROM {{schema}}.occurrences GROUP BY job, state
"""

_HISTORY = "ORDER BY plan_time DESC, created_at DESC, seq DESC LIMIT %(limit)s"
_JOB_COLUMNS = "name, task, schedule, dynamic, paused, payload, metadata, created_at"
_JOB_VALUES = """
    FROM unnest(%(names)s::text[], %(tasks)s::text[], %(schedules)s::text[],
                %(dynamic)s::boolean[], %(paused)s::boolean[], %(payloads)s::text[],
                %(metadata)s::text[], %(created)s::timestamptz[])
         AS j(name, task, schedule, dynamic, paused, payload, metadata, created_at), clock
"""
_JOB_SELECT = (
    "SELECT j.name, j.task, j.schedule::json, j.dynamic, j.paused, j.payload::json, "
    "j.metadata::json, COALESCE(j.created_at, clock.now)"
)

# A dynamic schedule and its stream's cursor, never planned and due in the planning index
# when the job was created, in one statement. A cursor left there (a stream planned under
# that name before) starts over, as the new schedule's.
_JOB_ADD = f"""
WITH {_NOW},
added AS (
    INSERT INTO {{schema}}.jobs ({_JOB_COLUMNS}) {_JOB_SELECT} {_JOB_VALUES}
    ON CONFLICT (name) DO NOTHING
    RETURNING name, created_at
),
indexed AS (
    INSERT INTO {{schema}}.plan_cursors
        (job, scope, last_plan_time, planned_count, next_plan_time, slot)
    SELECT name, '', NULL, 0, created_at, %(slot)s FROM added
    ON CONFLICT (job, scope) DO UPDATE SET last_plan_time = NULL, planned_count = 0,
        next_plan_time = excluded.next_plan_time, slot = excluded.slot
)
SELECT name FROM added
"""

TEMPLATES: dict[str, str] = {
    "claim": _CLAIM,
    "renew": _RENEW,
    "complete": _COMPLETE,
    "release": _RELEASE,
    "reap": _REAP,
    "cancel": _CANCEL,
    "insert": _INSERT,
    "insert_now": _INSERT_NOW,
    "insert_many": _INSERT_MANY,
    "counts": _COUNTS,
    "get": f"SELECT {_COLS} FROM {{schema}}.occurrences WHERE id = %(id)s",
    "attempts": f"SELECT {_ATTEMPT_COLUMNS} FROM {{schema}}.attempts "
    "WHERE occurrence_id = %(id)s ORDER BY fencing_token",
    "get_by_key": f"SELECT {_COLS} FROM {{schema}}.occurrences WHERE dedupe_key = %(key)s",
    # Not min(due_at): with stale statistics the planner aggregates every claimable row
    # instead of stopping at the first one of the claim index that matches.
    "next_due": "SELECT due_at FROM {schema}.occurrences "
    "WHERE state IN ('scheduled', 'failed') AND task = ANY(%(tasks)s::text[]) "
    "ORDER BY due_at LIMIT 1",
    # History: one statement per filter combination, so that each can use its index.
    "list": f"SELECT {_COLS} FROM {{schema}}.occurrences {_HISTORY}",
    "list_job": f"SELECT {_COLS} FROM {{schema}}.occurrences WHERE job = %(job)s {_HISTORY}",
    "list_state": f"SELECT {_COLS} FROM {{schema}}.occurrences WHERE state = %(state)s {_HISTORY}",
    "list_job_state": f"SELECT {_COLS} FROM {{schema}}.occurrences "
    f"WHERE job = %(job)s AND state = %(state)s {_HISTORY}",
    # The paused flag, created_at and origin (dynamic) belong to the store, not the code.
    "job_upsert": f"WITH {_NOW} INSERT INTO {{schema}}.jobs ({_JOB_COLUMNS}) "
    f"{_JOB_SELECT} {_JOB_VALUES} ON CONFLICT (name) DO UPDATE SET task = excluded.task, "
    "schedule = excluded.schedule, payload = excluded.payload, metadata = excluded.metadata",
    "job_add": _JOB_ADD,
    "job_get": f"SELECT {_JOB_COLUMNS} FROM {{schema}}.jobs WHERE name = %(name)s",
    "job_list": f"SELECT {_JOB_COLUMNS} FROM {{schema}}.jobs ORDER BY name",
    "job_delete": "WITH cursors AS (DELETE FROM {schema}.plan_cursors WHERE job = %(name)s) "
    "DELETE FROM {schema}.jobs WHERE name = %(name)s RETURNING name",
    "job_set_paused": "UPDATE {schema}.jobs SET paused = %(paused)s WHERE name = %(name)s "
    "RETURNING name",
}


def render(templates: dict[str, str], schema: str) -> dict[str, str]:
    """``templates`` with ``{schema}`` (quoted) and ``{horizon}`` filled in."""
    names = {"schema": sql.Identifier(schema), "horizon": sql.Literal(WAKE_HORIZON)}
    return {
        name: sql.SQL(template).format(**names).as_string(None)
        for name, template in templates.items()
    }


class Queries:
    """Every statement of :data:`TEMPLATES`, rendered for one schema, as attributes."""

    def __init__(self, schema: str) -> None:
        rendered = render(TEMPLATES, schema)
        self.claim = rendered["claim"]
        self.renew = rendered["renew"]
        self.complete = rendered["complete"]
        self.release = rendered["release"]
        self.reap = rendered["reap"]
        self.cancel = rendered["cancel"]
        self.insert = rendered["insert"]
        self.insert_now = rendered["insert_now"]
        self.insert_many = rendered["insert_many"]
        self.counts = rendered["counts"]
        self.get = rendered["get"]
        self.get_by_key = rendered["get_by_key"]
        self.attempts = rendered["attempts"]
        self.next_due = rendered["next_due"]
        self.list = {
            (False, False): rendered["list"],
            (True, False): rendered["list_job"],
            (False, True): rendered["list_state"],
            (True, True): rendered["list_job_state"],
        }
        self.job_upsert = rendered["job_upsert"]
        self.job_add = rendered["job_add"]
        self.job_get = rendered["job_get"]
        self.job_list = rendered["job_list"]
        self.job_delete = rendered["job_delete"]
        self.job_set_paused = rendered["job_set_paused"]
