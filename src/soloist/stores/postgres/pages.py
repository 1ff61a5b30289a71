"""Pages of jobs with their last outcome on PostgreSQL (the capability ``pages_jobs``; see
:mod:`soloist.stores.pages` for the contract).

One statement per page. The jobs of the range are read in name order through
``jobs_by_name`` (migration 9: the names in ``COLLATE "C"``, byte order, so that a prefix
is one range of the index, with ``paused`` included so that the walk reads no table row),
at most ``scan + 1`` of them; a ``LATERAL`` probe of ``occurrences_job_last`` (migration
10: the finished rows only, in history order) finds each examined job's newest finished
occurrence in one index entry, however many rows of the job are planned, running or
waiting after it (a walk of ``occurrences_job_history`` read each of them), and the page
is the first ``limit + 1`` matches. The same statement counts the jobs examined and names
the last one, which :func:`~soloist.stores.pages.page_of` needs for the next cursor.

Each filter combination is its own statement (a condition per filter, no ``IS NULL OR``
on parameters), so that every plan, generic ones included, uses the index ranges.
"""

# S608 flags SQL built with f-strings: only module constants are joined here; values are
# %(name)s parameters and the schema is a quoted identifier (queries.render).
# ruff: noqa: S608

from __future__ import annotations

from functools import cache

from soloist.stores.pages import NEVER, JobQuery
from soloist.stores.postgres.queries import render

__all__ = ["COUNT_COLUMNS", "PAGE_COLUMNS", "count_sql", "page_params", "page_sql"]

_NAME = 'name COLLATE "C"'
_JOB_COLUMNS = (
    "j.name, j.task, j.schedule, j.dynamic, j.paused, j.payload, j.metadata, j.created_at"
)
#: Columns of a page's rows: examined count, last examined name, then (NULL when nothing
#: matched) the job's columns in ``codec.job`` order and its last outcome's.
PAGE_COLUMNS = (
    "examined, last_examined, "
    + _JOB_COLUMNS.replace("j.", "m.")
    + ", m.last_id, m.last_state, m.last_plan, m.last_finished, m.last_error"
)
COUNT_COLUMNS = "total, paused"

_PAGE = f"""
WITH examined AS MATERIALIZED (
    SELECT name, paused, row_number() OVER (ORDER BY {_NAME}) AS n
    FROM (
        SELECT name, paused FROM {{schema}}.jobs
        WHERE {_NAME} {{start}} %(start)s {{end}}
        ORDER BY {_NAME} LIMIT %(read)s
    ) AS ranged
),
matched AS (
    SELECT e.n, {_JOB_COLUMNS}, l.id AS last_id, l.state AS last_state,
           l.plan_time AS last_plan, l.finished_at AS last_finished,
           l.error_code AS last_error
    FROM examined e
    JOIN {{schema}}.jobs j ON j.name = e.name
    LEFT JOIN LATERAL (
        SELECT o.id, o.state, o.plan_time, o.finished_at, o.error_code
        FROM {{schema}}.occurrences o
        WHERE o.job = e.name AND o.finished_at IS NOT NULL
        ORDER BY o.plan_time DESC, o.created_at DESC, o.seq DESC
        LIMIT 1
    ) AS l ON true
    WHERE e.n <= %(scan)s {{paused}} {{outcome}}
    ORDER BY e.n
    LIMIT %(take)s
)
SELECT {PAGE_COLUMNS}
FROM (
    SELECT count(*) AS examined, max(name) FILTER (WHERE n = %(scan)s) AS last_examined
    FROM examined
) AS edge
LEFT JOIN matched m ON true
ORDER BY m.n
"""

_COUNT = f"""
SELECT count(*) AS total, count(*) FILTER (WHERE paused) AS paused FROM {{schema}}.jobs
WHERE {_NAME} >= %(start)s {{end}}
"""


@cache
def page_sql(schema: str, inclusive: bool, ends: bool, paused: bool, outcome: str) -> str:
    """The page statement for ``schema`` and one combination of filters: ``outcome`` is
    '' (none), ``'never'`` (jobs without a last outcome) or ``'state'``."""
    outcome_sql = {
        "": "",
        "never": "AND l.id IS NULL",
        "state": "AND l.state = %(outcome)s",
    }[outcome]
    template = (
        _PAGE.replace("{start}", ">=" if inclusive else ">")
        .replace("{end}", f"AND {_NAME} < %(end)s" if ends else "")
        .replace("{paused}", "AND e.paused = %(paused)s" if paused else "")
        .replace("{outcome}", outcome_sql)
    )
    return render({"page": template}, schema)["page"]


@cache
def count_sql(schema: str, ends: bool) -> str:
    """The count statement for ``schema``, with or without an end of the prefix's range."""
    template = _COUNT.replace("{end}", f"AND {_NAME} < %(end)s" if ends else "")
    return render({"count": template}, schema)["count"]


def page_params(query: JobQuery) -> tuple[tuple[bool, bool, bool, str], dict[str, object]]:
    """The statement's key (for :func:`page_sql`, after the schema) and its parameters."""
    start, inclusive = query.start
    end = query.end
    outcome = "" if query.outcome is None else "never" if query.outcome == NEVER else "state"
    params: dict[str, object] = {
        "start": start,
        "end": end,
        "read": query.scan + 1,
        "scan": query.scan,
        "take": query.limit + 1,
        "paused": query.paused,
        "outcome": query.outcome,
    }
    return (inclusive, end is not None, query.paused is not None, outcome), params
