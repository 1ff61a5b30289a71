"""The SQL of the planning index: cursors, their entries in the index, and plan steps.

A cursor row (``plan_cursors``) is one (job, scope) stream: its last plan time, planned
count, its entry in the index (``next_plan_time``, NULL: out of it) and its slot
(:func:`soloist.models.stream_slot`, computed in Python and sent with every write). The
partial index ``plan_cursors_due`` holds only the entries, so :data:`_DUE` reads the due
ones in order and stops after its batch, and looks each one's job up by its key: its cost
follows the due streams, not the number of cursors or jobs. The slots asked about come as
a bit mask (``get_bit(mask, slot)``, one lookup per row): ``slot = ANY(array)`` is a
linear search of the array per row once the statement is prepared (a generic plan does
not hash it), 36 ms instead of 1.4 ms for 500 due streams out of half the slots.

**Plan steps** (:data:`_ADVANCE`): one statement applies a batch of steps given as arrays
(``unnest``), each step a compare-and-set of its cursor plus its items, atomically, since
the statement is. In order:

1. ``leases``: the partition leases the fences name, locked ``FOR SHARE`` in partition
   order, kept if unexpired at the statement's instant. A lease that changes hands waits
   for this statement (``partition_sync`` updates the row), and a lease changed before the
   lock is re-read at its latest version, so a step is never written under a lease that
   has passed on. ``fenced`` keeps the steps without a fence, or whose fence matches.
2. ``locked``: the steps whose cursor exists with the expected last plan time (NULL
   matching NULL: a cursor never planned), each cursor found by its primary key and
   locked ``FOR UPDATE`` in the order of the steps, which the store sends sorted by (job,
   scope): two planners writing overlapping batches lock in one order (no deadlock). A
   cursor a concurrent planner moved is re-read at its latest version and no longer
   matches.
3. ``updated`` moves those; then ``created`` inserts, in the same order, the cursors of
   steps expecting none that had none (``ON CONFLICT DO NOTHING``: one created by a
   racing planner meanwhile fails the step, as it must).
4. ``inserted``: the items of the steps that moved, existing dedupe keys ignored.

A statement holds at most one step per stream; :func:`step_rounds` splits a batch naming
a stream twice into rounds, one statement each, pipelined in one transaction, so that a
later step sees the earlier one's write. Measured on a local server, 500 steps of one
occurrence each: one statement 17 ms, a pipeline of 500 one-step statements (one round
trip too) 80 to 180 ms.
"""

# S608 flags SQL built with f-strings: only module constants are joined here (the clock
# CTE, column lists, the items insert); values are %(name)s parameters, the schema is a
# quoted identifier rendered by queries.render.
# ruff: noqa: S608

from __future__ import annotations

from collections.abc import Sequence

from soloist.models import PlanAdvance
from soloist.stores.postgres.queries import NOW_CTE, STEP_ITEMS, WAKE_INSERTED, render

__all__ = ["CURSOR_COLUMNS", "Planning", "step_rounds"]

#: Column order of a cursor (see ``codec.cursor``).
CURSOR_COLUMNS = "job, scope, last_plan_time, planned_count, next_plan_time"
# The job record of a due stream, NULL when the job has none (see ``codec.job``).
_JOB = "j.name, j.task, j.schedule, j.dynamic, j.paused, j.payload, j.metadata, j.created_at"
# Streams due at one instant come by job, then scope, in code point order (as Python sorts
# strings), whatever the database's collation.
_ORDER = 'next_plan_time, job COLLATE "C", scope COLLATE "C"'

_STEPS = """
SELECT * FROM unnest(%(steps)s::integer[], %(step_jobs)s::text[], %(step_scopes)s::text[],
                     %(expected)s::timestamptz[], %(new_last)s::timestamptz[],
                     %(added)s::bigint[], %(next)s::timestamptz[], %(slots)s::integer[],
                     %(fence_partitions)s::integer[], %(fence_epochs)s::bigint[])
    AS s(step, job, scope, expected, new_last, added, next, slot, fence_partition,
         fence_epoch)
"""
_ADVANCE = f"""
WITH {NOW_CTE},
steps AS MATERIALIZED ({_STEPS}),
leases AS MATERIALIZED (
    SELECT p.partition, p.epoch FROM {{schema}}.partition_leases p
    WHERE p.partition IN (SELECT fence_partition FROM steps)
      AND p.expires_at > (SELECT now FROM clock)
    ORDER BY p.partition
    FOR SHARE OF p
),
fenced AS MATERIALIZED (
    SELECT s.* FROM steps s
    WHERE s.fence_partition IS NULL
       OR (s.fence_partition, s.fence_epoch) IN (SELECT partition, epoch FROM leases)
),
locked AS MATERIALIZED (
    SELECT s.* FROM fenced s
    WHERE EXISTS (
        SELECT FROM {{schema}}.plan_cursors c
        WHERE c.job = s.job AND c.scope = s.scope
          AND c.last_plan_time IS NOT DISTINCT FROM s.expected
        FOR UPDATE OF c
    )
),
updated AS (
    UPDATE {{schema}}.plan_cursors c
    SET last_plan_time = s.new_last, planned_count = c.planned_count + s.added,
        next_plan_time = s.next, slot = s.slot
    FROM locked s
    WHERE c.job = s.job AND c.scope = s.scope
      AND c.last_plan_time IS NOT DISTINCT FROM s.expected
    RETURNING s.step
),
created AS (
    INSERT INTO {{schema}}.plan_cursors
        (job, scope, last_plan_time, planned_count, next_plan_time, slot)
    SELECT s.job, s.scope, s.new_last, s.added, s.next, s.slot FROM fenced s
    WHERE s.expected IS NULL AND NOT EXISTS (
        SELECT FROM {{schema}}.plan_cursors c WHERE c.job = s.job AND c.scope = s.scope)
    ON CONFLICT (job, scope) DO NOTHING
    RETURNING job, scope
),
moved AS MATERIALIZED (
    SELECT step FROM updated
    UNION ALL
    SELECT s.step FROM created JOIN fenced s USING (job, scope)
),
inserted AS (
    {STEP_ITEMS}
    WHERE i.step IN (SELECT step FROM moved)
    ON CONFLICT (dedupe_key) DO NOTHING
    RETURNING due_at
)
SELECT ARRAY(SELECT step FROM moved), {WAKE_INSERTED}
"""

