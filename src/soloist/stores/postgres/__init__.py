"""``postgresql://user@host:port/db?schema=app``: the store for many instances on many hosts.

Design:

* **One schema per app.** All tables live in one PostgreSQL schema (``soloist`` unless the
  URL's ``schema`` parameter names another), so several apps share a database without
  seeing each other. :mod:`~soloist.stores.postgres.migrations` versions it; ``migrate()``
  is a single read when current, else runs under an advisory lock keyed by the schema.
* **The database clock decides.** Every statement fixes one instant: the caller's ``now``,
  or ``statement_timestamp()`` of the server. Due-ness, lease expiry, reaping, start and
  finish times all come from the server's clock, so instances with skewed clocks agree.
  Times are ``timestamptz`` (microseconds, like Python's datetimes). A ``clock`` given to
  the store (tests) replaces the server's clock for ``now=None``.
* **A claim is one statement per batch**: candidates are selected ``FOR UPDATE SKIP
  LOCKED`` in claim order, updated to ``running`` with a new fencing token, and returned
  by ``UPDATE ... RETURNING``; concurrent claimers skip each other's rows instead of
  waiting. The overlap rules are part of the same statement: a ``skip``/``queue`` candidate
  qualifies only if its overlap group (job, scope, task) has no running row and no earlier
  claimable due row, which makes at most one such row per group eligible in any snapshot;
  the row lock, and PostgreSQL's re-check of a row changed after the snapshot, mean two
  claimers can never both start one. ``skip`` rows blocked by a running or just-claimed
  sibling become ``skipped`` in the same statement. (A group's rows share one task, so
  every claimer that may take one of them sees them all: claimers of different task lists
  cannot race.)
  The claim walks the partial claim index in due order and stops after its batch, however
  stale the planner's statistics: bitmap scans are off around it (``SET``/``RESET``
  pipelined with it), so it never fetches and sorts every due row.
* **Bulk inserts** (``occurrence_insert_many``, ``enqueue_many``): one statement per batch,
  ids, keys and payloads sent as JSON arrays and a column shared by every row sent once.
  ``occurrence_insert_now`` (not in the Store protocol) lets ``enqueue`` insert a row due
  at the database's now plus a delay in one round trip.
* **Fenced, batched writes.** Renewals, completions and releases of any number of
  occurrences are one ``UPDATE ... FROM unnest(...)`` each, applying only where the row is
  still ``running`` with the writer's instance id and token; ``RETURNING`` tells which.
* **LISTEN/NOTIFY.** A statement that makes occurrences claimable within a minute
  (insert, plan, retry, release, reap) also sends ``pg_notify('soloist_<schema>', ...)``
  in its own transaction; :meth:`PostgresStore.work_wait` waits for it on a dedicated
  connection, so an idle instance wakes as soon as work is committed.
* **The planning index** (:mod:`~soloist.stores.postgres.planning`): each cursor row
  keeps its stream's next plan time (NULL: out of the index) and slot; a partial index
  holds only the entries, so ``plan_due`` reads the due streams in order, each with its
  job looked up by name, and stops: it costs what the due streams cost. A batch of plan
  steps is one statement over arrays, each step a fenced compare-and-set of its cursor
  plus its occurrences; ``job_add`` writes the new stream's cursor in its statement.
* **Leader leases, partition leases and instances**
  (:mod:`~soloist.stores.postgres.coordination`): one statement per call (a partition
  sync also reads the leases back, in the same round trip), on the database clock like
  the rest; a lease row is never deleted, so epochs never repeat. A plan step's fence is
  checked against its partition's lease row, locked, in the step's statement.
* **Connections**: psycopg 3 async, a small pool per event loop, opened on first use.
  Driver errors become :class:`~soloist.errors.StoreError` (``StoreUnavailableError`` when
  the server cannot be reached), naming host and database, never the password.
"""

from __future__ import annotations

from soloist.stores.postgres.store import PostgresStore
from soloist.stores.postgres.url import DEFAULT_SCHEMA, parse_url

__all__ = ["DEFAULT_SCHEMA", "PostgresStore", "parse_url"]
