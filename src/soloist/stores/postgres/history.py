"""History retention of the PostgreSQL store: deleting finished occurrences in bounded
batches.

A finished occurrence is one with ``finished_at`` set (succeeded, dead, skipped); the
partial indexes of migration 7 hold only those, so claims, renewals and releases (whose
rows have no ``finished_at``) never touch them. One call is one statement over at most
``limit`` rows, oldest ``finished_at`` first (an ordered walk of ``occurrences_finished``
that stops after the batch), rows locked by another pruner skipped (``SKIP LOCKED``), the
attempt records deleted with their rows. The newest finished row of each job stays: status
shows it as the job's last outcome (a probe of ``occurrences_job_finished``).

The cut is the later of ``before`` and, with ``keep``, the instant just after the
``keep + 1``-th newest finish time (an index-only walk of ``keep`` entries).
"""

# S608 flags SQL built with f-strings: only module constants are joined here; values are
# %(name)s parameters, the schema is a quoted identifier (queries.render).
# ruff: noqa: S608

from __future__ import annotations

from soloist.stores.postgres.queries import render

__all__ = ["History"]

_CUT = """
cut AS (
    SELECT GREATEST(
        %(before)s::timestamptz,
        (SELECT finished_at + interval '1 microsecond' FROM {schema}.occurrences
         WHERE finished_at IS NOT NULL AND %(keep)s::bigint IS NOT NULL
         ORDER BY finished_at DESC OFFSET COALESCE(%(keep)s::bigint, 0) LIMIT 1)
    ) AS at
)
"""
_CANDIDATES = """
SELECT o.id FROM cut, {schema}.occurrences o
WHERE o.finished_at IS NOT NULL AND o.finished_at < cut.at
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
