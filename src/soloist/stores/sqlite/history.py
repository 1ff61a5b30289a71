"""History retention of the SQLite store: deleting finished occurrences in bounded batches.

A finished occurrence is one with ``finished_at`` set (succeeded, dead, skipped); the
partial indexes of migration 6 hold only those, so claims (whose rows have no
``finished_at``) never touch them. One call is one short ``BEGIN IMMEDIATE`` transaction
over at most ``limit`` rows, oldest ``finished_at`` first: the single write lock is held
for one batch only, and the pruner pauses between batches so that claims get it.

The newest finished occurrence of each job is kept (``soloist status`` and the dashboard
show it as the job's last outcome): a row is a candidate only if its job has one that
finished later (one probe of ``occurrences_job_finished``).
"""

from __future__ import annotations

import json
import sqlite3

# The newest row beyond the newest ``keep``, in (finish time, id) order: it and every row
# before it in that order are beyond them. The id breaks ties, so rows finished at one
# instant (the outcomes of one batch are written at one time) count one by one. Found in
# three index reads (the write lock is held meanwhile): the (keep + 1)-th newest finish
# time, how many finished after it, then the row among those finished at that time (few).
_KTH = """
SELECT finished_at FROM occurrences WHERE finished_at IS NOT NULL
ORDER BY finished_at DESC LIMIT 1 OFFSET ?
"""
_NEWER = "SELECT count(*) FROM occurrences WHERE finished_at > ?"
_TIED = "SELECT id FROM occurrences WHERE finished_at = ? ORDER BY id DESC LIMIT 1 OFFSET ?"
# Candidates, oldest first: finished before :before or beyond the newest ``keep``
# (:at, :id; NULLs when there is no such bound), never a row that is not finished, never
# the newest finished row of its job. :upto (the later bound) limits the index walk.
_DOOMED = """
SELECT id FROM occurrences AS o
WHERE o.finished_at IS NOT NULL AND o.finished_at <= :upto
  AND (o.finished_at < :before OR o.finished_at < :at OR (o.finished_at = :at AND o.id <= :id))
  AND o.state NOT IN ('scheduled', 'running', 'failed')
  AND EXISTS (
    SELECT 1 FROM occurrences AS n
    WHERE n.job = o.job AND n.finished_at IS NOT NULL AND n.finished_at > o.finished_at
  )
ORDER BY o.finished_at
LIMIT :limit
"""
# The ids of a batch, as one JSON array parameter.
_DELETE_ATTEMPTS = "DELETE FROM attempts WHERE occurrence_id IN (SELECT value FROM json_each(?))"
_DELETE = "DELETE FROM occurrences WHERE id IN (SELECT value FROM json_each(?))"


def _cut(
    conn: sqlite3.Connection, before: int | None, keep: int | None, limit: int
) -> dict[str, object] | None:
    """The parameters of :data:`_DOOMED` (times in epoch microseconds), or None when
    nothing is to go."""
    at: int | None = None
    last: str | None = None
    if keep is not None:
        row = conn.execute(_KTH, (keep,)).fetchone()
        if row is not None:
            at = int(row[0])
            (newer,) = conn.execute(_NEWER, (at,)).fetchone()
            (last,) = conn.execute(_TIED, (at, keep - int(newer))).fetchone()
    bounds = [bound for bound in (before, at) if bound is not None]
    if not bounds:
        return None
    return {"upto": max(bounds), "before": before, "at": at, "id": last, "limit": limit}


def history_prune(
    conn: sqlite3.Connection, before: int | None, keep: int | None, limit: int, dry_run: bool
) -> int:
    """See :meth:`soloist.stores.base.Store.history_prune` (times in epoch microseconds)."""
    if dry_run:
        # A read: no write lock, nothing changes.
        cut = _cut(conn, before, keep, limit)
        if cut is None:
            return 0
        return len(conn.execute(_DOOMED, cut).fetchall())
    conn.execute("BEGIN IMMEDIATE")
    try:
        cut = _cut(conn, before, keep, limit)
        ids = [] if cut is None else [row[0] for row in conn.execute(_DOOMED, cut)]
        if ids:
            doomed = (json.dumps(ids),)
            conn.execute(_DELETE_ATTEMPTS, doomed)
            conn.execute(_DELETE, doomed)
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return len(ids)
