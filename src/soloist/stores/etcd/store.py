"""The etcd store: reads, decisions in Python, and transactions that apply only while what
was read is unchanged (``mod_revision`` compares). See the package docstring for the keys."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from soloist.clock import Clock
from soloist.errors import DuplicateJobError, PayloadError, StoreError, StoreUnavailableError
from soloist.models import (
    CLAIMABLE_STATES,
    RELEASED,
    Attempt,
    Claimed,
    DueBatch,
    DueStream,
    InstanceInfo,
    JobRecord,
    LeaderLease,
    NewOccurrence,
    Occurrence,
    OccurrenceCounts,
    Outcome,
    Overlap,
    PartitionLease,
    PlanAdvance,
    PlanCursor,
    Renewed,
    State,
    stream_slot,
)
from soloist.stores import rows
from soloist.stores.core import Capabilities
from soloist.stores.deadlines import Deadlines
from soloist.stores.etcd import codec, pages
from soloist.stores.etcd.connections import Connections, ServerClock, prefix_end
from soloist.stores.etcd.ops import (
    MAX_OPS,
    Unit,
    absent,
    delete,
    get,
    mod_is,
    pack,
    unchanged_since,
    value_is,
)
from soloist.stores.etcd.url import parse_url
from soloist.stores.existing import schema_problem
from soloist.stores.pages import JobCounts, JobPage, JobQuery
from soloist.stores.urls import Retention

__all__ = ["SCHEMA_VERSION", "EtcdStore"]

#: The key layout; ``migrate`` refuses a newer one and upgrades an older one. 2: each job's
#: finished occurrences (``f/``, for its last outcome), and the job in each ``h/`` value.
SCHEMA_VERSION = 2
#: A payload (or result) larger than this is refused: an occurrence is stored twice while
#: it waits (its record and its queue entry), and an etcd request holds at most 1.5 MiB.
MAX_VALUE_BYTES = 512 * 1024
#: Keys read per request when walking a range.
PAGE = 500
#: Index entries looked at past the due ones to find the next due time of given slots.
NEXT_SCAN = 5000
#: Finished occurrences deleted per history trim.
TRIM_BATCH = 200
#: Items, and bytes (each occurrence is stored twice while it waits), of one plan write.
STEP_ITEMS = 64
STEP_BYTES = 900_000
#: Read-and-write rounds of one claim while other claimers take its candidates first.
CLAIM_ROUNDS = 100
#: Candidates a claim passes over (held back by a running sibling) before it gives up.
MAX_BLOCKED = 1000
#: Rounds of a runner's writes (renewal, outcome, release, reap) refused by another write
#: to the same occurrence meanwhile, each read and decided again.
UPDATE_ROUNDS = 10
_TERMINAL = (State.SUCCEEDED, State.DEAD, State.SKIPPED)


class EtcdStore:
    """A :class:`soloist.stores.base.Store` on etcd v3 (``etcd://host:2379?prefix=app``).

    Every time the store writes or compares is on the clock of the etcd member
    (:class:`~soloist.stores.etcd.connections.ServerClock`), unless a ``clock`` is given
    (tests move time by hand with one). Elections, partition leases and instance records
    also live on etcd leases, kept alive by their renewals: a holder that stops renewing
    loses its key when the lease runs out on the members.

    A driver: it trusts the checks of :class:`soloist.stores.core.CheckedStore`."""

    capabilities = Capabilities(notifies=True, checks_schema=True, pages_jobs=True)

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        lease_ttl: float | timedelta | None = None,
    ) -> None:
        self.url = url
        self.target = parse_url(url)
        #: The history bounds (also kept after every finishing write); the pruner calls
        #: :meth:`history_prune` with them too, so that an idle store is trimmed by age.
        self.retention = Retention(self.target.history_max, self.target.history_age)
        self._base = self.target.base
        self._clock = clock
        self._server = ServerClock(self.target)
        self._conns = Connections(self.target, Deadlines.from_ttl(lease_ttl))
        #: etcd leases of this store by TTL in seconds (elections, partitions, instances).
        self._leases: dict[int, int] = {}
        self._lease_lock: asyncio.Lock | None = None
        self._watch: asyncio.Task[None] | None = None
        self._woken: asyncio.Event | None = None
        self._fresh = False
        self._trim: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"EtcdStore({self.target.display})"

    # -- plumbing ---------------------------------------------------------------------------
    def _key(self, kind: str, *parts: str | bytes) -> bytes:
        encoded = [p.encode() if isinstance(p, str) else p for p in parts]
        return self._base + kind.encode() + b"/" + b"\0".join(encoded)

    def _prefix(self, kind: str, *parts: str) -> tuple[bytes, bytes]:
        """The key range of ``kind`` (and ``parts`` followed by a separator)."""
        start = self._key(kind, *parts, b"") if parts else self._base + kind.encode() + b"/"
        return start, prefix_end(start)

    async def _now(self, now: datetime | None = None) -> datetime:
        if now is not None:
            return now
        if self._clock is not None:
            return self._clock.now()
        return await self._server.now()

    async def _range(self, start: bytes, end: bytes, **kwargs: Any) -> list[Any]:
        with self._conns.translated():
            reply = await self._conns.range(start, end, **kwargs)
        return list(reply.kvs)

    async def _walk(self, start: bytes, end: bytes, *, descending: bool = False) -> Any:
        """Every key-value of ``[start, end)`` in key order, a page per request."""
        while True:
            page = await self._range(start, end, limit=PAGE, descending=descending)
            for kv in page:
                yield kv
            if len(page) < PAGE:
                return
            last = bytes(page[-1].key)
            if descending:
                end = last
            else:
                start = last + b"\0"

    async def _gets(self, keys: Sequence[bytes]) -> list[Any | None]:
        """The key-values of ``keys`` (None: missing), read in transactions of gets."""
        found: list[Any | None] = []
        for at in range(0, len(keys), MAX_OPS):
            chunk = keys[at : at + MAX_OPS]
            with self._conns.translated():
                reply = await self._conns.txn([], [get(key) for key in chunk])
            for response in reply.responses:
                kvs = response.response_range.kvs
                found.append(kvs[0] if kvs else None)
        return found

    async def _apply(self, units: Sequence[Unit]) -> list[bool]:
        """Apply ``units`` (each on its own conditions), as few requests as etcd's limits
        allow; whether each applied, in order."""
        applied = [False] * len(units)
        try:
            groups = pack(units)
        except ValueError as exc:
            raise PayloadError(f"etcd store {self.target.display}: {exc}") from None
        for group in groups:
            with self._conns.translated():
                reply = await self._conns.txn([], [units[at].request() for at in group])
            for at, response in zip(group, reply.responses, strict=True):
                applied[at] = bool(response.response_txn.succeeded)
        return applied

    async def _lease(self, ttl: timedelta) -> int:
        """This store's etcd lease of ``ttl`` (whole seconds, rounded up), kept alive now;
        a lease that ran out is replaced (the keys on it are gone with it)."""
        seconds = max(1, math.ceil(ttl.total_seconds()))
        if self._lease_lock is None:
            self._lease_lock = asyncio.Lock()
        async with self._lease_lock:
            lease = self._leases.get(seconds)
            with self._conns.translated():
                if lease is not None and await self._conns.lease_keepalive(lease) > 0:
                    return lease
                lease = await self._conns.lease_grant(seconds)
            self._leases[seconds] = lease
            return lease

    # -- life cycle -------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        """etcd has no schema: this writes the key layout version (``/{prefix}/schema``)
        unless it exists, refuses a newer one, upgrades an older one (1 to 2:
        :func:`~soloist.stores.etcd.pages.index_finished`), and measures the member's
        clock. Applied: the layout versions up to this code's, from none for a new prefix."""
        key = self._base + b"schema"
        version = str(SCHEMA_VERSION).encode()
        unit = Unit(compare=[absent(key)])
        unit.put(key, version)
        [created] = await self._apply([unit])
        applied = list(range(1, SCHEMA_VERSION + 1)) if created else []
        found = (await self._gets([key]))[0]
        stored = int(found.value) if found is not None else 0
        if found is not None and 0 < stored < SCHEMA_VERSION:
            await pages.index_finished(self)
            upgraded = Unit(compare=[value_is(key, found.value)])
            upgraded.put(key, version)
            await self._apply([upgraded])
            applied = list(range(stored + 1, SCHEMA_VERSION + 1))
        await self.schema_check()
        if self._clock is None:
            await self._server.measure()
        return applied

    async def schema_check(self) -> None:
        """The capability ``checks_schema``: reads ``/{prefix}/schema`` (written by
        :meth:`migrate`); a prefix without it holds no store."""
        found = await self._gets([self._base + b"schema"])
        stored = int(found[0].value) if found[0] is not None else 0
        problem = schema_problem(
            self.target.display,
            stored,
            SCHEMA_VERSION,
            f"key {(self._base + b'schema').decode()} does not exist",
        )
        if problem is not None:
            raise problem

    async def close(self) -> None:
        if self._trim is not None:
            self._trim.cancel()
            with contextlib.suppress(BaseException):
                await self._trim
            self._trim = None
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(BaseException):
                await self._watch
            self._watch = None
        await self._server.close()
        leases, self._leases = list(self._leases.values()), {}
        for lease in leases:
            with contextlib.suppress(Exception):
                await self._conns.lease_revoke(lease)
        await self._conns.close_all()

    async def now(self) -> datetime:
        return await self._now()

    # -- wake-ups -----------------------------------------------------------------------------
    async def listen(self) -> None:
        """Watch the queue now (``work_wait`` does it on first use): wake-ups from then on
        are kept until the next ``work_wait``."""
        await self._watching()

    async def _watching(self) -> asyncio.Event:
        """The running watch of the queue's keys, started (and its creation awaited) if
        there is none; a watch that broke is started again and counts as a wake-up."""
        if self._woken is None:
            self._woken = asyncio.Event()
        if self._watch is None or self._watch.done():
            if self._watch is not None:
                self._fresh = True
                with contextlib.suppress(BaseException):
                    self._watch.result()
            created = asyncio.Event()
            start, end = self._prefix("q")
            woken = self._woken

            def seen(key: bytes) -> None:
                if key:
                    woken.set()
                else:
                    created.set()

            self._watch = asyncio.create_task(self._conns.watch(start, end, seen))
            waiter = asyncio.create_task(created.wait())
            try:
                await asyncio.wait(
                    [self._watch, waiter],
                    timeout=self._conns.timeout,
                    return_when="FIRST_COMPLETED",
                )
            finally:
                waiter.cancel()
            if not created.is_set():
                task, self._watch = self._watch, None
                task.cancel()
                with self._conns.translated(), contextlib.suppress(asyncio.CancelledError):
                    await task
                raise StoreUnavailableError(
                    f"etcd store {self.target.display}: the watch was not created"
                )
        return self._woken

    async def work_wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for a write to the queue (an insert, a retry, a
        release, a reap, a plan) seen by the watch: True when one came, False when the time
        ran out. Writes since the previous call count, folded into one; True also when the
        watch had to be started again, since writes meanwhile were not seen."""
        woken = await self._watching()
        if self._fresh:
            self._fresh = False
            woken.clear()
            return True
        try:
            await asyncio.wait_for(woken.wait(), max(0.0, timeout))
        except asyncio.TimeoutError:
            if self._watch is not None and self._watch.done():
                with self._conns.translated():
                    self._watch.result()
            return False
        woken.clear()
        return True

    # -- occurrence keys ----------------------------------------------------------------------
    def _occ_key(self, occ_id: str) -> bytes:
        return self._key("o", occ_id)

    def _queue_key(self, occ: Occurrence) -> bytes:
        return self._key(
            "q",
            occ.task,
            codec.sort_key(occ.due_at),
            codec.sort_key(occ.plan_time),
            codec.sort_key(occ.created_at),
            occ.id,
        )

    def _list_key(self, occ: Occurrence) -> bytes:
        return self._key(
            "l", codec.sort_key(occ.plan_time) + codec.sort_key(occ.created_at) + occ.id.encode()
        )

    def _group(self, occ: Occurrence) -> tuple[str, str, str]:
        return (occ.job, occ.scope, occ.task)

    def _running_key(self, occ: Occurrence) -> bytes:
        return self._key("r", *self._group(occ), occ.id)

    def _history_key(self, occ: Occurrence) -> bytes:
        assert occ.finished_at is not None
        return self._key("h", codec.sort_key(occ.finished_at), occ.id)

    def _finished_key(self, job: str, list_key: bytes) -> bytes:
        """``f/<job>\\0<plan><created><id>``: a finished occurrence of ``job`` (whose list
        key is ``list_key``), so that the job's newest is the last key of its range."""
        return self._key("f", job, list_key[len(self._prefix("l")[0]) :])

    def _write(self, unit: Unit, occ: Occurrence, before: Occurrence | None) -> None:
        """Add to ``unit`` the writes that store ``occ`` (previously ``before``, None for a
        new one) with its index entries: queue (claimable), running, list, history and the
        job's finished keys."""
        data = codec.occurrence_bytes(occ)
        unit.put(self._occ_key(occ.id), data)
        claimable = occ.state in CLAIMABLE_STATES
        moved = not (
            claimable and before is not None and self._queue_key(before) == self._queue_key(occ)
        )
        if before is not None and before.state in CLAIMABLE_STATES and moved:
            unit.delete(self._queue_key(before))
        if claimable:
            unit.put(self._queue_key(occ), data)
        if before is not None and before.state == State.RUNNING and occ.state != State.RUNNING:
            unit.delete(self._running_key(before))
        if occ.state == State.RUNNING:
            lease = codec.opt_us(occ.lease_expires_at)
            started = codec.opt_us(occ.started_at)
            value = codec.dumps([lease, occ.instance_id, occ.fencing_token, started])
            unit.put(self._running_key(occ), value)
        if before is None or before.state != occ.state:
            unit.put(self._list_key(occ), codec.dumps([occ.job, occ.state.value]))
        if occ.state in _TERMINAL and (before is None or before.state not in _TERMINAL):
            list_key = self._list_key(occ)
            value = codec.dumps([occ.dedupe_key, list_key.decode(), occ.job])
            unit.put(self._history_key(occ), value)
            unit.put(self._finished_key(occ.job, list_key), b"")

    def _log(self, unit: Unit, occ: Occurrence, now: datetime, outcome: str, code: str | None,
             message: str | None) -> None:  # fmt: skip
        """Add the audit record of the attempt ``occ`` (still running) ends with."""
        record = Attempt(
            occurrence_id=occ.id,
            attempt=occ.attempt,
            fencing_token=occ.fencing_token,
            instance_id=occ.instance_id,
            started_at=occ.started_at,
            finished_at=now,
            outcome=outcome,
            error_code=code,
            error_message=message,
        )
        key = self._key("a", occ.id, b"%012d" % occ.fencing_token)
        unit.put(key, codec.attempt_bytes(record))

    def _new(self, item: NewOccurrence, now: datetime, occ_id: str | None = None) -> Occurrence:
        occ = rows.new_occurrence(item, now)
        if occ_id is not None:
            occ = replace(occ, id=occ_id)
        size = len(json.dumps(occ.payload))
        if size > MAX_VALUE_BYTES:
            raise PayloadError(
                f"payload of {item.dedupe_key!r} is {size} bytes: the etcd store takes at most "
                f"{MAX_VALUE_BYTES} (etcd requests are limited to 1.5 MiB)"
            )
        return occ

    def _insert_unit(self, occ: Occurrence) -> Unit:
        """Insert ``occ`` unless its dedupe key exists (then: read the existing id)."""
        dedupe = self._key("k", occ.dedupe_key)
        unit = Unit(compare=[absent(dedupe)], failure=[get(dedupe)])
        unit.put(dedupe, occ.id.encode())
        self._write(unit, occ, None)
        return unit

    # -- occurrences --------------------------------------------------------------------------
    async def occurrence_insert(self, item: NewOccurrence) -> tuple[Occurrence, bool]:
        occ = self._new(item, await self._now())
        unit = self._insert_unit(occ)
        with self._conns.translated():
            reply = await self._conns.txn([], [unit.request()])
        response = reply.responses[0].response_txn
        if response.succeeded:
            return occ, True
        kvs = response.responses[0].response_range.kvs
        existing = await self.occurrence_get(bytes(kvs[0].value).decode()) if kvs else None
        if existing is None:  # trimmed between the two reads: insert again
            return await self.occurrence_insert(item)
        return existing, False

    async def occurrence_insert_many(self, items: Sequence[NewOccurrence]) -> int:
        now = await self._now()
        units = [self._insert_unit(self._new(item, now)) for item in items]
        return sum(await self._apply(units))

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
        now = await self._now(now)
        claimed: list[Occurrence] = []
        finished = False
        # Candidates another claimer took between the read and the write: read again. A
        # refused change means another claim went through, so the rounds end.
        for _ in range(CLAIM_ROUNDS):
            taken, skipped, conflicts = await self._claim_round(
                instance_id, tasks, limit - len(claimed), lease_ttl, now, allow_only
            )
            claimed += taken
            finished = finished or skipped
            if not conflicts or len(claimed) >= limit:
                break
        if finished:
            await self._trim_soon(now)
        return claimed

    async def _claim_round(
        self,
        instance_id: str,
        tasks: Collection[str],
        limit: int,
        lease_ttl: timedelta,
        now: datetime,
        allow_only: bool,
    ) -> tuple[list[Occurrence], bool, bool]:
        """One read and one write of a claim: the occurrences claimed, whether any was
        skipped, and whether any change was refused (another claimer came first).
        Candidates held back by a running sibling are passed over, a page at a time, up to
        :data:`MAX_BLOCKED` of them, so that one busy group does not hide the rest; with
        ``allow_only``, so are the rows whose overlap is not ``allow`` (left as they are),
        and the running groups, which only those rows ask about, are not read."""
        if allow_only:
            busy: dict[tuple[str, str, str], datetime] = {}
            revision = 0
        else:
            busy, revision = await self._running_groups(now)
        due_end = codec.sort_key(now) + b"\x01"
        # The next key to read of each task's due range; None: read to its end.
        starts: dict[str, bytes | None] = {task: self._prefix("q", task)[0] for task in tasks}
        page = limit * 2 + 16
        units: list[Unit] = []
        taken: list[Occurrence | None] = []
        claims = 0
        passed = 0
        while claims < limit and passed < MAX_BLOCKED:
            reading = [task for task, start in starts.items() if start is not None]
            if not reading:
                break
            candidates = await self._queue_heads(reading, starts, due_end, page)
            for task in reading:
                if len(candidates.get(task, [])) < page:
                    starts[task] = None  # the end of its due range
            ordered = sorted(
                (bytes(kv.key).split(b"\0", 1)[1], kv) for kvs in candidates.values() for kv in kvs
            )
            for _, kv in ordered:
                if claims >= limit:
                    break
                occ = codec.occurrence(kv.value)
                if allow_only and occ.overlap != Overlap.ALLOW:
                    passed += 1  # not a candidate of this claim
                    continue
                group = self._group(occ)
                unit = Unit(compare=[mod_is(bytes(kv.key), kv.mod_revision)])
                if occ.overlap != Overlap.ALLOW and group in busy:
                    # skip: only if a sibling was already running when this one was due;
                    # otherwise both are late and this one waits its turn, like queue.
                    if occ.overlap == Overlap.SKIP and busy[group] < occ.due_at:
                        self._write(unit, rows.skipped(occ, now), occ)
                        units.append(unit)
                        taken.append(None)
                    else:
                        passed += 1
                    continue
                busy.setdefault(group, now)
                claimed = replace(
                    occ,
                    state=State.RUNNING,
                    attempt=occ.attempt + 1,
                    fencing_token=occ.fencing_token + 1,
                    instance_id=instance_id,
                    started_at=now,
                    lease_expires_at=now + lease_ttl,
                    finished_at=None,
                    error_code=None,
                    error_message=None,
                    result=None,
                )
                if occ.overlap != Overlap.ALLOW:
                    # No sibling started since the read (one that did wrote a running key
                    # of the group after it).
                    start, end = self._prefix("r", *group)
                    unit.compare.append(unchanged_since(start, end, revision))
                self._write(unit, claimed, occ)
                units.append(unit)
                taken.append(claimed)
                claims += 1
        applied = await self._apply(units)
        result = [occ for occ, ok in zip(taken, applied, strict=True) if ok and occ is not None]
        skipped = any(ok and occ is None for occ, ok in zip(taken, applied, strict=True))
        return result, skipped, not all(applied)

    async def _running_groups(
        self, now: datetime
    ) -> tuple[dict[tuple[str, str, str], datetime], int]:
        """The earliest start of the running occurrences of each overlap group, and the
        revision they were read at (a claim of a ``skip`` or ``queue`` candidate applies
        only while no running key of its group was written after it)."""
        start, end = self._prefix("r")
        with self._conns.translated():
            reply = await self._conns.range(start, end)
        busy: dict[tuple[str, str, str], datetime] = {}
        for kv in reply.kvs:
            parts = bytes(kv.key)[len(start) :].decode().split("\0")
            started = json.loads(kv.value)[3]
            group = (parts[0], parts[1], parts[2])
            moment = codec.from_us(started) if started is not None else now
            busy[group] = min(busy.get(group, moment), moment)
        return busy, int(reply.header.revision)

    async def _queue_heads(
        self, tasks: Sequence[str], starts: dict[str, bytes | None], due_end: bytes, page: int
    ) -> dict[str, list[Any]]:
        """The next ``page`` due queue entries of each task from ``starts`` (moved past
        what was read), in claim order."""
        found: dict[str, list[Any]] = {}
        for at in range(0, len(tasks), MAX_OPS):
            chunk = tasks[at : at + MAX_OPS]
            ops = []
            for task in chunk:
                begin = starts[task]
                assert begin is not None
                ops.append(get(begin, self._prefix("q", task)[0] + due_end, limit=page))
            with self._conns.translated():
                reply = await self._conns.txn([], ops)
            for task, response in zip(chunk, reply.responses, strict=True):
                kvs = list(response.response_range.kvs)
                found[task] = kvs
                if kvs:
                    starts[task] = bytes(kvs[-1].key) + b"\0"
        return found

    async def _update(
        self, ids: Sequence[str], change: Callable[[Occurrence, Unit], Occurrence | None]
    ) -> dict[str, Occurrence]:
        """Apply ``change`` to each occurrence of ``ids`` as stored: it adds its writes to
        the unit and returns the occurrence as it will be, or None to leave it. A change
        applies only while its occurrence is unchanged since it was read; one refused
        because another write came first (a renewal, say, while a completion was on its
        way) is read again and decided again, so a runner's outcome is never lost to its
        own heartbeat. Returns the occurrences changed, by id."""
        done: dict[str, Occurrence] = {}
        pending = list(dict.fromkeys(ids))
        for _ in range(UPDATE_ROUNDS):
            found = await self._gets([self._occ_key(occ_id) for occ_id in pending])
            units: list[Unit] = []
            after: list[Occurrence] = []
            for kv in found:
                if kv is None:
                    continue
                unit = Unit(compare=[mod_is(bytes(kv.key), int(kv.mod_revision))])
                changed = change(codec.occurrence(kv.value), unit)
                if changed is not None:
                    units.append(unit)
                    after.append(changed)
            applied = await self._apply(units)
            done |= {occ.id: occ for occ, ok in zip(after, applied, strict=True) if ok}
            pending = [occ.id for occ, ok in zip(after, applied, strict=True) if not ok]
            if not pending:
                break
        return done

    @staticmethod
    def _holds(occ: Occurrence, instance_id: str, token: int) -> bool:
        """The fence: ``occ`` is running for this runner with this token."""
        return (
            occ.state == State.RUNNING
            and occ.instance_id == instance_id
            and occ.fencing_token == token
        )

    async def lease_renew(
        self,
        instance_id: str,
        claims: Sequence[Claimed],
        lease_ttl: timedelta,
        now: datetime | None = None,
    ) -> Renewed:
        expires = await self._now(now) + lease_ttl
        tokens = {c.id: c.fencing_token for c in claims}

        def renew(occ: Occurrence, unit: Unit) -> Occurrence | None:
            if not self._holds(occ, instance_id, tokens[occ.id]):
                return None
            renewed = replace(occ, lease_expires_at=expires)
            self._write(unit, renewed, occ)
            return renewed

        done = await self._update(list(tokens), renew)
        return Renewed(done, [i for i, occ in done.items() if occ.cancel_requested])

    async def occurrence_cancel(
        self, occurrence_id: str, now: datetime | None = None
    ) -> tuple[Occurrence, bool] | None:
        # Compared with the row's revision, and a claimable row's queue entry goes: a claim
        # compares that entry, so of a claim and a cancel at once only one applies (the
        # cancel refused that way reads the row again: running, it sets the flag).
        now = await self._now(now)

        def cancel(occ: Occurrence, unit: Unit) -> Occurrence | None:
            changed = rows.cancelled(occ, now)
            if changed is not None:
                self._write(unit, changed, occ)
            return changed

        done = await self._update([occurrence_id], cancel)
        if occurrence_id in done:
            if done[occurrence_id].state == State.DEAD:
                await self._trim_soon(now)
            return done[occurrence_id], True
        found = await self.occurrence_get(occurrence_id)
        if found is not None and rows.cancelled(found, now) is not None:
            # Every round lost to another write (claims, renewals): nothing was done.
            raise StoreError(
                f"cancelling occurrence {occurrence_id!r} kept conflicting with other "
                "writes; try again"
            )
        return (found, False) if found is not None else None

    async def occurrence_complete(
        self, instance_id: str, outcomes: Sequence[Outcome], now: datetime | None = None
    ) -> set[str]:
        now = await self._now(now)
        by_id = {o.id: o for o in outcomes}
        checked = {o.id: (rows.result(o.result), rows.retry_at(o, now)) for o in by_id.values()}

        def complete(occ: Occurrence, unit: Unit) -> Occurrence | None:
            outcome = by_id[occ.id]
            if not self._holds(occ, instance_id, outcome.fencing_token):
                return None
            result, retry_at = checked[occ.id]
            state, code = rows.completed_as(occ, outcome)
            retry = state == State.FAILED
            self._log(unit, occ, now, state.value, code, outcome.error_message)
            done = replace(
                occ,
                state=state,
                due_at=retry_at if retry else occ.due_at,
                lease_expires_at=None,
                finished_at=None if retry else now,
                error_code=code,
                error_message=outcome.error_message,
                result=result,
            )
            self._write(unit, done, occ)
            return done

        applied = await self._update(list(by_id), complete)
        if applied:
            await self._trim_soon(now)
        return set(applied)

    async def lease_release(
        self, instance_id: str, claims: Sequence[Claimed], now: datetime | None = None
    ) -> set[str]:
        now = await self._now(now)
        tokens = {c.id: c.fencing_token for c in claims}

        def release(occ: Occurrence, unit: Unit) -> Occurrence | None:
            if not self._holds(occ, instance_id, tokens[occ.id]):
                return None
            back = rows.released(occ)
            if back.state == State.DEAD:  # its cancellation was requested
                back = replace(back, finished_at=now)
                self._log(unit, occ, now, State.DEAD.value, back.error_code, back.error_message)
            else:
                self._log(unit, occ, now, RELEASED, back.error_code, back.error_message)
            self._write(unit, back, occ)
            return back

        released = await self._update(list(tokens), release)
        if any(occ.state == State.DEAD for occ in released.values()):
            await self._trim_soon(now)
        return set(released)

    async def occurrence_reap(self, now: datetime | None = None) -> list[Occurrence]:
        now = await self._now(now)
        start, end = self._prefix("r")
        expired = []
        async for kv in self._walk(start, end):
            lease = json.loads(kv.value)[0]
            if lease is not None and codec.from_us(lease) <= now:
                expired.append(bytes(kv.key).rsplit(b"\0", 1)[1].decode())

        def reap(occ: Occurrence, unit: Unit) -> Occurrence | None:
            # Read again: a renewal or an outcome since the scan leaves it alone.
            if occ.state != State.RUNNING or occ.lease_expires_at is None:
                return None
            if occ.lease_expires_at > now:
                return None
            updated, outcome = rows.reaped(occ, now)
            self._log(unit, occ, now, outcome, updated.error_code, updated.error_message)
            self._write(unit, updated, occ)
            return updated

        reaped = list((await self._update(expired, reap)).values())
        if any(occ.state == State.DEAD for occ in reaped):
            await self._trim_soon(now)
        return sorted(reaped, key=lambda occ: (occ.plan_time, occ.created_at, occ.id))

    async def occurrence_next_due(
        self, tasks: Collection[str], now: datetime | None = None
    ) -> datetime | None:
        ranges = [self._prefix("q", task) for task in tasks]
        earliest: datetime | None = None
        for at in range(0, len(ranges), MAX_OPS):
            ops = [get(s, e, limit=1, keys_only=True) for s, e in ranges[at : at + MAX_OPS]]
            with self._conns.translated():
                reply = await self._conns.txn([], ops)
            for response in reply.responses:
                for kv in response.response_range.kvs:
                    due = codec.from_sort_key(bytes(kv.key).split(b"\0")[1])
                    earliest = due if earliest is None else min(earliest, due)
        return earliest

    async def occurrence_get(self, occurrence_id: str) -> Occurrence | None:
        found = (await self._gets([self._occ_key(occurrence_id)]))[0]
        return codec.occurrence(found.value) if found is not None else None

    async def occurrence_list(
        self,
        *,
        job: str | None = None,
        state: State | None = None,
        limit: int = 100,
    ) -> list[Occurrence]:
        start, end = self._prefix("l")
        ids: list[str] = []
        last = b""
        async for kv in self._walk(start, end, descending=True):
            order = bytes(kv.key)[len(start) : len(start) + 40]  # plan time, created
            if len(ids) >= limit and order != last:
                break  # past the ties of the last one taken (ordered below)
            owner, in_state = json.loads(kv.value)
            if (job is None or owner == job) and (state is None or in_state == state.value):
                ids.append(bytes(kv.key)[len(start) + 40 :].decode())
                last = order
        found = [kv for kv in await self._gets([self._occ_key(i) for i in ids]) if kv is not None]
        # Ties of plan time and creation: the newest written first.
        found.sort(
            key=lambda kv: (*_plan_created(codec.occurrence(kv.value)), kv.create_revision),
            reverse=True,
        )
        listed = [codec.occurrence(kv.value) for kv in found]
        return [occ for occ in listed if state is None or occ.state == state][:limit]

    async def occurrence_counts(self, now: datetime | None = None) -> OccurrenceCounts:
        now = await self._now(now)
        counts: Counter[tuple[str, State]] = Counter()
        start, end = self._prefix("l")
        async for kv in self._walk(start, end):
            owner, in_state = json.loads(kv.value)
            counts[(owner, State(in_state))] += 1
        due = 0
        queue_start, queue_end = self._prefix("q")
        async for kv in self._walk(queue_start, queue_end):
            if codec.from_sort_key(bytes(kv.key).split(b"\0")[1]) <= now:
                due += 1
        return OccurrenceCounts(by_job_state=dict(counts), due=due)

    async def occurrence_attempts(self, occurrence_id: str) -> list[Attempt]:
        start, end = self._prefix("a", occurrence_id)
        return [codec.attempt(occurrence_id, kv.value) async for kv in self._walk(start, end)]

    # -- history ------------------------------------------------------------------------------
    async def _trim_soon(self, now: datetime) -> None:
        """Start trimming the history in the background unless it is under way: a trim
        never delays, nor fails, the claim or completion that finished occurrences."""
        if self._trim is None or self._trim.done():
            self._trim = asyncio.create_task(self._trim_all())

    async def _trim_all(self) -> None:
        """Trim batch after batch until the history is within its bounds; a store error
        ends it quietly (the next finished occurrence starts it again)."""
        with contextlib.suppress(StoreError):
            deleted = TRIM_BATCH
            while deleted >= TRIM_BATCH:
                deleted = await self.trim_history()

    async def trim_history(self, now: datetime | None = None) -> int:
        """Delete the oldest finished occurrences beyond the URL's ``history_max`` and those
        finished before ``history_age``, with their attempts, index entries and dedupe keys,
        at most :data:`TRIM_BATCH` per call. Returns how many were deleted."""
        now = await self._now(now)
        age = self.target.history_age
        before = now - age if age is not None else None
        return await self.history_prune(before, self.target.history_max or None, TRIM_BATCH)

    async def history_prune(
        self,
        before: datetime | None,
        keep: int | None,
        limit: int,
        *,
        dry_run: bool = False,
    ) -> int:
        """See the protocol; :meth:`trim_history` with the bounds given, in steps of at
        most :data:`TRIM_BATCH` (a dry run counts in one read)."""
        if dry_run:
            return await self._prune_step(before, keep, limit, dry_run=True)
        total = 0
        while total < limit:
            step = min(TRIM_BATCH, limit - total)
            deleted = await self._prune_step(before, keep, step)
            total += deleted
            if deleted < step:
                break
        return total

    async def _prune_step(
        self, before: datetime | None, keep: int | None, limit: int, *, dry_run: bool = False
    ) -> int:
        start, end = self._prefix("h")
        # The count and the rows are read at one revision: a prune that counted before a
        # concurrent one's deletions must not then take the rows after them as "over".
        total, revision = 0, 0
        if keep is not None:
            with self._conns.translated():
                counted = await self._conns.range(start, end, count_only=True)
            total, revision = int(counted.count), int(counted.header.revision)
        victims: list[Any] = []
        if before is not None:
            cut = start + codec.sort_key(before)
            victims += await self._range(start, cut, limit=limit, revision=revision)
        if keep is not None and len(victims) < limit:
            over = total - len(victims) - keep
            if over > 0:
                wanted = min(limit, over + len(victims))
                oldest = await self._range(start, end, limit=wanted, revision=revision)
                seen = {bytes(kv.key) for kv in victims}
                victims += [kv for kv in oldest if bytes(kv.key) not in seen]
        victims = victims[:limit]
        if dry_run:
            return len(victims)
        units = []
        for kv in victims:
            occ_id = bytes(kv.key).rsplit(b"\0", 1)[1].decode()
            dedupe, list_key, *job = json.loads(kv.value)  # no job: written by layout 1
            attempts_start, attempts_end = self._prefix("a", occ_id)
            unit = Unit(compare=[mod_is(bytes(kv.key), int(kv.mod_revision))])
            unit.success.append(delete(attempts_start, attempts_end))
            unit.delete(self._occ_key(occ_id))
            unit.delete(self._key("k", dedupe))
            unit.delete(list_key.encode())
            if job:
                unit.delete(self._finished_key(job[0], list_key.encode()))
            unit.delete(bytes(kv.key))
            units.append(unit)
        return sum(await self._apply(units))

    # -- planning -----------------------------------------------------------------------------
    def _cursor_key(self, job: str, scope: str) -> bytes:
        return self._key("c", job, scope)

    def _index_key(self, at: datetime, job: str, scope: str) -> bytes:
        return self._key("n", codec.sort_key(at), job, scope)

    @staticmethod
    def _indexed(key: bytes, skip: int) -> tuple[datetime, str, str]:
        """The next plan time, job and scope of a planning index key."""
        stamp, job, scope = key[skip:].split(b"\0")
        return codec.from_sort_key(stamp), job.decode(), scope.decode()

    def _put_cursor(self, unit: Unit, cursor: PlanCursor, before: PlanCursor | None) -> None:
        unit.put(self._cursor_key(cursor.job, cursor.scope), codec.cursor_bytes(cursor))
        old = before.next_plan_time if before is not None else None
        new = cursor.next_plan_time
        if old == new:
            return
        if old is not None:
            unit.delete(self._index_key(old, cursor.job, cursor.scope))
        if new is not None:
            unit.put(self._index_key(new, cursor.job, cursor.scope), b"")

    async def _cursors(
        self, streams: Sequence[tuple[str, str]]
    ) -> list[tuple[PlanCursor | None, int]]:
        found = await self._gets([self._cursor_key(job, scope) for job, scope in streams])
        return [
            (codec.cursor(job, scope, kv.value), int(kv.mod_revision)) if kv else (None, 0)
            for (job, scope), kv in zip(streams, found, strict=True)
        ]

    async def plan_cursor_get(self, job: str, scope: str) -> PlanCursor | None:
        return (await self._cursors([(job, scope)]))[0][0]

    async def plan_advance(self, advance: PlanAdvance) -> bool:
        return (await self.plan_advance_many([advance]))[0]

    async def plan_advance_many(self, steps: Sequence[PlanAdvance]) -> list[bool]:
        """Each step is one unit: its cursor compared (and the live key of its fence's
        partition lease, whose value is the epoch: renewals keep it, a new holder changes
        it, expiry deletes it). A step with more items than one etcd request holds is
        applied as a chain of steps, each atomic and each starting where the one before
        ended (the stream is due again at once until the last one applies); its result is
        that of its first link: once that applied, the cursor has moved."""
        now = await self._now()
        cursors = await self._cursors([(s.job, s.scope) for s in steps])
        fences = sorted({s.fence.partition for s in steps if s.fence is not None})
        leases = await self._gets([self._partition_key(p) for p in fences])
        lives = await self._gets([self._live_partition_key(p) for p in fences])
        held = {
            p: lease
            for p, kv, live in zip(fences, leases, lives, strict=True)
            if (lease := self._partition(p, kv)) is not None
            and live is not None
            and bytes(live.value) == str(lease.epoch).encode()
            and lease.expires_at > now
        }
        result = [False] * len(steps)
        units: list[Unit] = []
        placed: list[tuple[int, list[Unit]]] = []
        for at, (step, (cursor, revision)) in enumerate(zip(steps, cursors, strict=True)):
            if (cursor.last_plan_time if cursor is not None else None) != step.expected_last:
                continue
            if step.fence is not None:
                lease = held.get(step.fence.partition)
                if lease is None or lease.epoch != step.fence.epoch:
                    continue
            chain = self._chain(step, cursor, revision, now)
            units.append(chain[0])
            placed.append((at, chain[1:]))
        for (at, rest), ok in zip(placed, await self._apply(units), strict=True):
            result[at] = ok
            for link in rest if ok else ():
                if not (await self._apply([link]))[0]:
                    break  # another planner moved on: it continues from the cursor
        return result

    def _chain(
        self, step: PlanAdvance, cursor: PlanCursor | None, revision: int, now: datetime
    ) -> list[Unit]:
        """The units that apply ``step``: one, or a chain when its items do not fit one
        request (links of at most :data:`STEP_ITEMS` items and :data:`STEP_BYTES`)."""
        news = [self._new(item, now) for item in step.items]
        links: list[list[Occurrence]] = [[]]
        size = 0
        for occ in news:
            nbytes = 2 * len(codec.occurrence_bytes(occ))
            if links[-1] and (len(links[-1]) >= STEP_ITEMS or size + nbytes > STEP_BYTES):
                links.append([])
                size = 0
            links[-1].append(occ)
            size += nbytes
        fence = None
        if step.fence is not None:
            live = self._live_partition_key(step.fence.partition)
            fence = value_is(live, str(step.fence.epoch).encode())
        key = self._cursor_key(step.job, step.scope)
        units = []
        before = cursor
        count = cursor.planned_count if cursor is not None else 0
        added = step.added_count
        for n, link in enumerate(links):
            last = n == len(links) - 1
            link_added = added if last else min(added, len(link))
            added -= link_added
            count += link_added
            moved = PlanCursor(
                step.job,
                step.scope,
                step.new_last if last else max(o.plan_time for o in link),
                count,
                step.next_plan_time if last else now,
            )
            if before is None or n == 0:
                compare = [mod_is(key, revision)]
            else:  # the cursor as the link before wrote it
                compare = [value_is(key, codec.cursor_bytes(before))]
            unit = Unit(compare=compare + ([fence] if fence is not None else []))
            self._put_cursor(unit, moved, before)
            for occ in link:
                unit.nest(self._insert_unit(occ))
            units.append(unit)
            before = moved
        return units

    async def plan_due(
        self,
        before: datetime,
        limit: int,
        slots: Sequence[tuple[int, int]] | None = None,
    ) -> DueBatch:
        """Walks the index from its start up to ``limit`` due entries in ``slots``, then
        from ``before`` on for the next one (at most :data:`NEXT_SCAN` entries of other
        slots looked at)."""
        start, end = self._prefix("n")
        bound = start + codec.sort_key(before) + b"\x01"
        due: list[tuple[str, str]] = []
        async for kv in self._walk(start, bound):
            job, scope = self._indexed(bytes(kv.key), len(start))[1:]
            if _in_slots(stream_slot(job, scope), slots):
                due.append((job, scope))
                if len(due) >= limit:
                    break
        next_at: datetime | None = None
        scanned = 0
        async for kv in self._walk(bound, end):
            stamp, job, scope = self._indexed(bytes(kv.key), len(start))
            if _in_slots(stream_slot(job, scope), slots):
                next_at = stamp
                break
            scanned += 1
            if scanned >= NEXT_SCAN:
                break
        cursors = await self._cursors(due)
        names = sorted({job for job, _ in due})
        found = await self._gets([self._key("j", name) for name in names])
        records = {
            name: codec.job(name, kv.value) for name, kv in zip(names, found, strict=True) if kv
        }
        streams = [
            DueStream(cursor, records.get(cursor.job))
            for cursor, _ in cursors
            if cursor is not None and cursor.next_plan_time is not None
        ]
        return DueBatch(streams, next_at)

    async def plan_cursor_ensure(
        self,
        streams: Sequence[tuple[str, str]],
        at: datetime | None = None,
        *,
        revive: bool = False,
    ) -> int:
        moment = at if at is not None else await self._now()
        changed = 0
        pending = list(dict.fromkeys(streams))
        for _ in range(5):  # another instance's write in between: read and try again
            units = []
            for (job, scope), (cursor, revision) in zip(
                pending, await self._cursors(pending), strict=True
            ):
                if cursor is None:
                    new = PlanCursor(job, scope, None, 0, moment)
                elif revive and (cursor.next_plan_time is None or cursor.next_plan_time > moment):
                    new = replace(cursor, next_plan_time=moment)
                else:
                    continue
                unit = Unit(compare=[mod_is(self._cursor_key(job, scope), revision)])
                self._put_cursor(unit, new, cursor)
                units.append(((job, scope), unit))
            applied = await self._apply([unit for _, unit in units])
            changed += sum(applied)
            pending = [stream for (stream, _), ok in zip(units, applied, strict=True) if not ok]
            if not pending:
                break
        return changed

    # -- jobs ---------------------------------------------------------------------------------
    async def job_upsert(self, records: Sequence[JobRecord]) -> None:
        now = await self._now()
        pending = list({r.name: r for r in records}.values())
        for _ in range(5):
            found = await self._gets([self._key("j", r.name) for r in pending])
            units = []
            for record, kv in zip(pending, found, strict=True):
                new = rows.job(record, now)
                if kv is not None:
                    old = codec.job(record.name, kv.value)
                    new = replace(new, paused=old.paused, created_at=old.created_at)
                key = self._key("j", record.name)
                unit = Unit(compare=[mod_is(key, int(kv.mod_revision)) if kv else absent(key)])
                unit.put(key, codec.job_bytes(new))
                units.append(unit)
            applied = await self._apply(units)
            pending = [r for r, ok in zip(pending, applied, strict=True) if not ok]
            if not pending:
                return
        raise StoreError(f"etcd store {self.target.display}: jobs kept changing while registered")

    async def job_add(self, record: JobRecord) -> None:
        record = rows.job(record, await self._now())
        key = self._key("j", record.name)
        unit = Unit(compare=[absent(key)])
        unit.put(key, codec.job_bytes(record))
        cursor = PlanCursor(record.name, "", None, 0, record.created_at)
        self._put_cursor(unit, cursor, (await self._cursors([(record.name, "")]))[0][0])
        if not (await self._apply([unit]))[0]:
            raise DuplicateJobError(f"job {record.name!r} already exists")

    async def job_get(self, name: str) -> JobRecord | None:
        found = (await self._gets([self._key("j", name)]))[0]
        return codec.job(name, found.value) if found is not None else None

    async def job_list(self) -> list[JobRecord]:
        start, end = self._prefix("j")
        return [
            codec.job(bytes(kv.key)[len(start) :].decode(), kv.value)
            async for kv in self._walk(start, end)
        ]

    async def job_delete(self, name: str) -> bool:
        """The record first (so that the job is gone at once), then its cursors and their
        index entries, in as many requests as they take."""
        key = self._key("j", name)
        found = (await self._gets([key]))[0]
        if found is not None:
            unit = Unit(compare=[mod_is(key, int(found.mod_revision))])
            unit.delete(key)
            if not (await self._apply([unit]))[0]:
                return await self.job_delete(name)  # changed meanwhile: read again
        start, end = self._prefix("c", name)
        for _ in range(5):
            units = []
            async for kv in self._walk(start, end):
                scope = bytes(kv.key)[len(start) :].decode()
                cursor = codec.cursor(name, scope, kv.value)
                unit = Unit(compare=[mod_is(bytes(kv.key), int(kv.mod_revision))])
                unit.delete(bytes(kv.key))
                if cursor.next_plan_time is not None:
                    unit.delete(self._index_key(cursor.next_plan_time, name, scope))
                units.append(unit)
            if all(await self._apply(units)):
                break
        return found is not None

    async def job_set_paused(self, name: str, paused: bool) -> bool:
        key = self._key("j", name)
        for _ in range(5):
            found = (await self._gets([key]))[0]
            if found is None:
                return False
            record = replace(codec.job(name, found.value), paused=paused)
            unit = Unit(compare=[mod_is(key, int(found.mod_revision))])
            unit.put(key, codec.job_bytes(record))
            if (await self._apply([unit]))[0]:
                return True
        raise StoreError(f"etcd store {self.target.display}: job {name!r} kept changing")

    async def job_page(self, query: JobQuery) -> JobPage:
        """The capability ``pages_jobs`` (see :mod:`soloist.stores.etcd.pages`)."""
        return await pages.job_page(self, query)

    async def job_counts(self, prefix: str) -> JobCounts:
        return await pages.job_counts(self, prefix)

    # -- leader election ------------------------------------------------------------------------
    # ``e/<name>`` keeps [holder, epoch, elected, expires] for good (epochs never repeat);
    # ``el/<name>`` lives on the holder's etcd lease while it holds.
    async def _election(self, name: str) -> tuple[Any, Any, list[Any] | None]:
        record, live = await self._gets([self._key("e", name), self._key("el", name)])
        return record, live, (json.loads(record.value) if record is not None else None)

    async def _held_election(
        self, name: str, instance_id: str, epoch: int, now: datetime
    ) -> tuple[Any, Any, LeaderLease] | None:
        """The election record, live key and lease of ``name`` if ``instance_id`` holds it
        with ``epoch`` at ``now``, else None."""
        record, live, values = await self._election(name)
        if values is None or live is None:
            return None
        current = self._leader(name, values)
        if current.leader_id != instance_id or current.epoch != epoch or current.expires_at <= now:
            return None
        return record, live, current

    def _leader(self, name: str, values: list[Any]) -> LeaderLease:
        holder, epoch, elected, expires = values
        return LeaderLease(name, holder, epoch, codec.from_us(elected), codec.from_us(expires))

    async def leader_attempt_elect(
        self, name: str, instance_id: str, ttl: timedelta, now: datetime | None = None
    ) -> LeaderLease | None:
        now = await self._now(now)
        record, live, values = await self._election(name)
        current = self._leader(name, values) if values is not None else None
        if current is not None and live is not None and current.expires_at > now:
            if current.leader_id != instance_id:
                return None
            return await self.leader_renew(name, instance_id, current.epoch, ttl, now)
        epoch = current.epoch + 1 if current is not None else 1
        lease = await self._lease(ttl)
        key, live_key = self._key("e", name), self._key("el", name)
        unit = Unit(compare=[
            mod_is(key, int(record.mod_revision) if record else 0),
            mod_is(live_key, int(live.mod_revision) if live else 0),
        ])  # fmt: skip
        taken = LeaderLease(name, instance_id, epoch, now, now + ttl)
        unit.put(key, codec.dumps([instance_id, epoch, codec.to_us(now), codec.to_us(now + ttl)]))
        unit.put(live_key, str(epoch).encode(), lease)
        return taken if (await self._apply([unit]))[0] else None

    async def leader_renew(
        self,
        name: str,
        instance_id: str,
        epoch: int,
        ttl: timedelta,
        now: datetime | None = None,
    ) -> LeaderLease | None:
        now = await self._now(now)
        held = await self._held_election(name, instance_id, epoch, now)
        if held is None:
            return None
        record, live, current = held
        values = json.loads(record.value)
        lease = await self._lease(ttl)
        key, live_key = self._key("e", name), self._key("el", name)
        unit = Unit(
            compare=[
                mod_is(key, int(record.mod_revision)),
                mod_is(live_key, int(live.mod_revision)),
            ]
        )
        renewed = replace(current, expires_at=now + ttl)
        unit.put(key, codec.dumps([instance_id, epoch, values[2], codec.to_us(now + ttl)]))
        unit.put(live_key, str(epoch).encode(), lease)
        return renewed if (await self._apply([unit]))[0] else None

    async def leader_resign(
        self, name: str, instance_id: str, epoch: int, now: datetime | None = None
    ) -> bool:
        now = await self._now(now)
        held = await self._held_election(name, instance_id, epoch, now)
        if held is None:
            return False
        record = held[0]
        values = json.loads(record.value)
        key, live_key = self._key("e", name), self._key("el", name)
        unit = Unit(compare=[mod_is(key, int(record.mod_revision))])
        unit.put(key, codec.dumps([instance_id, epoch, values[2], codec.to_us(now)]))
        unit.delete(live_key)
        return (await self._apply([unit]))[0]

    async def leader_get(self, name: str, now: datetime | None = None) -> LeaderLease | None:
        now = await self._now(now)
        _, live, values = await self._election(name)
        if values is None or live is None:
            return None
        current = self._leader(name, values)
        return current if current.expires_at > now else None

    # -- planning partitions --------------------------------------------------------------------
    # ``p/<n>`` keeps [holder, epoch, expires] for good; ``pl/<n>`` lives on the holder's
    # etcd lease while it holds.
    def _partition_key(self, partition: int) -> bytes:
        return self._key("p", b"%05d" % partition)

    def _live_partition_key(self, partition: int) -> bytes:
        return self._key("pl", b"%05d" % partition)

    def _partition(self, partition: int, kv: Any) -> PartitionLease | None:
        if kv is None:
            return None
        holder, epoch, expires = json.loads(kv.value)
        return PartitionLease(partition, holder, epoch, codec.from_us(expires))

    async def _partitions(self) -> dict[int, tuple[PartitionLease, Any, Any]]:
        """Every partition record with its key-values (record, live key or None)."""
        start, end = self._prefix("p")
        live_start, live_end = self._prefix("pl")
        with self._conns.translated():
            reply = await self._conns.txn([], [get(start, end), get(live_start, live_end)])
        records, lives = reply.responses
        alive = {int(bytes(kv.key)[len(live_start) :]): kv for kv in lives.response_range.kvs}
        found = {}
        for kv in records.response_range.kvs:
            partition = int(bytes(kv.key)[len(start) :])
            lease = self._partition(partition, kv)
            assert lease is not None
            found[partition] = (lease, kv, alive.get(partition))
        return found

    async def partition_sync(
        self,
        instance_id: str,
        want: Collection[int],
        ttl: timedelta,
        now: datetime | None = None,
    ) -> list[PartitionLease]:
        now = await self._now(now)
        known = await self._partitions()
        lease_id = await self._lease(ttl)
        units = []
        wanted = set(want)
        for partition in sorted(wanted | set(known)):
            lease, kv, live = known.get(partition, (None, None, None))
            held = lease is not None and live is not None and lease.expires_at > now
            if partition in wanted:
                if held and lease is not None and lease.holder != instance_id:
                    continue
                epoch = (
                    lease.epoch if held and lease is not None else (lease.epoch + 1 if lease else 1)
                )
                expires = now + ttl
            elif held and lease is not None and lease.holder == instance_id:
                epoch, expires = lease.epoch, now
            else:
                continue
            key, live_key = self._partition_key(partition), self._live_partition_key(partition)
            unit = Unit(compare=[
                mod_is(key, int(kv.mod_revision) if kv else 0),
                mod_is(live_key, int(live.mod_revision) if live else 0),
            ])  # fmt: skip
            unit.put(key, codec.dumps([instance_id, epoch, codec.to_us(expires)]))
            if expires > now:
                unit.put(live_key, str(epoch).encode(), lease_id)
            elif live is not None:
                unit.delete(live_key)
            units.append(unit)
        await self._apply(units)
        return await self.partition_list(now)

    async def partition_list(self, now: datetime | None = None) -> list[PartitionLease]:
        now = await self._now(now)
        return [
            lease
            for _, (lease, _, live) in sorted((await self._partitions()).items())
            if live is not None and lease.expires_at > now
        ]

    # -- instances ------------------------------------------------------------------------------
    async def instance_heartbeat(
        self, info: InstanceInfo, ttl: timedelta, now: datetime | None = None
    ) -> None:
        now = await self._now(now)
        key = self._key("i", info.instance_id)
        found = (await self._gets([key]))[0]
        started = (
            codec.instance(info.instance_id, found.value).started_at if found else info.started_at
        )
        record = replace(info, started_at=started, last_seen=now, expires_at=now + ttl)
        lease = await self._lease(ttl)
        unit = Unit()
        unit.put(key, codec.instance_bytes(record), lease)
        await self._apply([unit])

    async def instance_list(self, now: datetime | None = None) -> list[InstanceInfo]:
        now = await self._now(now)
        start, end = self._prefix("i")
        listed = [
            codec.instance(bytes(kv.key)[len(start) :].decode(), kv.value)
            async for kv in self._walk(start, end)
        ]
        return [info for info in listed if info.expires_at > now]

    async def instance_remove(self, instance_id: str) -> None:
        unit = Unit()
        unit.delete(self._key("i", instance_id))
        await self._apply([unit])


def _plan_created(occ: Occurrence) -> tuple[datetime, datetime]:
    return occ.plan_time, occ.created_at


def _in_slots(slot: int, slots: Sequence[tuple[int, int]] | None) -> bool:
    return slots is None or any(lo <= slot < hi for lo, hi in slots)
