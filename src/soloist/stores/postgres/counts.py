"""Counts of some jobs' occurrences, and of all the others together, on PostgreSQL (the
capability ``counts_jobs``, what ``GET /metrics`` reads: see
:class:`soloist.stores.core.CountsJobs`).

One statement, one snapshot: the named jobs' pairs through ``occurrences_job_history``
(its first column is the job), the totals by state from one pass over the table, and the
due count through the claim index, as the protocol's count does. The answer has a row per
named job and state and one per state, whatever the number of jobs; the pass over the
table is what a count costs without counters kept by every write (tens of milliseconds
per 100,000 rows), read at most every few seconds.
"""

# S608 flags SQL built with f-strings: only module constants are joined here; values are
# %(name)s parameters and the schema is a quoted identifier (queries.render).
# ruff: noqa: S608

from __future__ import annotations

from functools import cache

from soloist.stores.postgres.queries import NOW_CTE, render

__all__ = ["counts_of_sql"]

_COUNTS_OF = f"""
WITH {NOW_CTE},
named AS (
    SELECT job, state, count(*) AS n FROM {{schema}}.occurrences
    WHERE job = ANY(%(jobs)s::text[]) GROUP BY job, state
),
everyone AS (
    SELECT NULL::text AS job, state, count(*) AS n FROM {{schema}}.occurrences GROUP BY state
)
SELECT job, state, n,
       (SELECT count(*) FROM {{schema}}.occurrences
        WHERE state IN ('scheduled', 'failed') AND due_at <= (SELECT now FROM clock))
FROM (SELECT job, state, n FROM named UNION ALL SELECT job, state, n FROM everyone) AS c
"""


@cache
def counts_of_sql(schema: str) -> str:
    """The statement for ``schema``: rows ``(job, state, count, due)``, a NULL job for the
    totals of a state over every job (no row at all for an empty table)."""
    return render({"counts_of": _COUNTS_OF}, schema)["counts_of"]
