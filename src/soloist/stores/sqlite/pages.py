"""Pages of jobs with their last outcome on SQLite (the capability ``pages_jobs``; see
:mod:`soloist.stores.pages` for the contract), as blocking functions of the worker
thread's connection.

One statement per page: the jobs of the range in name order (the primary key; SQLite's
``BINARY`` collation is the names' byte order), at most ``scan + 1``, each examined job's
newest finished occurrence by a probe of ``occurrences_job_last`` (migration 8: the
finished rows only, by job, plan time and creation, read backwards: one entry, however
many rows of the job wait after it), and the first ``limit + 1`` matches; the same
statement counts the jobs examined and names the last one, for the next cursor."""

# S608 flags SQL built with f-strings: only module constants are joined here; values are
# ? parameters.

from __future__ import annotations

import sqlite3
from functools import cache

from soloist.clock import from_epoch_us
from soloist.models import State
from soloist.stores.pages import NEVER, JobCounts, JobPage, JobQuery, JobView, LastOutcome, page_of
from soloist.stores.sqlite import codec

__all__ = ["job_counts", "job_page"]

_PAGE = """
WITH examined AS (
    SELECT name, paused, row_number() OVER (ORDER BY name) AS n
    FROM (
        SELECT name, paused FROM jobs WHERE name {start} :start {end}
        ORDER BY name LIMIT :read
    )
),
matched AS (
    SELECT e.n, j.*, o.id AS last_id, o.state AS last_state, o.plan_time AS last_plan,
           o.finished_at AS last_finished, o.error_code AS last_error
    FROM examined e
    JOIN jobs j ON j.name = e.name
    LEFT JOIN occurrences o ON o.id = (
        SELECT id FROM occurrences
        WHERE job = e.name AND finished_at IS NOT NULL
        ORDER BY plan_time DESC, created_at DESC, rowid DESC
        LIMIT 1
    )
    WHERE e.n <= :scan {paused} {outcome}
    ORDER BY e.n
    LIMIT :take
)
SELECT edge.examined, edge.last_examined, m.*
FROM (
    SELECT count(*) AS examined, max(CASE WHEN n = :scan THEN name END) AS last_examined
    FROM examined
) AS edge
LEFT JOIN matched m ON 1
ORDER BY m.n
"""

_COUNT = "SELECT count(*), coalesce(sum(paused), 0) FROM jobs WHERE name >= :start {end}"


@cache
def _page_sql(inclusive: bool, ends: bool, paused: bool, outcome: str) -> str:
    return (
        _PAGE.replace("{start}", ">=" if inclusive else ">")
        .replace("{end}", "AND name < :end" if ends else "")
        .replace("{paused}", "AND e.paused = :paused" if paused else "")
        .replace(
            "{outcome}",
            {"": "", "never": "AND o.id IS NULL", "state": "AND o.state = :outcome"}[outcome],
        )
    )


def job_page(conn: sqlite3.Connection, query: JobQuery) -> JobPage:
    start, inclusive = query.start
    end = query.end
    outcome = "" if query.outcome is None else "never" if query.outcome == NEVER else "state"
    sql = _page_sql(inclusive, end is not None, query.paused is not None, outcome)
    params = {
        "start": start,
        "end": end,
        "read": query.scan + 1,
        "scan": query.scan,
        "take": query.limit + 1,
        "paused": int(bool(query.paused)),
        "outcome": query.outcome,
    }
    rows = conn.execute(sql, params).fetchall()
    matches = [JobView(codec.job(row), _last(row)) for row in rows if row["name"] is not None]
    examined, last_examined = int(rows[0]["examined"]), rows[0]["last_examined"]
    return page_of(matches, query, examined > query.scan, last_examined)


def _last(row: sqlite3.Row) -> LastOutcome | None:
    if row["last_id"] is None:
        return None
    return LastOutcome(
        row["last_id"],
        State(row["last_state"]),
        from_epoch_us(row["last_plan"]),
        codec.opt_time(row["last_finished"]),
        row["last_error"],
    )


def job_counts(conn: sqlite3.Connection, prefix: str, end: str | None) -> JobCounts:
    sql = _COUNT.replace("{end}", "AND name < :end" if end is not None else "")
    total, paused = conn.execute(sql, {"start": prefix, "end": end}).fetchone()
    return JobCounts(int(total), int(paused))
