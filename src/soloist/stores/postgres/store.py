"""The asyncio face of the PostgreSQL store: one statement per call, on a pooled connection."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.pq import ExecStatus

from soloist.clock import Clock
from soloist.errors import DuplicateJobError, StoreError
from soloist.models import (
    CANCELLED_MESSAGE,
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
from soloist.stores.core import Capabilities
from soloist.stores.deadlines import Deadlines
from soloist.stores.existing import schema_problem
from soloist.stores.pages import (
    JobCounts,
    JobPage,
    JobQuery,
    JobView,
    LastOutcome,
    page_of,
    prefix_end,
)
from soloist.stores.postgres import codec, migrations, pages
from soloist.stores.postgres.connections import (
    INDEX_WALK,
    INDEX_WALK_END,
    ORDERED_WALK,
    ORDERED_WALK_END,
    Conn,
    Connections,
)
from soloist.stores.postgres.coordination import Coordination
from soloist.stores.postgres.counts import counts_of_sql
from soloist.stores.postgres.history import History
from soloist.stores.postgres.planning import Planning, step_rounds
from soloist.stores.postgres.queries import Queries
from soloist.stores.postgres.url import parse_url

__all__ = ["PostgresStore"]

Row = tuple[Any, ...]


class PostgresStore:
    """A :class:`soloist.stores.base.Store` in a PostgreSQL schema
    (``postgresql://user@host:port/db?schema=name``, also ``postgres://``).

    ``clock``: by default (None) the database's clock is the store's clock: ``now()`` reads
    it, and every method called with ``now=None`` uses it inside its statement. Give a
    clock only to move time by hand in tests; it then replaces the database's clock for
    those methods. ``schema``: the PostgreSQL schema holding this app's tables (default
    ``soloist``, or the URL's ``schema`` parameter), created by :meth:`migrate`.
    ``lease_ttl``: the lease TTL the driver's timeouts derive from (see
    :mod:`soloist.stores.deadlines`); None: no call deadline.

    Connections open lazily, a small pool per event loop. Cancelling a call does not undo
    a statement the server already ran: a claim lost that way is reaped when its lease
    expires.

    A driver: it trusts the checks of :class:`soloist.stores.core.CheckedStore`."""

    capabilities = Capabilities(
        notifies=True, inserts_at_now=True, checks_schema=True, pages_jobs=True, counts_jobs=True
    )

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        schema: str | None = None,
        lease_ttl: float | timedelta | None = None,
    ):
        self.url = url
        self.target = parse_url(url, schema)
        self.schema = self.target.schema
        #: The history bounds the pruner keeps (:class:`soloist.runtime.pruner.Pruner`).
        self.retention = self.target.retention
        self._clock = clock
        self._sql = Queries(self.schema)
        self._coord = Coordination(self.schema)
        self._plan = Planning(self.schema)
        self._history = History(self.schema)
        self._conns = Connections(self.target, deadlines=Deadlines.from_ttl(lease_ttl))

    def __repr__(self) -> str:
        return f"PostgresStore({self.target.display})"

    # -- plumbing ---------------------------------------------------------------------------
    async def _rows(self, query: str, params: dict[str, Any]) -> list[Row]:
        async def fetch(conn: Conn) -> list[Row]:
            cursor = await conn.execute(query, params)
            return await cursor.fetchall() if _returns_rows(cursor) else []

        with self._conns.translated():
            return await self._conns.using(fetch)

    async def _walk(
        self,
        query: str,
        params: dict[str, Any],
        setting: tuple[Sequence[str], Sequence[str]] = ((ORDERED_WALK,), (ORDERED_WALK_END,)),
    ) -> list[Row]:
        """Rows of a statement that must read an index in order and stop early (see
        ``connections.ORDERED_WALK``), pipelined with its settings into one round trip."""

        async def fetch(conn: Conn) -> list[Row]:
            async with conn.pipeline():
                for statement in setting[0]:
                    await conn.execute(statement)
                cursor = await conn.execute(query, params)
                for statement in setting[1]:
                    await conn.execute(statement)
            return await cursor.fetchall()

        with self._conns.translated():
            return await self._conns.using(fetch)

    async def _pipelined(self, statements: Sequence[tuple[str, dict[str, Any]]]) -> list[list[Row]]:
        """The rows of each statement, sent in one pipeline: one round trip, and one
        transaction (the implicit one of the pipeline's single sync point)."""

        async def fetch(conn: Conn) -> list[list[Row]]:
            async with conn.pipeline():
                cursors = [await conn.execute(query, params) for query, params in statements]
            return [await c.fetchall() if _returns_rows(c) else [] for c in cursors]

        with self._conns.translated():
            return await self._conns.using(fetch)

    async def _row(self, query: str, params: dict[str, Any]) -> Row | None:
        rows = await self._rows(query, params)
        return rows[0] if rows else None

    def _at(self, now: datetime | None) -> datetime | None:
        """The instant to pass as ``%(now)s``: None lets the database's clock decide."""
        if now is not None:
            return now
        return self._clock.now() if self._clock is not None else None

    # -- life cycle -------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        # A connection of its own, without the call deadline: a migration may build an
        # index on a large table, or wait for another instance's migration to end.
        with self._conns.translated():
            conn = await self._conns.connect()
            try:
                return await migrations.migrate(conn, self.schema, self._at(None))
            finally:
                await conn.close()

    async def schema_check(self) -> None:
        """The capability ``checks_schema``: one read of the schema's
        version table; a missing schema or table reads as no store."""
        with self._conns.translated():
            conn = await self._conns.connect()
            try:
                found = await migrations.schema_version(conn, self.schema)
            finally:
                await conn.close()
        problem = schema_problem(
            self.target.display,
            found,
            len(migrations.MIGRATIONS),
            f"schema {self.schema!r} has no soloist tables",
        )
        if problem is not None:
            raise problem

    async def close(self) -> None:
        await self._conns.close_all()

    async def now(self) -> datetime:
        if self._clock is not None:
            return self._clock.now()
        row = await self._row("SELECT clock_timestamp()", {})
        assert row is not None
        return codec.utc(row[0])

    # -- waking -----------------------------------------------------------------------------
    async def listen(self) -> None:
        """Start listening for wake-ups now (``work_wait`` does it on first use).
        Wake-ups sent from then on are kept until the next ``work_wait``."""
        with self._conns.translated():
            await self._conns.listener()

    async def work_wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for a wake-up: True when one arrived (during this
        call, or since the previous call), False when the time ran out.

        Any instance of the app wakes listeners (NOTIFY on channel ``soloist_<schema>``)
        when it makes occurrences claimable within ``queries.WAKE_HORIZON``: inserts and
        plans, retries, releases, reaped leases. Wake-ups queued while nobody waited are
        folded into one. True is also returned when this call had to (re)open the listening
        connection, since wake-ups sent without a listener are lost: the caller then looks
        for work as after any wake-up. One waiter at a time per store."""
        try:
            with self._conns.translated():
                conn, fresh = await self._conns.listener()
                if fresh:
                    return True
                woken = False
                async for _ in conn.notifies(timeout=max(0.0, timeout), stop_after=1):
                    woken = True
                if woken:
                    async for _ in conn.notifies(timeout=0):
                        pass  # fold the queued ones into this wake-up
                return woken
        except StoreError:
            self._conns.drop_listener()
            raise

    # -- occurrences ------------------------------------------------------------------------
    async def occurrence_insert(self, item: NewOccurrence) -> tuple[Occurrence, bool]:
        params = codec.insert_params(item)
        params.update(now=self._at(None), channel=self.target.channel)
        row = await self._row(self._sql.insert, params)
        if row is not None:
            return codec.occurrence(row), True
        return await self._existing(item.dedupe_key), False

    async def occurrence_insert_now(
        self, item: NewOccurrence, delay: timedelta = timedelta(0)
    ) -> tuple[Occurrence, bool]:
        """:meth:`occurrence_insert` with plan_time and due_at set to the store's now plus
        ``delay`` (those of ``item`` are ignored), in one statement: ``enqueue`` needs no
        separate round trip to read the database's clock (the capability
        ``inserts_at_now``)."""
        params = codec.insert_now_params(item, delay)
        params["now"], params["channel"] = self._at(None), self.target.channel
        row = await self._row(self._sql.insert_now, params)
        if row is not None:
            return codec.inserted(item, params, row[0], row[1]), True
        return await self._existing(item.dedupe_key), False

    async def _existing(self, dedupe_key: str) -> Occurrence:
        # A new statement sees a row that a concurrent insert committed meanwhile.
        row = await self._row(self._sql.get_by_key, {"key": dedupe_key})
        if row is None:
            raise StoreError(f"occurrence {dedupe_key!r} was neither inserted nor found")
        return codec.occurrence(row)

    async def occurrence_insert_many(self, items: Sequence[NewOccurrence]) -> int:
        params: dict[str, Any] = codec.items_params(items)
        params.update(now=self._at(None), channel=self.target.channel)
        row = await self._row(self._sql.insert_many, params)
        return int(row[0]) if row is not None else 0

    async def plan_cursor_get(self, job: str, scope: str) -> PlanCursor | None:
        row = await self._row(self._plan.cursor_get, {"job": job, "scope": scope})
        return codec.cursor(row) if row is not None else None

    async def plan_advance(self, advance: PlanAdvance) -> bool:
        return (await self.plan_advance_many([advance]))[0]

    async def plan_advance_many(self, steps: Sequence[PlanAdvance]) -> list[bool]:
        """One statement applies all the steps (see :mod:`.planning`); a batch naming a
        stream more than once takes one statement per round of distinct streams, all in
        one pipeline: one round trip, one transaction."""
        shared = {"now": self._at(None), "channel": self.target.channel}
        statements = [
            (self._plan.advance, {**codec.steps_params(steps, positions), **shared})
            for positions in step_rounds(steps)
        ]
        applied = [False] * len(steps)
        for rows in await self._pipelined(statements):
            for position in rows[0][0]:
                applied[position] = True
        return applied

    async def plan_due(
        self,
        before: datetime,
        limit: int,
        slots: Sequence[tuple[int, int]] | None = None,
    ) -> DueBatch:
        params: dict[str, Any] = {"before": before, "limit": limit}
        query = self._plan.due
        if slots is not None:
            params["slots"] = codec.slot_mask(slots)
            query = self._plan.due_in_slots
        rows = await self._walk(query, params, (INDEX_WALK, INDEX_WALK_END))
        return codec.due_batch(rows)

    async def plan_cursor_ensure(
        self,
        streams: Sequence[tuple[str, str]],
        at: datetime | None = None,
        *,
        revive: bool = False,
    ) -> int:
        pairs = sorted(set(streams))  # the order plan statements lock cursors in
        params = {
            "jobs": [job for job, _ in pairs],
            "scopes": [scope for _, scope in pairs],
            "slots": [stream_slot(job, scope) for job, scope in pairs],
            "at": at,
            "revive": revive,
            "now": self._at(None),
        }
        row = await self._row(self._plan.ensure, params)
        return int(row[0]) if row is not None else 0

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
        params = {
            "now": self._at(now),
            "tasks": list(tasks),
            "limit": limit,
            "instance": instance_id,
            "ttl": lease_ttl,
            "allow_only": allow_only,
        }
        return [codec.occurrence(row) for row in await self._walk(self._sql.claim, params)]

    async def lease_renew(
        self,
        instance_id: str,
        claims: Sequence[Claimed],
        lease_ttl: timedelta,
        now: datetime | None = None,
    ) -> Renewed:
        params = {
            "now": self._at(now),
            "ids": [claim.id for claim in claims],
            "tokens": [claim.fencing_token for claim in claims],
            "instance": instance_id,
            "ttl": lease_ttl,
        }
        rows = await self._rows(self._sql.renew, params)
        return Renewed([row[0] for row in rows], [row[0] for row in rows if row[1]])

    async def occurrence_cancel(
        self, occurrence_id: str, now: datetime | None = None
    ) -> tuple[Occurrence, bool] | None:
        params = {"now": self._at(now), "id": occurrence_id, "message": CANCELLED_MESSAGE}
        row = await self._row(self._sql.cancel, params)
        if row is not None:
            return codec.occurrence(row), True
        # Nothing to change (finished, or already requested): as it is now, if it exists.
        found = await self.occurrence_get(occurrence_id)
        return (found, False) if found is not None else None

    async def occurrence_complete(
        self, instance_id: str, outcomes: Sequence[Outcome], now: datetime | None = None
    ) -> set[str]:
        params: dict[str, Any] = codec.complete_params(outcomes)
        params.update(now=self._at(now), instance=instance_id, channel=self.target.channel)
        row = await self._row(self._sql.complete, params)
        return set(row[0]) if row is not None else set()

    async def lease_release(
        self, instance_id: str, claims: Sequence[Claimed], now: datetime | None = None
    ) -> set[str]:
        params = {
            "now": self._at(now),
            "ids": [claim.id for claim in claims],
            "tokens": [claim.fencing_token for claim in claims],
            "instance": instance_id,
            "channel": self.target.channel,
        }
        row = await self._row(self._sql.release, params)
        return set(row[0]) if row is not None else set()

    async def occurrence_reap(self, now: datetime | None = None) -> list[Occurrence]:
        params = {"now": self._at(now), "channel": self.target.channel}
        return [codec.occurrence(row) for row in await self._rows(self._sql.reap, params)]

    async def occurrence_next_due(
        self, tasks: Collection[str], now: datetime | None = None
    ) -> datetime | None:
        rows = await self._walk(self._sql.next_due, {"tasks": list(tasks)})
        return codec.utc(rows[0][0]) if rows else None

    async def occurrence_get(self, occurrence_id: str) -> Occurrence | None:
        row = await self._row(self._sql.get, {"id": occurrence_id})
        return codec.occurrence(row) if row is not None else None

    async def occurrence_list(
        self,
        *,
        job: str | None = None,
        state: State | None = None,
        limit: int = 100,
    ) -> list[Occurrence]:
        state_value = state.value if state is not None else None
        params = {"job": job, "state": state_value, "limit": limit}
        query = self._sql.list[(job is not None, state is not None)]
        return [codec.occurrence(row) for row in await self._rows(query, params)]

    async def occurrence_counts(self, now: datetime | None = None) -> OccurrenceCounts:
        rows = await self._rows(self._sql.counts, {"now": self._at(now)})
        counts = {(row[0], State(row[1])): int(row[2]) for row in rows}
        return OccurrenceCounts(by_job_state=counts, due=int(rows[0][3]) if rows else 0)

    async def occurrence_counts_of(
        self, jobs: Sequence[str], now: datetime | None
    ) -> OccurrenceCounts:
        """The capability ``counts_jobs``: one statement (see :mod:`.counts`)."""
        rows = await self._rows(
            counts_of_sql(self.schema), {"jobs": list(jobs), "now": self._at(now)}
        )
        named: dict[tuple[str, State], int] = {}
        total: dict[State, int] = {}
        for job, state, n, _ in rows:
            if job is None:
                total[State(state)] = int(n)
            else:
                named[(job, State(state))] = int(n)
        for (_, state), n in named.items():
            total[state] -= n
        others = {state: n for state, n in total.items() if n > 0}
        return OccurrenceCounts(named, int(rows[0][3]) if rows else 0, others)

    async def occurrence_attempts(self, occurrence_id: str) -> list[Attempt]:
        rows = await self._rows(self._sql.attempts, {"id": occurrence_id})
        return [codec.attempt(row) for row in rows]

    async def history_prune(
        self,
        before: datetime | None,
        keep: int | None,
        limit: int,
        *,
        dry_run: bool = False,
    ) -> int:
        query = self._history.count if dry_run else self._history.prune
        row = await self._row(query, {"before": before, "keep": keep, "limit": limit})
        return int(row[0]) if row is not None else 0

    # -- jobs -------------------------------------------------------------------------------
    async def job_upsert(self, records: Sequence[JobRecord]) -> None:
        params: dict[str, Any] = {**codec.jobs_params(records), "now": self._at(None)}
        await self._rows(self._sql.job_upsert, params)

    async def job_add(self, record: JobRecord) -> None:
        params: dict[str, Any] = {
            **codec.jobs_params([record]),
            "slot": stream_slot(record.name, ""),
            "now": self._at(None),
        }
        if await self._row(self._sql.job_add, params) is None:
            raise DuplicateJobError(f"a job named {record.name!r} already exists")
        await self._schedules_changed()

    async def job_get(self, name: str) -> JobRecord | None:
        row = await self._row(self._sql.job_get, {"name": name})
        return codec.job(row) if row is not None else None

    async def job_list(self) -> list[JobRecord]:
        return [codec.job(row) for row in await self._rows(self._sql.job_list, {})]

    async def job_delete(self, name: str) -> bool:
        return await self._row(self._sql.job_delete, {"name": name}) is not None

    async def job_set_paused(self, name: str, paused: bool) -> bool:
        params = {"name": name, "paused": paused}
        found = await self._row(self._sql.job_set_paused, params) is not None
        if found and not paused:
            await self._schedules_changed()
        return found

    async def job_page(self, query: JobQuery) -> JobPage:
        """The capability ``pages_jobs``: one statement (see :mod:`.pages`)."""
        key, params = pages.page_params(query)
        rows = await self._rows(pages.page_sql(self.schema, *key), params)
        examined, last_examined = int(rows[0][0]), rows[0][1]
        matches = [
            JobView(codec.job(row[2:10]), _last(row[10:15])) for row in rows if row[2] is not None
        ]
        return page_of(matches, query, examined > query.scan, last_examined)

    async def job_counts(self, prefix: str) -> JobCounts:
        end = prefix_end(prefix)
        row = await self._row(
            pages.count_sql(self.schema, end is not None), {"start": prefix, "end": end}
        )
        assert row is not None
        return JobCounts(int(row[0]), int(row[1]))

    async def _schedules_changed(self) -> None:
        """Wake listening instances: a new or resumed schedule may be due at once (their
        planners would otherwise see it only at their next refresh)."""
        await self._row(
            "SELECT pg_notify(%(channel)s, 'schedule')", {"channel": self.target.channel}
        )

    # -- leader election ----------------------------------------------------------------------
    async def leader_attempt_elect(
        self, name: str, instance_id: str, ttl: timedelta, now: datetime | None = None
    ) -> LeaderLease | None:
        params = {"name": name, "instance": instance_id, "ttl": ttl}
        row = await self._row(self._coord.leader_elect, {**params, "now": self._at(now)})
        return codec.leader_lease(row) if row is not None else None

    async def leader_renew(
        self,
        name: str,
        instance_id: str,
        epoch: int,
        ttl: timedelta,
        now: datetime | None = None,
    ) -> LeaderLease | None:
        params = {"name": name, "instance": instance_id, "epoch": epoch, "ttl": ttl}
        row = await self._row(self._coord.leader_renew, {**params, "now": self._at(now)})
        return codec.leader_lease(row) if row is not None else None

    async def leader_resign(
        self, name: str, instance_id: str, epoch: int, now: datetime | None = None
    ) -> bool:
        params = {"name": name, "instance": instance_id, "epoch": epoch, "now": self._at(now)}
        return await self._row(self._coord.leader_resign, params) is not None

    async def leader_get(self, name: str, now: datetime | None = None) -> LeaderLease | None:
        row = await self._row(self._coord.leader_get, {"name": name, "now": self._at(now)})
        return codec.leader_lease(row) if row is not None else None

    # -- planning partitions ----------------------------------------------------------------
    async def partition_sync(
        self,
        instance_id: str,
        want: Collection[int],
        ttl: timedelta,
        now: datetime | None = None,
    ) -> list[PartitionLease]:
        """The sync statement, then the leases read back, pipelined: one round trip and one
        transaction (a statement does not see its own writes)."""
        at = self._at(now)
        params = {"instance": instance_id, "want": list(want), "ttl": ttl, "now": at}
        _, rows = await self._pipelined(
            [(self._coord.partition_sync, params), (self._coord.partition_list, {"now": at})]
        )
        return [codec.partition_lease(row) for row in rows]

    async def partition_list(self, now: datetime | None = None) -> list[PartitionLease]:
        rows = await self._rows(self._coord.partition_list, {"now": self._at(now)})
        return [codec.partition_lease(row) for row in rows]

    # -- instances --------------------------------------------------------------------------
    async def instance_heartbeat(
        self, info: InstanceInfo, ttl: timedelta, now: datetime | None = None
    ) -> None:
        params = codec.instance_params(info)
        params.update(ttl=ttl, now=self._at(now))
        await self._rows(self._coord.instance_heartbeat, params)

    async def instance_list(self, now: datetime | None = None) -> list[InstanceInfo]:
        rows = await self._rows(self._coord.instance_list, {"now": self._at(now)})
        return [codec.instance(row) for row in rows]

    async def instance_remove(self, instance_id: str) -> None:
        await self._rows(self._coord.instance_remove, {"instance": instance_id})


def _last(row: Row) -> LastOutcome | None:
    """A job's last outcome from its page row's ``last_*`` columns (None: it has none)."""
    if row[0] is None:
        return None
    return LastOutcome(row[0], State(row[1]), codec.utc(row[2]), codec.utc(row[3]), row[4])


def _returns_rows(cursor: psycopg.AsyncCursor[Row]) -> bool:
    """Whether the cursor's statement returned rows (``cursor.description is not None``,
    without building a Column object per result column on every call)."""
    result = cursor.pgresult
    return result is not None and (bool(result.nfields) or result.status == _TUPLES_OK)


_TUPLES_OK = ExecStatus.TUPLES_OK
