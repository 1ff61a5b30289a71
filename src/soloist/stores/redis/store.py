"""The asyncio face of the Redis store: one script (or one command) per call."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from soloist.clock import Clock
from soloist.errors import DuplicateJobError, StoreDataLostError, StoreError
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
from soloist.stores.redis import codec
from soloist.stores.redis.connections import Connections
from soloist.stores.redis.upgrade import index_finished, upgrade_cursors
from soloist.stores.redis.url import parse_url
from soloist.stores.urls import Retention

__all__ = ["SCHEMA_VERSION", "RedisStore"]

#: The layout of keys this code reads and writes; ``migrate`` refuses a newer one and
#: upgrades an older one. 2: the planning index (``:plan``), cursors ``last|count|next|slot``
#: and partition leases. 3: each job's finished occurrences (``:fin:<job>``), for its last
#: outcome.
SCHEMA_VERSION = 3
_US = timedelta(microseconds=1)
#: Seconds a wait may spend (re)subscribing, however short its timeout: a healthy server
#: confirms at once, a busy machine may take a moment.
SUBSCRIBE_FLOOR = 1.0


class RedisStore:
    """A :class:`soloist.stores.base.Store` in Redis (``redis://host:port/db?prefix=app``,
    also ``rediss://``); see :mod:`soloist.stores.redis` for the data model.

    ``clock``: by default (None) the Redis server's ``TIME`` is the store's clock, read
    inside each script. Give a clock only to move time by hand in tests; it then replaces
    the server's clock for methods called with ``now=None``. ``lease_ttl``: the lease TTL
    the driver's timeouts derive from (see :mod:`soloist.stores.deadlines`).

    A driver: it trusts the checks of :class:`soloist.stores.core.CheckedStore`."""

    capabilities = Capabilities(
        notifies=True, inserts_at_now=True, checks_schema=True, pages_jobs=True, counts_jobs=True
    )

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        lease_ttl: float | timedelta | None = None,
    ) -> None:
        self.url = url
        deadlines = Deadlines.from_ttl(lease_ttl)
        self.target = parse_url(url).bounded(deadlines)
        self.prefix = self.target.prefix
        self._clock = clock
        self._conns = Connections(self.target, deadlines=deadlines)
        hmax = self.target.history_max
        age = self.target.history_age
        self._common = [self.target.base, "", str(hmax), str(age // _US if age else 0)]
        #: The history bounds (also kept by every finishing script); the pruner calls
        #: :meth:`history_prune` with them too, so that an idle store is trimmed by age.
        self.retention = Retention(hmax, age)
        #: The identity ``{prefix}:identity`` had when this store last set it up
        #: (:meth:`migrate`); None before. Heartbeats and leader elections check it.
        self.identity: str | None = None

    def __repr__(self) -> str:
        return f"RedisStore({self.target.display})"

    # -- plumbing ---------------------------------------------------------------------------
    def _at(self, now: datetime | None) -> str:
        """The instant for a script: the caller's, the given clock's, or '' (server TIME)."""
        if now is not None:
            return codec.us_text(now)
        return codec.us_text(self._clock.now()) if self._clock is not None else ""

    async def _run(self, name: str, now: str, args: Sequence[object]) -> Any:
        common = list(self._common)
        common[1] = now
        with self._conns.translated():
            return await self._conns.run(name, [*common, *args])

    def _client(self) -> Any:
        """The running loop's client (typed Any: redis-py's types mix sync and async)."""
        return self._conns.client()

    def _key(self, *parts: str) -> str:
        return ":".join((self.target.base, *parts))

    # -- life cycle -------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        """Redis has no schema; this checks the server and the key layout version (stored
        at ``{prefix}:schema``, refused if newer than this code's, upgraded if older: see
        :mod:`soloist.stores.redis.upgrade`), writes the store's identity unless it exists
        (see :meth:`_identify`) and loads the scripts. Applied: the layout versions up to
        this code's, from none for a new prefix."""
        with self._conns.translated():
            client = self._client()
            info = await client.info("server")
            version = str(info.get("redis_version", "0"))
            if tuple(int(p) for p in version.split(".")[:2] if p.isdigit()) < (5, 0):
                raise StoreError(
                    f"Redis store {self.target.display}: server {version} is too old, "
                    "soloist needs Redis 5.0 or newer (scripts replicated by effects)"
                )
            key = self._key("schema")
            created = await client.set(key, SCHEMA_VERSION, nx=True)
            stored = 0 if created else int(await client.get(key) or 0)
            if stored > SCHEMA_VERSION:
                raise StoreError(
                    f"Redis store {self.target.display} has key layout version {stored}, "
                    f"newer than this soloist's {SCHEMA_VERSION}: upgrade soloist"
                )
            await self._identify(client)
            await self._conns.load_scripts()
            if 0 < stored < 2:
                await upgrade_cursors(client, self.target.base, self._upgrade)
            if 0 < stored < 3:
                await index_finished(self._index_finished)
            if 0 < stored < SCHEMA_VERSION:
                await client.set(key, SCHEMA_VERSION)
            return list(range(stored + 1, SCHEMA_VERSION + 1))

    async def _upgrade(self, args: list[object]) -> int:
        """plan.lua's 'upgrade' of one batch of cursors (see :func:`upgrade_cursors`)."""
        return int(await self._run("plan", self._at(None), ["upgrade", *args]))

    async def _index_finished(self, first: int, count: int) -> int:
        """pages.lua's 'index' of one batch of the history (see :func:`index_finished`)."""
        return int(await self._run("pages", self._at(None), ["index", first, count]))

    async def schema_check(self) -> None:
        """The capability ``checks_schema``: reads ``{prefix}:schema``
        (written by :meth:`migrate`); a prefix without it holds no store."""
        with self._conns.translated():
            stored = await self._client().get(self._key("schema"))
        problem = schema_problem(
            self.target.display,
            int(stored or 0),
            SCHEMA_VERSION,
            f"key {self._key('schema')} does not exist",
        )
        if problem is not None:
            raise problem

    async def _identify(self, client: Any) -> None:
        """Write ``{prefix}:identity`` (server time in microseconds, ``-``, a random id)
        unless it exists, and remember it. The instance heartbeat and the leader scripts
        compare it with the one remembered: a server restarted without persistence, or
        flushed, has lost it (and everything else), and :class:`StoreDataLostError` says
        so instead of a lost lease. Another instance that set the store up again wrote a
        new one: that is a loss too, for every instance that knew the old one."""
        key = self._key("identity")
        for _ in range(3):  # a flush between SET and GET: write again
            seconds, micros = await client.time()
            fresh = f"{int(seconds) * 1_000_000 + int(micros)}-{secrets.token_hex(8)}"
            await client.set(key, fresh, nx=True)
            found = await client.get(key)
            if found is not None:
                self.identity = str(found)
                return
        raise StoreError(f"Redis store {self.target.display}: its identity key keeps vanishing")

    def _data_lost(self, found: str) -> StoreDataLostError:
        """The error for a script that found identity ``found`` ('' for none) instead of
        :attr:`identity`."""
        expected = self.identity or ""
        if found:
            cause = (
                f"identity key changed from {expected} to {found}: another instance set "
                "the store up again after it was restarted without persistence or flushed"
            )
        else:
            cause = "identity key missing: restarted without persistence or flushed"
        return StoreDataLostError(
            f"the Redis store at {self.target.display} lost its data ({cause}); jobs, "
            "schedules, cursors and history written before are gone",
            expected=expected,
            found=found or None,
        )

    async def close(self) -> None:
        await self._conns.close_all()

    async def now(self) -> datetime:
        if self._clock is not None:
            return self._clock.now()
        with self._conns.translated():
            seconds, micros = await self._client().time()
        return codec.from_us(int(seconds) * 1_000_000 + int(micros))

    async def listen(self) -> None:
        """Subscribe to wake-ups now (``work_wait`` does it on first use): wake-ups
        published from then on are kept until the next ``work_wait``."""
        try:
            with self._conns.translated():
                await self._conns.subscription()
        except BaseException:
            self._conns.drop_subscription()
            raise

    async def work_wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for a wake-up published on ``{prefix}:wake`` by a
        script that made work due within a minute (insert, plan, retry, release, reap, a
        new or resumed job): True when one arrived, False when the time ran out. Wake-ups
        received since the previous call count, folded into one. True is also returned when
        this call had to (re)subscribe, since wake-ups sent meanwhile were lost; a server
        that does not confirm the subscription within ``max(timeout, 1 s)`` raises
        StoreUnavailableError. Cancelling is safe: the subscription is dropped and made
        again by the next call."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        try:
            with self._conns.translated():
                limit = max(timeout, SUBSCRIBE_FLOOR)
                pubsub, fresh = await self._conns.subscription(limit)
                if fresh:
                    return True
                woken = False
                while not woken:
                    left = deadline - loop.time()
                    message = await self._conns.wake_message(pubsub, max(0.0, left))
                    woken = message is not None and message.get("type") == "message"
                    if not woken and left <= 0:
                        return False
                while await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.0):
                    pass  # fold the queued ones into this wake-up
                return True
        except BaseException:
            self._conns.drop_subscription()
            raise

    # -- occurrences ------------------------------------------------------------------------
    async def occurrence_insert(self, item: NewOccurrence) -> tuple[Occurrence, bool]:
        args = codec.item_args([item])
        created, rows = await self._run("insert", self._at(None), ["one", *args])
        return codec.occurrences(rows)[0], bool(created)

    async def occurrence_insert_now(
        self, item: NewOccurrence, delay: timedelta = timedelta(0)
    ) -> tuple[Occurrence, bool]:
        """:meth:`occurrence_insert` with plan_time and due_at set to the store's now (the
        script's: server ``TIME``, or the test clock) plus ``delay``, those of ``item``
        ignored, in one script call: ``enqueue`` needs no separate round trip to read the
        clock (the capability ``inserts_at_now``)."""
        args = codec.item_now_args(item, delay)
        reply = await self._run("insert", self._at(None), ["now", *args])
        if reply[0]:
            return codec.inserted(item, args, reply[1], reply[2]), True
        return codec.occurrences(reply[1])[0], False

    async def occurrence_insert_many(self, items: Sequence[NewOccurrence]) -> int:
        args = codec.item_args(items)
        return int(await self._run("insert", self._at(None), ["many", *args]))

    async def plan_cursor_get(self, job: str, scope: str) -> PlanCursor | None:
        with self._conns.translated():
            text = await self._client().hget(self._key("cur", job), scope)
        return codec.cursor(job, scope, text) if text is not None else None

    async def plan_advance(self, advance: PlanAdvance) -> bool:
        return (await self.plan_advance_many([advance]))[0]

    async def plan_advance_many(self, steps: Sequence[PlanAdvance]) -> list[bool]:
        """One script call for every step (plan.lua, 'advance'), each step atomic on its
        own: its fence, cursor compare-and-set, index entry and inserts."""
        applied = await self._run("plan", self._at(None), ["advance", *codec.step_args(steps)])
        return [bool(flag) for flag in applied]

    async def plan_due(
        self,
        before: datetime,
        limit: int,
        slots: Sequence[tuple[int, int]] | None = None,
    ) -> DueBatch:
        """One script call over the sorted set ``:plan`` (plan.lua, 'due'): the cost is
        that of the due streams, plus the members of other slots skipped among them (at
        most 5000 per call; past that the call answers what it found, with ``next_at``
        where it stopped, so the caller looks again then)."""
        ranges = [bound for pair in slots or () for bound in pair]
        args = ["due", codec.us_text(before), limit, *ranges]
        return codec.due_batch(await self._run("plan", self._at(None), args))

    async def plan_cursor_ensure(
        self,
        streams: Sequence[tuple[str, str]],
        at: datetime | None = None,
        *,
        revive: bool = False,
    ) -> int:
        moment = codec.us_text(at) if at is not None else ""
        args = ["ensure", moment, "1" if revive else "0", *codec.stream_args(streams)]
        return int(await self._run("plan", self._at(None), args))

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
        args = [instance_id, limit, lease_ttl // _US, "1" if allow_only else "0", *tasks]
        return codec.occurrences(await self._run("claim", self._at(now), args))

    async def _runner(
        self, op: str, instance_id: str, now: datetime | None, args: list[Any]
    ) -> set[str]:
        return set(await self._run("runner", self._at(now), [op, instance_id, *args]))

    async def lease_renew(
        self,
        instance_id: str,
        claims: Sequence[Claimed],
        lease_ttl: timedelta,
        now: datetime | None = None,
    ) -> Renewed:
        ttl = lease_ttl // _US
        args = ["renew", instance_id, ttl, *_pairs(claims)]
        ids: list[str] = await self._run("runner", self._at(now), args)
        # A renewed id whose cancellation was requested comes as '!' + id.
        return Renewed(
            [i[1:] if i[:1] == "!" else i for i in ids], [i[1:] for i in ids if i[:1] == "!"]
        )

    async def occurrence_cancel(
        self, occurrence_id: str, now: datetime | None = None
    ) -> tuple[Occurrence, bool] | None:
        args = ["cancel", "", occurrence_id, CANCELLED_MESSAGE]
        reply = await self._run("runner", self._at(now), args)
        if not reply:
            return None
        changed, text = reply
        (occ,) = codec.occurrences(text)
        return occ, bool(int(changed))

    async def occurrence_complete(
        self, instance_id: str, outcomes: Sequence[Outcome], now: datetime | None = None
    ) -> set[str]:
        args = codec.outcome_args(outcomes)
        return await self._runner("complete", instance_id, now, args)

    async def lease_release(
        self, instance_id: str, claims: Sequence[Claimed], now: datetime | None = None
    ) -> set[str]:
        return await self._runner("release", instance_id, now, _pairs(claims))

    async def occurrence_reap(self, now: datetime | None = None) -> list[Occurrence]:
        return codec.occurrences(await self._run("reap", self._at(now), []))

    async def occurrence_next_due(
        self, tasks: Collection[str], now: datetime | None = None
    ) -> datetime | None:
        due = await self._run("read", self._at(now), ["next_due", *tasks])
        return codec.from_us(due) if due is not None else None

    async def occurrence_get(self, occurrence_id: str) -> Occurrence | None:
        with self._conns.translated():
            key = self._key("o", occurrence_id)
            row = await self._client().hmget(key, codec.FIELDS)
        return codec.occurrence(row) if row[0] is not None else None

    async def occurrence_list(
        self,
        *,
        job: str | None = None,
        state: State | None = None,
        limit: int = 100,
    ) -> list[Occurrence]:
        state_value = state.value if state is not None else ""
        args = ["list", job if job is not None else "", state_value, limit]
        return codec.occurrences(await self._run("read", self._at(None), args))

    async def occurrence_counts(self, now: datetime | None = None) -> OccurrenceCounts:
        flat, due = await self._run("read", self._at(now), ["counts"])
        counts: dict[tuple[str, State], int] = {}
        for field, value in zip(flat[::2], flat[1::2], strict=True):
            job, _, state = str(field).rpartition("\0")
            if int(value) > 0:
                counts[(job, State(state))] = int(value)
        return OccurrenceCounts(by_job_state=counts, due=int(due))

    async def occurrence_counts_of(
        self, jobs: Sequence[str], now: datetime | None
    ) -> OccurrenceCounts:
        """The capability ``counts_jobs``: one script call reading the state indexes'
        sizes and the named jobs' counters (``lua/read.lua``)."""
        states = [state.value for state in State]
        args = ["counts_of", len(states), *states, *jobs]
        flat, totals, due = await self._run("read", self._at(now), args)
        named: dict[tuple[str, State], int] = {}
        for field, value in zip(flat[::2], flat[1::2], strict=True):
            job, _, state = str(field).rpartition("\0")
            named[(job, State(state))] = int(value)
        others = {State(str(s)): int(n) for s, n in zip(totals[::2], totals[1::2], strict=True)}
        for (_, state), n in named.items():
            others[state] -= n
        others = {state: n for state, n in others.items() if n > 0}
        return OccurrenceCounts(named, int(due), others)

    async def occurrence_attempts(self, occurrence_id: str) -> list[Attempt]:
        with self._conns.translated():
            texts = await self._client().lrange(self._key("a", occurrence_id), 0, -1)
        return [codec.attempt(occurrence_id, text) for text in texts]

    async def history_prune(
        self,
        before: datetime | None,
        keep: int | None,
        limit: int,
        *,
        dry_run: bool = False,
    ) -> int:
        """See the protocol; the same trimming as every finishing script's (by the URL's
        bounds), with the bounds given (``lua/prune.lua``)."""
        args = [
            codec.us_text(before) if before is not None else "",
            str(keep) if keep is not None else "",
            str(limit),
            "1" if dry_run else "0",
        ]
        return int(await self._run("prune", self._at(None), args))

    # -- jobs -------------------------------------------------------------------------------
    async def job_upsert(self, records: Sequence[JobRecord]) -> None:
        args = [arg for record in records for arg in codec.job_args(record)]
        await self._run("jobs", self._at(None), ["upsert", *args])

    async def job_add(self, record: JobRecord) -> None:
        args = ["add", *codec.job_args(record), stream_slot(record.name, "")]
        if not await self._run("jobs", self._at(None), args):
            raise DuplicateJobError(f"a job named {record.name!r} already exists")

    async def job_get(self, name: str) -> JobRecord | None:
        fields = ("task", "schedule", "payload", "metadata", "dynamic", "paused", "created")
        with self._conns.translated():
            row = await self._client().hmget(self._key("j", name), fields)
        return codec.job(name, row) if row[0] is not None else None

    async def job_list(self) -> list[JobRecord]:
        rows = await self._run("jobs", self._at(None), ["list"])
        return [codec.job(name, fields) for name, fields in rows]

    async def job_delete(self, name: str) -> bool:
        return bool(await self._run("jobs", self._at(None), ["delete", name]))

    async def job_set_paused(self, name: str, paused: bool) -> bool:
        flag = "1" if paused else "0"
        return bool(await self._run("jobs", self._at(None), ["pause", name, flag]))

    async def job_page(self, query: JobQuery) -> JobPage:
        """The capability ``pages_jobs``: one script call (``lua/pages.lua``)."""
        low, high = _lex_range(query.start, query.end)
        paused = "" if query.paused is None else "1" if query.paused else "0"
        args = ["page", low, high, query.scan, paused, query.outcome or "", query.limit + 1]
        read, last_examined, text = await self._run("pages", self._at(None), args)
        matches = [
            JobView(codec.job(name, [f if f is not False else None for f in fields]), _last(last))
            for name, fields, last in json.loads(text)
        ]
        return page_of(matches, query, int(read) > query.scan, last_examined or None)

    async def job_counts(self, prefix: str) -> JobCounts:
        """The number of jobs from the name index (``ZLEXCOUNT``); paused ones are not
        counted (that would read every job)."""
        low, high = _lex_range((prefix, True), prefix_end(prefix))
        return JobCounts(int(await self._run("pages", self._at(None), ["counts", low, high])), None)

    # -- leader election ----------------------------------------------------------------------
    async def _leader(
        self,
        op: str,
        name: str,
        now: datetime | None,
        instance: str = "",
        epoch: int = 0,
        ttl: timedelta | None = None,
    ) -> Any:
        ttl_us = ttl // _US if ttl is not None else 0
        args = [op, name, instance, epoch, ttl_us, self.identity or ""]
        row = await self._run("leader", self._at(now), args)
        if isinstance(row, str):  # elect and renew: the identity found instead of ours
            raise self._data_lost(row)
        return row

    async def leader_attempt_elect(
        self, name: str, instance_id: str, ttl: timedelta, now: datetime | None = None
    ) -> LeaderLease | None:
        row = await self._leader("elect", name, now, instance_id, ttl=ttl)
        return codec.leader_lease(name, row) if row else None

    async def leader_renew(
        self,
        name: str,
        instance_id: str,
        epoch: int,
        ttl: timedelta,
        now: datetime | None = None,
    ) -> LeaderLease | None:
        row = await self._leader("renew", name, now, instance_id, epoch, ttl)
        return codec.leader_lease(name, row) if row else None

    async def leader_resign(
        self, name: str, instance_id: str, epoch: int, now: datetime | None = None
    ) -> bool:
        return bool(await self._leader("resign", name, now, instance_id, epoch))

    async def leader_get(self, name: str, now: datetime | None = None) -> LeaderLease | None:
        row = await self._leader("get", name, now)
        return codec.leader_lease(name, row) if row else None

    # -- planning partitions ----------------------------------------------------------------
    async def partition_sync(
        self,
        instance_id: str,
        want: Collection[int],
        ttl: timedelta,
        now: datetime | None = None,
    ) -> list[PartitionLease]:
        args = ["sync", instance_id, ttl // _US, *want]
        return codec.partition_leases(await self._run("partitions", self._at(now), args))

    async def partition_list(self, now: datetime | None = None) -> list[PartitionLease]:
        return codec.partition_leases(await self._run("partitions", self._at(now), ["list"]))

    # -- instances --------------------------------------------------------------------------
    async def instance_heartbeat(
        self, info: InstanceInfo, ttl: timedelta, now: datetime | None = None
    ) -> None:
        ttl_us = ttl // _US
        args = ["beat", *codec.instance_args(info), ttl_us, self.identity or ""]
        reply = await self._run("instances", self._at(now), args)
        if isinstance(reply, str):  # the identity found instead of ours
            raise self._data_lost(reply)

    async def instance_list(self, now: datetime | None = None) -> list[InstanceInfo]:
        rows = await self._run("instances", self._at(now), ["list"])
        return sorted((codec.instance(row) for row in rows), key=lambda i: i.instance_id)

    async def instance_remove(self, instance_id: str) -> None:
        await self._run("instances", self._at(None), ["remove", instance_id])


def _lex_range(start: tuple[str, bool], end: str | None) -> tuple[str, str]:
    """``ZRANGEBYLEX`` bounds of the names from ``start`` (name, inclusive) to ``end``
    (exclusive; None: no end). Redis compares the names' bytes: their code point order."""
    name, inclusive = start
    low = "-" if name == "" and inclusive else ("[" if inclusive else "(") + name
    return low, "+" if end is None else "(" + end


def _last(found: list[str | bool] | bool) -> LastOutcome | None:
    """A last outcome from pages.lua's ``[id, state, plan, finished, error code]``."""
    if not isinstance(found, list):
        return None
    occ_id, state, plan, finished, code = (v if v is not False else None for v in found)
    assert isinstance(occ_id, str) and isinstance(state, str) and isinstance(plan, str)
    return LastOutcome(
        occ_id,
        State(state),
        codec.from_us(plan),
        codec.from_us(finished) if isinstance(finished, str) else None,
        code if isinstance(code, str) else None,
    )


def _pairs(claims: Sequence[Claimed]) -> list[str]:
    return [value for c in claims for value in (c.id, str(c.fencing_token))]