# One row at least: the first column is next_at; the others are a due cursor and its job's
# record, or NULLs when nothing is due. next_at is an InitPlan that reads the index from
# ``before`` on and stops at the first entry in the slots asked about.
_DUE = f"""
WITH due AS MATERIALIZED (
    SELECT {CURSOR_COLUMNS} FROM {{schema}}.plan_cursors
    WHERE next_plan_time IS NOT NULL AND next_plan_time <= %(before)s {{slots}}
    ORDER BY {_ORDER}
    LIMIT %(limit)s
)
SELECT (SELECT min(next_plan_time) FROM {{schema}}.plan_cursors
        WHERE next_plan_time IS NOT NULL AND next_plan_time > %(before)s {{slots}}),
       d.job, d.scope, d.last_plan_time, d.planned_count, d.next_plan_time, {_JOB}
FROM (SELECT) AS one
LEFT JOIN (
    due d LEFT JOIN LATERAL (
        SELECT * FROM {{schema}}.jobs WHERE name = d.job OFFSET 0
    ) AS j ON true
) ON true
ORDER BY d.next_plan_time, d.job COLLATE "C", d.scope COLLATE "C"
"""
_IN_SLOTS = "AND get_bit(%(slots)s::bytea, slot) = 1"

# Missing cursors are created never planned, due at ``at``; an existing cursor written by
# an older version (no slot) gets its slot and ``at``; with %(revive)s, so does one out of
# the index or due later than ``at`` (its schedule may have changed). The store sends the
# streams sorted by (job, scope): existing cursors are locked in that order, then the new
# ones inserted, as plan steps do (no deadlock between them).
_AT = "COALESCE(%(at)s::timestamptz, (SELECT now FROM clock))"
_STALE = (
    f"(c.slot IS NULL OR (%(revive)s AND (c.next_plan_time IS NULL OR c.next_plan_time > {_AT})))"
)
_ENSURE = f"""
WITH {NOW_CTE},
streams AS MATERIALIZED (
    SELECT * FROM unnest(%(jobs)s::text[], %(scopes)s::text[], %(slots)s::integer[])
        AS s(job, scope, slot)
),
locked AS MATERIALIZED (
    SELECT s.* FROM streams s
    WHERE EXISTS (
        SELECT FROM {{schema}}.plan_cursors c
        WHERE c.job = s.job AND c.scope = s.scope AND {_STALE}
        FOR UPDATE OF c
    )
),
changed AS (
    UPDATE {{schema}}.plan_cursors c SET next_plan_time = {_AT}, slot = s.slot
    FROM locked s
    WHERE c.job = s.job AND c.scope = s.scope AND {_STALE}
    RETURNING 1
),
created AS (
    INSERT INTO {{schema}}.plan_cursors
        (job, scope, last_plan_time, planned_count, next_plan_time, slot)
    SELECT s.job, s.scope, NULL, 0, {_AT}, s.slot FROM streams s
    ON CONFLICT (job, scope) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM changed) + (SELECT count(*) FROM created)
"""

TEMPLATES: dict[str, str] = {
    "cursor_get": f"SELECT {CURSOR_COLUMNS} FROM {{schema}}.plan_cursors "
    "WHERE job = %(job)s AND scope = %(scope)s",
    "advance": _ADVANCE,
    # Two statements rather than a test of a NULL array: each gets a plan of its own.
    "due": _DUE.replace("{slots}", ""),
    "due_in_slots": _DUE.replace("{slots}", _IN_SLOTS),
    "ensure": _ENSURE,
}


class Planning:
    """Every statement of :data:`TEMPLATES`, rendered for one schema, as attributes."""

    def __init__(self, schema: str) -> None:
        rendered = render(TEMPLATES, schema)
        self.cursor_get = rendered["cursor_get"]
        self.advance = rendered["advance"]
        self.due = rendered["due"]
        self.due_in_slots = rendered["due_in_slots"]
        self.ensure = rendered["ensure"]


def step_rounds(steps: Sequence[PlanAdvance]) -> list[list[int]]:
    """The positions of ``steps`` in rounds of distinct streams, each round in (job, scope)
    order (the order plan statements lock cursors in): the n-th step of a stream goes to
    round n, so a stream's steps apply in their order. Almost always one round."""
    order = sorted(range(len(steps)), key=lambda n: (steps[n].job, steps[n].scope))
    seen: dict[tuple[str, str], int] = {}
    rounds: list[list[int]] = []
    for position in order:
        stream = (steps[position].job, steps[position].scope)
        index = seen[stream] = seen.get(stream, -1) + 1
        if index == len(rounds):
            rounds.append([])
        rounds[index].append(position)
    return rounds
