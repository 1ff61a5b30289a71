"""History retention of the PostgreSQL store: deleting finished occurrences in bounded
batches.

A finished occurrence is one with ``finished_at`` set (succeeded, dead, skipped); the
partial indexes of migration 7 hold only those, so claims, renewals and releases (whose
rows have no ``finished_at``) never touch them. One call is one statement over at most
``limit`` rows, oldest ``finished_at`` first (an ordered walk of ``occurrences_finished``
that stops after the batch), rows locked by another pruner skipped (``SKIP LOCKED``), the
attempt records deleted with their rows. The newest finished row of each job stays: status
shows it as the job's last outcome (a probe of ``occurrences_job_finished``).

A row goes if it finished before ``before`` or, with ``keep``, if it is not among the
newest ``keep`` in (finish time, id) order: at or before the ``keep + 1``-th newest, found
by a walk of ``keep`` index entries. The id breaks ties, so rows finished at one instant
(the outcomes of one batch are written at one time) count one by one: a cut at a finish
time alone would delete every row sharing the boundary's time, newest ``keep`` or not.
"""

# S608 flags SQL built with f-strings: only module constants are joined here; values are
# %(name)s parameters, the schema is a quoted identifier (queries.render).
# ruff: noqa: S608

from __future__ import annotations

from soloist.stores.postgres.queries import render

__all__ = ["History"]

_CUT = """
beyond AS (
    SELECT finished_at, id FROM {schema}.occurrences
    WHERE finished_at IS NOT NULL AND %(keep)s::bigint IS NOT NULL
    ORDER BY finished_at DESC, id DESC OFFSET COALESCE(%(keep)s::bigint, 0) LIMIT 1
),
cut AS (
    SELECT %(before)s::timestamptz AS before, b.finished_at AS at, b.id
    FROM (SELECT 1) AS one LEFT JOIN beyond b ON true
)
"""
# GREATEST (NULLs ignored) bounds the walk of the index of finished rows; the rest says
# which of them go.
_CANDIDATES = """
SELECT o.id FROM cut, {schema}.occurrences o
WHERE o.finished_at IS NOT NULL AND o.finished_at <= GREATEST(cut.before, cut.at)
  AND (o.finished_at < cut.before OR o.finished_at < cut.at
       OR (o.finished_at = cut.at AND o.id <= cut.id))
  AND o.state NOT IN ('scheduled', 'running', 'failed')
  AND EXISTS (
    SELECT 1 FROM {schema}.occurrences n
    WHERE n.job = o.job AND n.finished_at IS NOT NULL AND n.finished_at > o.finished_at
  )
ORDER BY o.finished_at
LIMIT %(limit)s
"""

TEMPLATES = {
    "prune": f"""
WITH {_CUT}, doomed AS ({_CANDIDATES} FOR UPDATE OF o SKIP LOCKED),
logged AS (
    DELETE FROM {{schema}}.attempts a USING doomed d WHERE a.occurrence_id = d.id
),
gone AS (
    DELETE FROM {{schema}}.occurrences o USING doomed d WHERE o.id = d.id RETURNING o.id
)
SELECT count(*) FROM gone
""",
    "count": f"WITH {_CUT} SELECT count(*) FROM ({_CANDIDATES}) AS doomed",
}


class History:
    """The statements of history retention, rendered for one schema."""

    def __init__(self, schema: str) -> None:
        rendered = render(TEMPLATES, schema)
        self.prune = rendered["prune"]
        self.count = rendered["count"]
