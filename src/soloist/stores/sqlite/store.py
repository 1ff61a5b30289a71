"""The asyncio face of the SQLite store: one worker thread owns the connection."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, TypeVar

from soloist.clock import Clock, SystemClock, from_epoch_us, to_epoch_us
from soloist.errors import ConfigError, DuplicateJobError, StoreError, StoreUnavailableError
from soloist.models import (
    Attempt,
    Claimed,
    DueBatch,
    InstanceInfo,
    JobRecord,
    LeaderLease,
    NewOccurrence,
    Occurrence,
    OccurrenceCounts,
    Outcome,
    PartitionLease,
    PlanAdvance,
    PlanCursor,
    Renewed,
    State,
    stream_slot,
)
from soloist.stores._values import new_ids, result_json
from soloist.stores.core import Capabilities
from soloist.stores.deadlines import Deadlines
from soloist.stores.pages import JobCounts, JobPage, JobQuery, prefix_end
from soloist.stores.sqlite import (
    codec,
    coordination,
    existing,
    history,
    migrations,
    ops,
    pages,
    planning,
)
from soloist.stores.urls import (
    DEFAULT_HISTORY_AGE,
    DEFAULT_HISTORY_MAX,
    Retention,
    history_bounds,
    query_options,
)

__all__ = ["SQLiteStore", "sqlite_path"]

T = TypeVar("T")

#: The options a SQLite store URL may have.
_OPTIONS = ("history_max", "history_age")

#: How long a writer waits for another process's write lock before failing, at most (a
#: store opened with a lease TTL waits half of it: see soloist.stores.deadlines).
BUSY_TIMEOUT_S = 10.0


def sqlite_path(url: str) -> str:
    """The file path of a SQLite URL, read as SQLAlchemy does: ``sqlite:///rel.db`` is the
    relative path ``rel.db``, ``sqlite:////tmp/x.db`` the absolute path ``/tmp/x.db``.
    The options (``?history_max=...&history_age=...``, see :func:`sqlite_retention`) are
    checked, not part of the path."""
    scheme, sep, rest = url.partition("://")
    if scheme != "sqlite" or not sep:
        raise ConfigError(f"invalid SQLite store URL {url!r}: expected 'sqlite:///path.db'")
    rest, _, _query = rest.partition("?")
    sqlite_retention(url)
    if not rest.startswith("/"):
        raise ConfigError(
            f"invalid SQLite store URL {url!r}: expected 'sqlite:///relative/path.db' or "
            "'sqlite:////absolute/path.db' (three slashes, then the path)"
        )
    if not rest[1:]:
        raise ConfigError(f"invalid SQLite store URL {url!r}: the database path is empty")
    return rest[1:]


def sqlite_retention(url: str) -> Retention:
    """The history bounds of a SQLite URL's options: ``history_max`` (finished occurrences
    kept, default 100000, 0: no count limit) and ``history_age`` (how long they are kept,
    default ``30d``, ``0``: no age limit); any other option is refused, naming it."""
    query = url.partition("?")[2]
    options = query_options(query, _OPTIONS, url, "SQLite")
    history_max, history_age = history_bounds(
        options, url, "SQLite", DEFAULT_HISTORY_MAX, DEFAULT_HISTORY_AGE
    )
    return Retention(history_max, history_age)


class SQLiteStore:
    """A :class:`soloist.stores.base.Store` in one SQLite file, shared by the processes of
    one host (``sqlite:///path.db``).

    The connection opens lazily on the worker thread at the first call (usually
    :meth:`migrate`). Cancelling a call does not stop its transaction: it commits or rolls
    back on the worker thread as it would have, and only the result is dropped (a claim
    lost this way is reaped when its lease expires).

    A driver: it trusts the checks of :class:`soloist.stores.core.CheckedStore`."""

    capabilities = Capabilities(checks_schema=True, pages_jobs=True, reach="host")

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        lease_ttl: float | timedelta | None = None,
    ) -> None:
        self.url = url
        self.path = sqlite_path(url)
        #: The history bounds the pruner keeps (:class:`soloist.runtime.pruner.Pruner`).
        self.retention = sqlite_retention(url)
        self.busy_timeout = min(BUSY_TIMEOUT_S, Deadlines.from_ttl(lease_ttl).busy)
        self._clock: Clock = clock or SystemClock()
        # One thread owns the connection: sqlite3 objects must stay on the thread that made
        # them, and the store must work from whichever event loop calls it.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="soloist-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"SQLiteStore({self.url!r})"

    # -- the worker thread ------------------------------------------------------------------
    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreError(f"SQLite store at {self.path!r} is closed")
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._executor, self._call, work)
        except RuntimeError:  # the executor was shut down by a concurrent close()
            raise StoreError(f"SQLite store at {self.path!r} is closed") from None
        return await future

    def _call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._connect()
        try:
            return work(conn)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store at {self.path!r}: {exc}") from exc

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        what = f"cannot open SQLite store at {self.path!r}"
        directory = os.path.dirname(os.path.abspath(self.path))
        if self.path != ":memory:" and not os.path.isdir(directory):
            raise StoreUnavailableError(f"{what}: directory {directory!r} does not exist")
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"{what}: {exc}") from exc
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            # WAL lets readers run beside the one writer; NORMAL is durable across
            # application crashes in WAL mode, and only fsyncs at checkpoints.
            row = _wal(conn, self.busy_timeout)
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            conn.close()
            raise StoreUnavailableError(f"{what}: {exc}") from exc
        mode = str(row[0]).lower() if row is not None else "unknown"
        if mode != "wal" and self.path != ":memory:":
            # SQLite answers with the mode it kept when it cannot use WAL (a file system
            # without shared memory, as some network ones): NORMAL would then no longer be
            # crash-safe, and processes would block each other's reads. An in-memory
            # database has one connection, nobody to share it with: "memory" is right.
            conn.close()
            raise StoreUnavailableError(
                f"{what}: journal_mode is {mode!r}, not 'wal' (SQLite cannot use WAL for "
                "this file; is it on a network or other file system without shared memory?)"
            )
        self._conn = conn
        return conn

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- life cycle -------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        at = self._at(None)  # data steps run at the store's clock (a test clock if given)
        return await self._run(lambda c: migrations.migrate(c, at))

    async def schema_check(self) -> None:
        """The capability ``checks_schema``: a read-only connection of its
        own, so nothing is created (not even the file)."""
        await asyncio.to_thread(existing.check_schema, self.path)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._disconnect)
        finally:
            self._executor.shutdown(wait=False)

    async def now(self) -> datetime:
        return self._clock.now()

    def _now_us(self, now: datetime | None) -> int:
        return to_epoch_us(now if now is not None else self._clock.now())

    def _at(self, now: datetime | None) -> ops.Now:
        """The instant of a write, read by the transaction once ``BEGIN IMMEDIATE`` holds
        the write lock: ``now`` if given (checked by the core), else the
        store's clock at that moment, not before the wait for another process's lock."""
        if now is not None:
            fixed = to_epoch_us(now)
            return lambda: fixed
        clock = self._clock
        return lambda: to_epoch_us(clock.now())

    # -- occurrences ------------------------------------------------------------------------
    def _new_row(self, item: NewOccurrence) -> tuple[object, ...]:
        return codec.insert_params(uuid.uuid4().hex, item)

    async def occurrence_insert(self, item: NewOccurrence) -> tuple[Occurrence, bool]:
        params, at = self._new_row(item), self._at(None)
        return await self._run(lambda c: ops.occurrence_insert(c, params, item.dedupe_key, at))

    async def occurrence_insert_many(self, items: Sequence[NewOccurrence]) -> int:
        ids = new_ids(len(items))
        rows = [codec.insert_params(i, item) for i, item in zip(ids, items, strict=True)]
        at = self._at(None)
        return await self._run(lambda c: ops.occurrence_insert_many(c, rows, at))

    async def work_wait(self, timeout: float) -> bool:
        """SQLite cannot notify: wait ``timeout`` on the store's clock, return False."""
        await self._clock.sleep(timeout)
        return False

    async def plan_cursor_get(self, job: str, scope: str) -> PlanCursor | None:
        return await self._run(lambda c: planning.plan_cursor_get(c, job, scope))

    async def plan_advance(self, advance: PlanAdvance) -> bool:
        return (await self.plan_advance_many([advance]))[0]

    async def plan_advance_many(self, steps: Sequence[PlanAdvance]) -> list[bool]:
        """All steps in one call to the worker: one ``BEGIN IMMEDIATE`` transaction, each
        step atomic on its own (see :func:`planning.plan_advance_many`)."""
        ids = iter(new_ids(sum(len(step.items) for step in steps)))
        rows = [codec.plan_step(s, [next(ids) for _ in s.items]) for s in steps]
        at = self._at(None)
        return await self._run(lambda c: planning.plan_advance_many(c, rows, at))

    async def plan_due(
        self,
        before: datetime,
        limit: int,
        slots: Sequence[tuple[int, int]] | None = None,
    ) -> DueBatch:
        bound = to_epoch_us(before)
        return await self._run(lambda c: planning.plan_due(c, bound, limit, slots))

    async def plan_cursor_ensure(
        self,
        streams: Sequence[tuple[str, str]],
        at: datetime | None = None,
        *,
        revive: bool = False,
    ) -> int:
        rows = [(job, scope, stream_slot(job, scope)) for job, scope in streams]
        moment = self._at(at)
        return await self._run(lambda c: planning.plan_cursor_ensure(c, rows, revive, moment))

    async def occurrence_claim(
        self,
        instance_id: str,
        tasks: Collection[str],
        limit: int,
        lease_ttl: timedelta,
        now: datetime | None = None,
        *,
        allow_only: bool = False,
    ) -> list[Occurrence]:
        at, ttl, names = self._at(now), _us(lease_ttl), list(tasks)
        return await self._run(
            lambda c: ops.occurrence_claim(c, instance_id, names, limit, ttl, at, allow_only)
        )

    async def lease_renew(
        self,
        instance_id: str,
        claims: Sequence[Claimed],
        lease_ttl: timedelta,
        now: datetime | None = None,
    ) -> Renewed:
        ttl, at = _us(lease_ttl), self._at(now)
        pairs = [(claim.id, claim.fencing_token) for claim in claims]
        return await self._run(lambda c: ops.lease_renew(c, instance_id, pairs, ttl, at))

    async def occurrence_cancel(
        self, occurrence_id: str, now: datetime | None = None
    ) -> tuple[Occurrence, bool] | None:
        at = self._at(now)
        return await self._run(lambda c: ops.occurrence_cancel(c, occurrence_id, at))

    async def occurrence_complete(
        self, instance_id: str, outcomes: Sequence[Outcome], now: datetime | None = None
    ) -> set[str]:
        at = self._at(now)
        rows: list[tuple[object, ...]] = []
        for outcome in outcomes:
            retry_at = outcome.retry_at
            rows.append(
                (
                    outcome.state.value,
                    to_epoch_us(retry_at) if retry_at is not None else None,
                    outcome.error_code,
                    outcome.error_message,
                    result_json(outcome.result),
                    outcome.id,
                    instance_id,
                    outcome.fencing_token,
                )
            )
        return await self._run(lambda c: ops.occurrence_complete(c, rows, at))

    async def lease_release(
        self, instance_id: str, claims: Sequence[Claimed], now: datetime | None = None
    ) -> set[str]:
        pairs = [(claim.id, claim.fencing_token) for claim in claims]
        at = self._at(now)
        return await self._run(lambda c: ops.lease_release(c, instance_id, pairs, at))

    async def occurrence_reap(self, now: datetime | None = None) -> list[Occurrence]:
        at = self._at(now)
        return await self._run(lambda c: ops.occurrence_reap(c, at))

    async def occurrence_next_due(
        self, tasks: Collection[str], now: datetime | None = None
    ) -> datetime | None:
        names = list(tasks)
        due = await self._run(lambda c: ops.occurrence_next_due(c, names))
        return from_epoch_us(due) if due is not None else None

    async def occurrence_attempts(self, occurrence_id: str) -> list[Attempt]:
        return await self._run(lambda c: ops.occurrence_attempts(c, occurrence_id))

    async def history_prune(
        self,
        before: datetime | None,
        keep: int | None,
        limit: int,
        *,
        dry_run: bool = False,
    ) -> int:
        cut = to_epoch_us(before) if before is not None else None
        return await self._run(lambda c: history.history_prune(c, cut, keep, limit, dry_run))

    async def occurrence_get(self, occurrence_id: str) -> Occurrence | None:
        return await self._run(lambda c: ops.occurrence_get(c, occurrence_id))

    async def occurrence_list(
        self,
        *,
        job: str | None = None,
        state: State | None = None,
        limit: int = 100,
    ) -> list[Occurrence]:
        state_value = state.value if state is not None else None
        return await self._run(lambda c: ops.occurrence_list(c, job, state_value, limit))

    async def occurrence_counts(self, now: datetime | None = None) -> OccurrenceCounts:
        at = self._now_us(now)
        pairs, due = await self._run(lambda c: ops.occurrence_counts(c, at))
        counts = {(row["job"], State(row["state"])): int(row["n"]) for row in pairs}
        return OccurrenceCounts(by_job_state=counts, due=due)

    # -- jobs -------------------------------------------------------------------------------
    async def job_upsert(self, records: Sequence[JobRecord]) -> None:
        rows, at = [codec.job_params(record) for record in records], self._at(None)
        await self._run(lambda c: ops.job_upsert(c, rows, at))

    async def job_add(self, record: JobRecord) -> None:
        row, at = codec.job_params(record), self._at(None)
        stream = (record.name, "", stream_slot(record.name, ""))
        if not await self._run(lambda c: ops.job_add(c, row, stream, at)):
            raise DuplicateJobError(f"a job named {record.name!r} already exists")

    async def job_get(self, name: str) -> JobRecord | None:
        return await self._run(lambda c: ops.job_get(c, name))

    async def job_list(self) -> list[JobRecord]:
        return await self._run(ops.job_list)

    async def job_delete(self, name: str) -> bool:
        return await self._run(lambda c: ops.job_delete(c, name))

    async def job_set_paused(self, name: str, paused: bool) -> bool:
        return await self._run(lambda c: ops.job_set_paused(c, name, paused))

    async def job_page(self, query: JobQuery) -> JobPage:
        """The capability ``pages_jobs``: one statement (see :mod:`.pages`)."""
        return await self._run(lambda c: pages.job_page(c, query))

    async def job_counts(self, prefix: str) -> JobCounts:
        end = prefix_end(prefix)
        return await self._run(lambda c: pages.job_counts(c, prefix, end))

    # -- leader election ----------------------------------------------------------------------
    async def leader_attempt_elect(
        self, name: str, instance_id: str, ttl: timedelta, now: datetime | None = None
    ) -> LeaderLease | None:
        ttl_us, at = _us(ttl), self._at(now)
        return await self._run(
            lambda c: coordination.leader_attempt_elect(c, name, instance_id, ttl_us, at)
        )

    async def leader_renew(
        self,
        name: str,
        instance_id: str,
        epoch: int,
        ttl: timedelta,
        now: datetime | None = None,
    ) -> LeaderLease | None:
        ttl_us, at = _us(ttl), self._at(now)
        return await self._run(
            lambda c: coordination.leader_renew(c, name, instance_id, epoch, ttl_us, at)
        )

    async def leader_resign(
        self, name: str, instance_id: str, epoch: int, now: datetime | None = None
    ) -> bool:
        at = self._at(now)
        return await self._run(
            lambda c: coordination.leader_resign(c, name, instance_id, epoch, at)
        )

    async def leader_get(self, name: str, now: datetime | None = None) -> LeaderLease | None:
        at = self._now_us(now)
        return await self._run(lambda c: coordination.leader_get(c, name, at))

    # -- planning partitions ----------------------------------------------------------------
    async def partition_sync(
        self,
        instance_id: str,
        want: Collection[int],
        ttl: timedelta,
        now: datetime | None = None,
    ) -> list[PartitionLease]:
        ttl_us, at = _us(ttl), self._at(now)
        return await self._run(
            lambda c: coordination.partition_sync(c, instance_id, want, ttl_us, at)
        )

    async def partition_list(self, now: datetime | None = None) -> list[PartitionLease]:
        at = self._now_us(now)
        return await self._run(lambda c: coordination.partition_list(c, at))

    # -- instances --------------------------------------------------------------------------
    async def instance_heartbeat(
        self, info: InstanceInfo, ttl: timedelta, now: datetime | None = None
    ) -> None:
        ttl_us, at = _us(ttl), self._at(now)
        params = codec.instance_params(info)
        await self._run(lambda c: coordination.instance_heartbeat(c, params, ttl_us, at))

    async def instance_list(self, now: datetime | None = None) -> list[InstanceInfo]:
        at = self._now_us(now)
        return await self._run(lambda c: coordination.instance_list(c, at))

    async def instance_remove(self, instance_id: str) -> None:
        await self._run(lambda c: coordination.instance_remove(c, instance_id))


def _us(ttl: timedelta) -> int:
    """A time to live in microseconds."""
    return ttl // timedelta(microseconds=1)


def _wal(conn: sqlite3.Connection, patience: float) -> Any:
    """``PRAGMA journal_mode = WAL``, tried again for up to ``patience`` seconds while
    another connection holds the file: switching a fresh file to WAL takes an exclusive
    lock, and SQLite answers "database is locked" at once there instead of waiting out the
    busy timeout (several instances opening one new file at once)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
