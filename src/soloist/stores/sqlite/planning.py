"""The planning index in SQLite: plan cursors, their compare-and-set steps, and the query
of due streams, as blocking functions of a connection (run on the store's worker thread).

Each cursor row carries its entry in the index, ``next_plan_time`` (NULL: out of it), and
its stream's ``slot`` (:func:`soloist.models.stream_slot`, computed in Python). The partial
index ``plan_cursors_due (next_plan_time, job, scope, slot) WHERE next_plan_time IS NOT
NULL`` holds only indexed cursors, in plan_due's order, so :func:`plan_due` walks the due
entries and stops at ``limit``: its cost is the due streams', whatever the number of
cursors; a slot filter is tested on the index entry (one probe of the slots asked about),
before the row is read.

Writes follow :mod:`.ops`: ``BEGIN IMMEDIATE`` first, then the instant (``Now``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from soloist.models import DueBatch, DueStream, PlanCursor
from soloist.stores.sqlite import codec
from soloist.stores.sqlite.codec import INSERT_OCCURRENCE, PlanStep
from soloist.stores.sqlite.ops import Now, transaction

__all__ = ["plan_advance_many", "plan_cursor_ensure", "plan_cursor_get", "plan_due"]

# A fence holds while its partition's lease has its epoch and has not expired.
_FENCE_HOLDS = """
SELECT 1 FROM partition_leases WHERE partition = ? AND epoch = ? AND expires_at > ?
"""
# expected_last None: no cursor (create it) or a cursor never planned (move it).
_ADVANCE_FIRST = """
INSERT INTO plan_cursors (job, scope, last_plan_time, planned_count, next_plan_time, slot)
VALUES (:job, :scope, :new_last, :added, :next, :slot)
ON CONFLICT (job, scope) DO UPDATE SET
    last_plan_time = excluded.last_plan_time,
    planned_count = planned_count + excluded.planned_count,
    next_plan_time = excluded.next_plan_time,
    slot = excluded.slot
WHERE plan_cursors.last_plan_time IS NULL
RETURNING 1
"""
_ADVANCE = """
UPDATE plan_cursors SET last_plan_time = :new_last, planned_count = planned_count + :added,
    next_plan_time = :next, slot = :slot
WHERE job = :job AND scope = :scope AND last_plan_time = :expected
RETURNING 1
"""
# Missing cursors are created never planned, due at ``at``; a cursor written by an older
# version (no slot) gets its slot and ``at``; with ``revive``, so does one out of the index
# or due later than ``at``.
_ENSURE = """
INSERT INTO plan_cursors (job, scope, last_plan_time, planned_count, next_plan_time, slot)
VALUES (:job, :scope, NULL, 0, :at, :slot)
ON CONFLICT (job, scope) DO UPDATE
SET slot = excluded.slot, next_plan_time = excluded.next_plan_time
WHERE plan_cursors.slot IS NULL OR (:revive AND (plan_cursors.next_plan_time IS NULL
   OR plan_cursors.next_plan_time > excluded.next_plan_time))
RETURNING 1
"""
# ``:slots`` is a JSON array of the slots asked about (the ranges spelled out: at most
# SLOTS numbers). The list subquery is evaluated once into a lookup table, so the test on
# each index entry is one probe; a correlated test of the ranges would parse them per entry.
_IN_SLOTS = "AND c.slot IN (SELECT value FROM json_each(:slots))\n"
# The cursor columns and the job's share no name, so codec.plan_cursor and codec.job read
# the same row.
_DUE = """
SELECT c.job, c.scope, c.last_plan_time, c.planned_count, c.next_plan_time,
       j.name, j.task, j.schedule, j.dynamic, j.paused, j.payload, j.metadata, j.created_at
