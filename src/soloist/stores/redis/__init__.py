"""``redis://host:port/db?prefix=app``: the store on one Redis server.

Data model (every key starts with ``{prefix}``, the prefix as a hash tag, so that one app's
keys share one Redis Cluster slot; two apps with different prefixes share a server without
seeing each other):

* ``:o:<id>`` a hash per occurrence (fields in ``lua/lib.lua``: times as integers of
  microseconds, payload and result as JSON text kept as written) and ``:a:<id>`` the list
  of its attempt records (JSON). ``:dedupe`` maps dedupe keys to ids; ``:seq`` numbers
  insertions (the final tie-breaker of every order).
* ``:due:<task>`` a sorted set per task of the claimable (``scheduled``/``failed``)
  occurrences, scored by due time. Members are ``plan sort key + seq + id`` (fixed width),
  so equal due times order by plan time, then insertion. A claim merges the claimer's
  tasks' sets in order; ``next_due`` reads the head of each; ``:tasks`` lists the tasks.
* ``:running`` the running occurrences scored by lease expiry (reaping reads the expired
  head), ``:busy`` the number running per overlap group (job, scope, task); a running
  row's ``busy`` field names the counter it holds (see ``lua/lib.lua``), and
  ``:since:<group>`` holds its start time (the skip rule compares the earliest with a
  candidate's due time).
* ``:all``, ``:job:<job>`` and ``:st:<state>``: every occurrence by (plan time, insertion),
  whole, per job, per state, for ``occurrence_list`` (newest first; job *and* state walk
  the smaller of the two and filter); ``:fin:<job>`` a job's finished occurrences, the same
  way, whose newest is its last outcome (``lua/pages.lua``). ``:counts`` the occurrences
  per (job, state), kept by the scripts, so ``occurrence_counts`` reads a hash and counts
  the due sets (asked for some jobs only, it reads their fields and the sizes of the
  ``:st:`` sets instead).
* ``:done`` the finished (``succeeded``/``dead``/``skipped``) occurrences by finish time:
  the history. Every script that finishes occurrences trims it to the URL's bounds
  (``history_max`` count, default 100000; ``history_age``, default 30 days), deleting the
  trimmed occurrences, their attempts, index entries and dedupe keys, a bounded number per
  call, so memory stays bounded. A trimmed dedupe key can be inserted again: an
  ``enqueue(key=...)`` is idempotent while its occurrence is kept. Planned occurrences
  cannot come back that way: a plan cursor only moves forward and is never trimmed.
* ``:cur:<job>`` a hash of planning cursors per scope (``last|count|next|slot``: last and
  next plan times, empty for none, the planned count and the stream's slot); ``:plan`` the
  planning index, a sorted set of one member per cursor with a next plan time, scored by
  it (members name job, scope and slot, and tie by job then scope: see ``lua/lib.lua``), so
  ``plan_due`` reads the due head of it and skips other slots in the script;
  ``:part:<n>`` a planning partition's lease (holder, epoch, expiry; kept after it expires,
  so epochs never repeat) and ``:parts`` the partitions by lease expiry (see
  ``lua/partitions.lua``); ``:j:<name>`` a hash per job and ``:jobs`` the names;
  ``:lead:<name>`` a leader lease; ``:i:<id>`` and
  ``:instances`` the instances' heartbeats; ``:schema`` the key layout version;
  ``:identity`` the store's identity (written by ``migrate`` when missing, checked by
  instance heartbeats and leader elections: a missing or different one means the data was
  lost, :class:`~soloist.errors.StoreDataLostError`). ``migrate`` upgrades the keys of an
  older layout once (:mod:`soloist.stores.redis.upgrade`).

Why each operation is atomic: every state change is **one Lua script** (``lua/``), and Redis
runs a script alone, start to end; nothing else runs in between. So a claim reads the due
sets, applies the overlap rule and moves a whole batch to ``running`` with new fencing
tokens as one step; a completion checks every fence (``running``, same instance, same
token) and writes its outcome, audit record and indexes as one step; a plan's cursor
compare-and-set, fence check, index entry and inserts are one step (and a batch of plan
steps is one script call, each step applying or not on its own); an election reads and
bumps the epoch (``HINCRBY``) as one step. Scripts are loaded once and called by SHA
(``EVALSHA``; loaded again on ``NOSCRIPT`` after a server restart or ``SCRIPT FLUSH``).

The clock is the server's ``TIME``, read inside the script, unless the caller passes
``now`` (or the store has a test clock): instances with skewed clocks agree. Scripts that
make work due within a minute ``PUBLISH`` on ``{prefix}:wake``; idle instances wait for it
in :meth:`RedisStore.work_wait`. What a single server, and a replicated one, guarantee is
in ``docs/redis.md``.
"""

from __future__ import annotations

from soloist.stores.redis.store import SCHEMA_VERSION, RedisStore
from soloist.stores.redis.url import DEFAULT_PREFIX, RedisTarget, parse_url

__all__ = ["DEFAULT_PREFIX", "SCHEMA_VERSION", "RedisStore", "RedisTarget", "parse_url"]
