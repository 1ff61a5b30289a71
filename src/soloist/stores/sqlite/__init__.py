"""``sqlite:///path.db``: the embedded store, safe for several processes on one host.

Design:

* One file, WAL journal: readers never block the single writer, and every write
  transaction starts with ``BEGIN IMMEDIATE``, which takes SQLite's write lock up front and
  waits for it (``busy_timeout``) instead of failing. Because only one writer exists at a
  time across all processes, a transaction's reads and writes form one atomic step: this
  is what makes claims, fencing and planning compare-and-set exactly-once. (``SKIP LOCKED``
  does not exist in SQLite; the write lock plays its part.)
* A claim is one transaction: select due candidates in order, apply the overlap rules,
  then one ``UPDATE ... WHERE id IN (...) RETURNING`` for the whole batch.
* Every runner write is fenced by ``state = 'running' AND instance_id = ? AND
  fencing_token = ?``.
* All blocking sqlite3 calls run on one worker thread per store, which owns the
  connection; the async methods await it, so any event loop (or ``asyncio.run`` in a
  sync caller's thread) can use the store.
* The planning index is a partial index of the plan cursors by ``next_plan_time``; a
  batch of plan steps is one transaction whose steps each apply or not on their own, fenced
  by the planning partition leases (:mod:`soloist.stores.sqlite.planning`).
* The schema is versioned (:mod:`soloist.stores.sqlite.migrations`).
"""

from __future__ import annotations

from soloist.stores.sqlite.store import SQLiteStore, sqlite_path

__all__ = ["SQLiteStore", "sqlite_path"]