FROM plan_cursors AS c LEFT JOIN jobs AS j ON j.name = c.job
WHERE c.next_plan_time IS NOT NULL AND c.next_plan_time <= :before
"""
_DUE_ORDER = "ORDER BY c.next_plan_time, c.job, c.scope LIMIT :limit"
_NEXT_AT = """
SELECT MIN(c.next_plan_time) FROM plan_cursors AS c
WHERE c.next_plan_time IS NOT NULL AND c.next_plan_time > :before
"""
#: plan_due's statements, without and with a slot filter: (due streams, next_at).
PLAN_DUE = {
    False: (_DUE + _DUE_ORDER, _NEXT_AT),
    True: (_DUE + _IN_SLOTS + _DUE_ORDER, _NEXT_AT + _IN_SLOTS),
}


def plan_cursor_get(conn: sqlite3.Connection, job: str, scope: str) -> PlanCursor | None:
    row = conn.execute(
        "SELECT * FROM plan_cursors WHERE job = ? AND scope = ?", (job, scope)
    ).fetchone()
    return codec.plan_cursor(row) if row is not None else None


def plan_advance_many(conn: sqlite3.Connection, steps: Sequence[PlanStep], now: Now) -> list[bool]:
    """Apply ``steps`` in order in one write transaction (one call, one ``BEGIN
    IMMEDIATE``); return whether each applied. A step writes nothing unless its fence and
    its compare-and-set both hold, so each is atomic on its own."""
    with transaction(conn):
        at = now()
        return [_advance(conn, step, at) for step in steps]


def _advance(conn: sqlite3.Connection, step: PlanStep, at: int) -> bool:
    """One step at the instant ``at``: check the fence on the store's clock, move the
    cursor if its last plan time is still the expected one, then insert the items
    (existing dedupe keys ignored)."""
    fence = step.fence
    if fence is not None and conn.execute(_FENCE_HOLDS, (*fence, at)).fetchone() is None:
        return False  # the partition passed on or lapsed: another planner owns it
    params = {
        "job": step.job,
        "scope": step.scope,
        "new_last": step.new_last,
        "added": step.added_count,
        "next": step.next_plan_time,
        "slot": step.slot,
    }
    if step.expected_last is None:
        moved = conn.execute(_ADVANCE_FIRST, params).fetchone()
    else:
        moved = conn.execute(_ADVANCE, {**params, "expected": step.expected_last}).fetchone()
    if moved is None:
        return False  # another planner got there first; nothing was written
    conn.executemany(INSERT_OCCURRENCE, ((*item, at) for item in step.items))
    return True


def plan_due(
    conn: sqlite3.Connection,
    before: int,
    limit: int,
    slots: Sequence[tuple[int, int]] | None,
) -> DueBatch:
    """The due streams (``next_plan_time <= before``, in order, at most ``limit``) with
    their job records, and the earliest ``next_plan_time`` after ``before``; both with the
    slot filter when ``slots`` is given, and in one read transaction (one snapshot)."""
    due_sql, next_sql = PLAN_DUE[slots is not None]
    params: dict[str, object] = {"before": before, "limit": limit}
    if slots is not None:
        params["slots"] = json.dumps([slot for lo, hi in slots for slot in range(lo, hi)])
    conn.execute("BEGIN")
    try:
        rows = conn.execute(due_sql, params).fetchall()
        after = conn.execute(next_sql, params).fetchone()
    finally:
        conn.execute("COMMIT")
    streams = [
        DueStream(codec.plan_cursor(row), codec.job(row) if row["name"] is not None else None)
        for row in rows
    ]
    next_at = after[0] if after is not None else None
    return DueBatch(streams, codec.opt_time(next_at))


def plan_cursor_ensure(
    conn: sqlite3.Connection,
    streams: Sequence[tuple[str, str, int]],
    revive: bool,
    now: Now,
) -> int:
    """Create the missing cursors of ``streams`` ((job, scope, slot)), never planned, due
    at ``now()``, and enter those written by an older version (no slot); with ``revive``,
    also bring the existing ones out of the index or due later back to ``now()``. One
    transaction; returns how many were created or changed."""
    with transaction(conn):
        at = now()
        changed = 0
        for job, scope, slot in streams:
            row = {"job": job, "scope": scope, "at": at, "slot": slot, "revive": revive}
            if conn.execute(_ENSURE, row).fetchone() is not None:
                changed += 1
        return changed
