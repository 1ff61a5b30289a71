"""The planner materialises due occurrences of every recurring job, idempotently.

For each (job, scope) stream the store keeps a cursor: the last plan time materialised,
and the stream's entry in the **planning index**, its next plan time. A tick asks the
store for the streams whose next plan time falls before ``now + lookahead``
(:meth:`Store.plan_due`, in batches of :data:`BATCH`), walks each one's schedule up to
there, applies the catch-up policy to instants that were missed (older than
``misfire_grace``), and writes every stream's new occurrences, cursor and next plan time
in one round trip per batch (:meth:`Store.plan_advance_many`: a compare-and-set per
stream). Streams that are not due cost nothing: a tick over 100,000 streams of which 100
are due costs what 100 streams cost. If two planners race, one CAS fails and that planner
looks again. Duplicate occurrences are impossible anyway: each has a unique dedupe key
``(job, scope, plan_time)``.

**Which streams are in the index.** A dynamic schedule's stream enters it when it is
added (:meth:`Store.job_add`), and leaves it when it is deleted. The streams of jobs
defined in code (one per scope the job's provider returns) are entered by this planner:
at its first tick and every ``refresh`` after, it asks each job for its scopes and enters
the streams it has not seen yet (:meth:`Store.plan_cursor_ensure`, in batches): a scope
provider returning 10,000 scopes costs a few round trips per ``refresh``, not 10,000. A
stream whose scope is no longer provided, or whose ``max_runs`` are spent, leaves the
index; one this instance cannot plan (a task it does not define, a stored schedule it
cannot read) is looked at again after ``refresh``. A stream never planned starts now, or
a dynamic schedule when it was added, as before.

**Who plans.** In ``distributed`` mode the streams hash into the partitions of
:mod:`soloist.runtime.partitions`, and this planner plans only the partitions its
instance holds, each write fenced by that partition's epoch. In ``leader`` mode the
leader plans every stream, in the same batches. In ``local`` mode each instance plans its
own copy of every code-defined job, stream by stream, outside the index.

The planner never sleeps in fixed ticks: it wakes just before the earliest next plan time
(the index's ``next_at`` and the streams it just wrote), or after ``refresh`` at the
latest.

**Time is the store's.** A tick reads the store's clock once (database ``now()``, Redis
``TIME``) and plans against it; the sleep until the next plan time is that store time's
distance, minus the time elapsed since the read on the monotonic clock. The local wall
clock is never read, so an instance whose clock is off by minutes plans the same instants,
on time, and never spins.

**Catch-up after a long outage** starts its walk at ``max(cursor, now -
catch_up_window)``. ``skip`` and ``latest`` need only the newest missed instant: the
walk jumps close to it (probing backwards from the grace limit in doubling steps), so a
cursor hours or months old costs a few dozen schedule steps, and ``latest`` runs the
newest missed instant, not the oldest one a bounded walk could reach.

**Overlap and catch-up.** The instants ``catch_up="all"`` keeps must all run, in order:
such a job's occurrences are planned with ``overlap="queue"`` (its default) so that they
wait for one another instead of skipping each other; ``overlap="skip"`` is refused with
``catch_up="all"`` when the job is defined.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from soloist.clock import cpu_time, to_epoch_us
from soloist.models import (
    CatchUp,
    DueStream,
    JobRecord,
    Kind,
    NewOccurrence,
    PlanAdvance,
    PlanCursor,
    PlanFence,
)
from soloist.registry import JobDef, Registry, local_name
from soloist.runtime.service import Service, ServiceBundle
from soloist.schedules import Schedule
from soloist.stores.base import Store

#: Give up walking a dense schedule after this many instants in one tick (catch-up skip and
#: latest only need the newest missed instant; the rest of the walk is skipped).
MAX_WALK = 100_000
#: At most this many missed occurrences of one stream are created per tick (catch_up=all).
CATCH_UP_BATCH = 1_000


#: Streams asked of the planning index, and written back, per round trip.
BATCH = 500
#: At most this many batches per tick; more due streams make the next tick start at once.
MAX_BATCHES = 20
#: Streams entered into the index per round trip (scopes, dynamic schedules at start).
ENSURE_BATCH = 1_000
#: After a plan write was refused, the planner looks again this much later.
RETRY_AFTER_REFUSAL = timedelta(milliseconds=100)


class Ownership(Protocol):
    """Which streams this instance plans: the partitions it holds (distributed mode)."""

    def held_slots(self) -> list[tuple[int, int]] | None:
        """The slot ranges of the partitions held and trusted now (empty: none; None: every
        slot, unfenced: the instances plan shared, not by partitions)."""
        ...

    def fence(self, slot: int) -> PlanFence | None:
        """The fence of the held partition that has ``slot``, or None if it is not held."""
        ...

    def announced(self) -> Announced | None:
        """What the live instances define, as last seen (None: not known yet)."""
        ...

    def resync(self) -> None:
        """Plan writes were refused: stop trusting the partitions until they are synced."""
        ...


@dataclass(frozen=True)
class Announced:
    """The code-defined jobs and the tasks the live instances define, and the store time at
    which that was read (at the latest)."""

    jobs: frozenset[str]
    tasks: frozenset[str]
    at: datetime


@dataclass
class Walk:
    """What planning one stream up to the horizon found (no I/O)."""

    kept: list[datetime]
    new_last: datetime | None
    upcoming: datetime | None


def occurrence_key(job: str, scope: str, plan_time: datetime) -> str:
    """The unique key of a scheduled occurrence: one per (job, scope, plan_time)."""
    return f"s:{job}:{scope}:{to_epoch_us(plan_time)}"


class Planner(Service):
    name = "planner"

    def __init__(
        self,
        bundle: ServiceBundle,
        store: Store,
        registry: Registry,
        *,
        lookahead: timedelta,
        misfire_grace: timedelta,
        refresh: timedelta,
        on_planned: Callable[[], None] | None = None,
        active: Callable[[], bool] = lambda: True,
        local_owner: str | None = None,
        ownership: Ownership | None = None,
    ) -> None:
        super().__init__(bundle)
        self.store = store
        self.registry = registry
        self.lookahead = lookahead
        self.misfire_grace = misfire_grace
        self.refresh = refresh
        self.on_planned = on_planned
        #: Whether this instance plans now (in leader mode: only while it leads).
        self.active = active
        #: In local mode, the instance whose private streams this planner keeps.
        self.local_owner = local_owner
        #: In distributed mode, the partitions this instance plans (None: every stream).
        self.ownership = ownership
        self.planned_total = 0
        #: Streams planned and store round trips made, in all (the bench reads them).
        self.streams_total = 0
        self.round_trips = 0
        #: CPU time this planner spent walking schedules and building plans (its own
        #: work, not the store's or the driver's).
        self.cpu_seconds = 0.0
        #: Code-defined streams entered into the index, and each scoped job's scopes.
        self._known: set[tuple[str, str]] = set()
        self._scope_sets: dict[str, set[str]] = {}
        self._discovered_at: float | None = None
        self._dynamic_seen = False
        self._entering: asyncio.Task[None] | None = None
        self._generation = 0
        self._parsed: dict[str, tuple[JobRecord, JobDef]] = {}

    def report(self) -> dict[str, object]:
        """What this planner did, in all (``GET /status``, the bench)."""
        return {
            "planned": self.planned_total,
            "streams": self.streams_total,
            "round_trips": self.round_trips,
            "cpu_seconds": round(self.cpu_seconds, 3),
        }

    async def stop(self) -> None:
        await super().stop()
        entering, self._entering = self._entering, None
        if entering is not None and not entering.done():
            entering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await entering

    def rediscover(self) -> None:
        """Enter every stream into the index again at the next tick (the store lost its
        data, or was replaced)."""
        self._known.clear()
        self._discovered_at = None
        self._dynamic_seen = False
        self._generation += 1
        entering = self._entering
        if entering is not None and not entering.done():
            entering.cancel()  # a pass from before: the next tick starts a new one
        self.wake()

    async def tick(self) -> float:
        if not self.active():
            self.log(logging.DEBUG, "not the leader: skipping planning", action="skip_planning")
            return self.refresh.total_seconds()  # winning the election wakes us
        if self.local_owner is not None:
            return await self._tick_local()
        slots = self.ownership.held_slots() if self.ownership is not None else None
        fenced = self.ownership is not None and slots is not None
        if slots == []:
            self.log(logging.DEBUG, "no partition held: skipping planning", action="skip_planning")
            return self.refresh.total_seconds()  # gaining a partition wakes us
        read_at = self.clock.monotonic()
        now = await self.store.now()
        self.round_trips += 1
        await self._discover(now)
        next_wake = now + self.refresh
        for _ in range(MAX_BATCHES):
            batch = await self.store.plan_due(now + self.lookahead, BATCH, slots)
            cpu = cpu_time()
            steps = [s for s in (self._step(due, now, fenced) for due in batch.streams) if s]
            self.cpu_seconds += cpu_time() - cpu
            results = await self.store.plan_advance_many(steps) if steps else []
            self.round_trips += 2 if steps else 1
            if not all(results):
                # Another planner moved a stream first, or a fence refused the write (the
                # partition passed on): look again shortly, after the partitions re-sync.
                next_wake = min(next_wake, now + RETRY_AFTER_REFUSAL)
                if fenced:
                    assert self.ownership is not None
                    self.ownership.resync()
            self._planned(steps, results)
            for step in steps:
                if step.next_plan_time is not None:
                    next_wake = min(next_wake, step.next_plan_time - self.lookahead)
            if batch.next_at is not None:
                # Never before a short pause: a store that stopped its scan early reports
                # where it stopped, which may be due already.
                later = max(batch.next_at - self.lookahead, now + RETRY_AFTER_REFUSAL)
                next_wake = min(next_wake, later)
            if len(batch.streams) < BATCH:
                break
            if not steps:
                # A batch only other instances can plan (shared planning): they will; look
                # again shortly rather than at the same batch at once.
                next_wake = min(next_wake, now + RETRY_AFTER_REFUSAL)
                break
        else:
            next_wake = now  # more due than one tick plans: go on at once
        # Only the store's clock: its time at the read, plus what elapsed since, locally.
        elapsed = self.clock.monotonic() - read_at
        return max(0.0, (next_wake - now).total_seconds() - elapsed)

    def _planned(self, steps: list[PlanAdvance], results: list[bool]) -> None:
        planned = sum(len(s.items) for s, ok in zip(steps, results, strict=True) if ok)
        self.streams_total += len(steps)
        if planned:
            self.planned_total += planned
            self.log(
                logging.DEBUG,
                "planned %d occurrence(s) of %d stream(s)",
                planned,
                len(steps),
                action="planned",
            )
            if self.on_planned is not None:
                self.on_planned()

    # -- entering streams into the index ----------------------------------------------------
    async def _discover(self, now: datetime) -> None:
        """Enter the streams of code-defined jobs that are new (every ``refresh``), and at
        the first tick every dynamic schedule's (a store written by an older version)."""
        moment = self.clock.monotonic()
        if self._discovered_at is not None and moment - self._discovered_at < (
            self.refresh.total_seconds()
        ):
            return
        self._discovered_at = moment
        current: set[tuple[str, str]] = set()
        for job in self.registry.jobs.values():
            try:
                scopes = await self._scopes(job, now)
            except Exception as exc:  # one failing provider must not stop the other jobs
                self.log(
                    logging.ERROR,
                    "job %s: the scope provider failed (%s: %s); keeping its last scopes",
                    job.name,
                    type(exc).__name__,
                    exc,
                    action="plan_error",
                    job=job.name,
                )
                current.update(k for k in self._known if k[0] == job.name)
                continue
            if job.scopes is not None:
                self._scope_sets[job.name] = set(scopes)
            current.update((job.name, scope) for scope in scopes)
        await self._ensure(sorted(current - self._known), now, revive=True)
        self._known = current
        if not self._dynamic_seen and (self._entering is None or self._entering.done()):
            # Reading every dynamic schedule can take seconds at 100k: beside the planning,
            # not before it, so that the partitions this instance just took are planned.
            self._entering = asyncio.create_task(
                self._enter_dynamic(self._generation), name="soloist-entering"
            )

    async def _enter_dynamic(self, generation: int) -> None:
        """Enter every dynamic schedule's stream once (a store written by an older version,
        or by older instances during a rolling deploy); a failure is retried next tick, and
        a pass that a :meth:`rediscover` overtook counts for nothing."""
        try:
            records = await self.store.job_list()
            self.round_trips += 1
            dynamic = [(r.name, "") for r in records if r.dynamic]
            await self._ensure(dynamic, None, revive=False)
            if generation == self._generation:
                self._dynamic_seen = True
            self.wake()
        except Exception as exc:
            self.log(
                logging.WARNING,
                "entering dynamic schedules failed (%s: %s); retrying",
                type(exc).__name__,
                exc,
                action="error",
            )

    async def _ensure(
        self, streams: list[tuple[str, str]], at: datetime | None, *, revive: bool
    ) -> None:
        for start in range(0, len(streams), ENSURE_BATCH):
            chunk = streams[start : start + ENSURE_BATCH]
            await self.store.plan_cursor_ensure(chunk, at, revive=revive)
            self.round_trips += 1

    # -- one due stream -----------------------------------------------------------------------
    def _step(self, due: DueStream, now: datetime, fenced: bool) -> PlanAdvance | None:
        """The write that plans one due stream (None: nothing to write here: its partition
        is no longer held, or, in shared planning, another instance plans it)."""
        cursor, record = due.cursor, due.job
        fence = None
        if fenced:
            assert self.ownership is not None
            fence = self.ownership.fence(cursor.slot)
            if fence is None:
                return None
        job, why = self._job_of(cursor, record)
        if job is None:
            if why == "elsewhere" and not fenced:
                return None
            later = now + self.refresh if why != "gone" else None
            return self._keep(cursor, later, fence)
        paused = record.paused if record is not None else False
        walk = plan_walk(
            job, cursor, now, self.lookahead, self.misfire_grace, record, paused=paused
        )
        items = [self._occurrence(job, cursor.scope, p) for p in walk.kept]
        return PlanAdvance(
            cursor.job,
            cursor.scope,
            cursor.last_plan_time,
            walk.new_last,
            len(items),
            items,
            walk.upcoming,
            fence,
        )

    @staticmethod
    def _keep(cursor: PlanCursor, later: datetime | None, fence: PlanFence | None) -> PlanAdvance:
        """The stream stays where it is; it is looked at again ``later`` (None: when it is
        entered again)."""
        last = cursor.last_plan_time
        return PlanAdvance(cursor.job, cursor.scope, last, last, 0, (), later, fence)

    def _job_of(self, cursor: PlanCursor, record: JobRecord | None) -> tuple[JobDef | None, str]:
        """The job that plans ``cursor``'s stream, or None and why: ``gone`` (the stream
        leaves the index: a scope no longer provided, a code-defined job no live instance
        defines), ``elsewhere`` (another live instance defines it) or ``unplannable``
        (looked at again after ``refresh``: nobody here defines it, its scope provider has
        not answered yet, its stored schedule cannot be read)."""
        job = self.registry.jobs.get(cursor.job)
        if job is not None and (record is None or not record.dynamic):
            if job.scopes is None:
                return (job, "") if cursor.scope == "" else (None, "gone")
            scopes = self._scope_sets.get(job.name)
            if scopes is None:
                return None, "unplannable"  # its provider has not answered here yet
            return (job, "") if cursor.scope in scopes else (None, "gone")
        dynamic = record is not None and record.dynamic
        if not dynamic or record is None or record.task not in self.registry.tasks:
            return None, self._why_not_here(cursor, record)
        parsed = self._parsed.get(record.name)
        if parsed is not None and parsed[0] == record:
            return parsed[1], ""
        try:
            job = JobDef.from_stored(record.name, record.task, record.schedule, record.payload)
        except Exception as exc:  # a bad stored record must not stop the others
            self.log(
                logging.ERROR,
                "dynamic schedule %r is unreadable: %s",
                record.name,
                exc,
                action="plan_error",
                job=record.name,
            )
            return None, "unplannable"
        if len(self._parsed) > 100_000:
            self._parsed.clear()
        self._parsed[record.name] = (record, job)
        return job, ""

    def _why_not_here(self, cursor: PlanCursor, record: JobRecord | None) -> str:
        """Why this instance cannot plan a stream it does not define: another live
        instance defines it, nobody does (a code-defined job: it leaves the index, and is
        entered again by an instance that defines it when it starts), or not known."""
        seen = self.ownership.announced() if self.ownership is not None else None
        if seen is None or record is None:
            return "unplannable"
        if record.dynamic:
            return "elsewhere" if record.task in seen.tasks else "unplannable"
        if cursor.job in seen.jobs:
            return "elsewhere"
        # Only when what was announced was read after the stream came due: an instance
        # that just started and entered it is then in what was read.
        due = cursor.next_plan_time
        return "gone" if due is not None and seen.at >= due else "unplannable"

    async def _scopes(self, job: JobDef, now: datetime) -> list[str]:
        if job.scopes is None:
            return [""]
        provided = job.scopes(now)
        if inspect.isawaitable(provided):
            provided = await provided
        scopes = {str(scope) for scope in provided}
        # Scopes appear in keys and dedupe keys, as names do: no control characters.
        bad = sorted(scope for scope in scopes if any(ord(c) < 32 for c in scope))
        if bad:
            self.log(
                logging.ERROR,
                "job %s: scopes %r contain control characters; not planned",
                job.name,
                bad,
                action="plan_error",
                job=job.name,
            )
        return sorted(scopes.difference(bad))

    # -- local mode: each instance's private copies, stream by stream --------------------------
    async def _tick_local(self) -> float:
        read_at = self.clock.monotonic()
        now = await self.store.now()
        records = {r.name: r for r in await self.store.job_list()}
        next_wake = now + self.refresh
        for job in self.registry.jobs.values():
            record = records.get(job.name)
            for scope in await self._scopes(job, now):
                upcoming = await self.plan_stream(job, scope, now, record)
                if upcoming is not None:
                    next_wake = min(next_wake, upcoming - self.lookahead)
        elapsed = self.clock.monotonic() - read_at
        return max(0.0, (next_wake - now).total_seconds() - elapsed)

    async def plan_stream(
        self, job: JobDef, scope: str, now: datetime, record: JobRecord | None
    ) -> datetime | None:
        """Plan one private stream (local mode) up to ``now + lookahead``; return its next
        plan time after that. These cursors stay out of the planning index."""
        assert self.local_owner is not None
        stream = local_name(job.name, self.local_owner)
        cursor = await self.store.plan_cursor_get(stream, scope)
        base = cursor or PlanCursor(stream, scope, None, 0)
        paused = record.paused if record is not None else False
        walk = plan_walk(job, base, now, self.lookahead, self.misfire_grace, None, paused=paused)
        if cursor is not None and walk.new_last == cursor.last_plan_time:
            return walk.upcoming  # nothing new to plan
        items = [self._occurrence(job, scope, p) for p in walk.kept]
        step = PlanAdvance(
            stream, scope, base.last_plan_time, walk.new_last, len(items), items, None
        )
        if not await self.store.plan_advance(step):
            return now  # not expected: the stream is this instance's own; look again
        self._planned([step], [True])
        return walk.upcoming

    def _occurrence(self, job: JobDef, scope: str, plan_time: datetime) -> NewOccurrence:
        """The occurrence of ``job`` at ``plan_time``. In local mode its task and key are
        this instance's own (its job stays the job's name, as users see it): each instance's
        private copy is a stream of its own, and since the overlap group is (job, scope,
        task), one instance's running copy never makes another's skip or wait."""
        key = occurrence_key(job.name, scope, plan_time)
        task = self.registry.task(job.task)
        owner = self.local_owner
        return NewOccurrence(
            dedupe_key=key if owner is None else local_name(key, owner),
            job=job.name,
            task=job.task if owner is None else local_name(job.task, owner),
            scope=scope,
            plan_time=plan_time,
            due_at=plan_time + job.schedule.jitter_offset(key),
            kind=Kind.SCHEDULE,
            max_attempts=task.retry.max_attempts,
            overlap=job.policy.overlap,
            payload=job.payload,
            max_crashes=task.max_crashes,
        )


def plan_walk(
    job: JobDef,
    cursor: PlanCursor,
    now: datetime,
    lookahead: timedelta,
    misfire_grace: timedelta,
    record: JobRecord | None,
    *,
    paused: bool = False,
) -> Walk:
    """Walk ``job``'s schedule from ``cursor`` up to ``now + lookahead``: the instants to
    plan (after the catch-up policy; none while ``paused``), the cursor's new last plan
    time, and the next instant after it (None: ``max_runs`` spent or no more instants).
    ``misfire_grace`` is the scheduler's; the job's own (its policy's) wins."""
    never = cursor.last_plan_time is None
    if cursor.last_plan_time is None:
        # A stream seen for the first time starts now (no back-fill of history), or,
        # for a dynamic schedule, when it was added.
        created = record.created_at if record is not None and job.dynamic else None
        base = min(now, created) if created is not None else now
        count = 0
    else:
        base, count = cursor.last_plan_time, cursor.planned_count
    horizon = now + lookahead
    # The job's own grace wins over the scheduler's.
    grace = job.policy.misfire_grace
    missed_before = now - (grace if grace is not None else misfire_grace)
    window = job.policy.catch_up_window
    max_runs = job.schedule.max_runs

    kept: list[datetime] = []
    latest_missed: datetime | None = None
    last_walked: datetime | None = None
    start = base
    # Instants older than the window are not kept anyway (next_after is strict); those
    # within the misfire grace are not missed, whatever the window.
    floor = min(now - window, missed_before) - _TICK if window is not None else None
    if floor is not None and start < floor:
        start = floor
    if job.policy.catch_up is not CatchUp.ALL and start < missed_before:
        start = newest_walk_start(job.schedule, start, missed_before)
    t = start
    for _ in range(MAX_WALK):
        nxt = job.schedule.next_after(t)
        if nxt is None or nxt > horizon:
            break
        if max_runs is not None and count + len(kept) >= max_runs:
            break
        t = last_walked = nxt
        if nxt < missed_before:
            if window is not None and nxt < now - window:
                continue
            if job.policy.catch_up is CatchUp.ALL:
                kept.append(nxt)
                if len(kept) >= CATCH_UP_BATCH:
                    break
            elif job.policy.catch_up is CatchUp.LATEST:
                latest_missed = nxt
            continue
        kept.append(nxt)
    else:
        # Too dense to walk in one tick: continue from just before the grace period.
        last_walked = missed_before
    if latest_missed is not None:
        kept.insert(0, latest_missed)
    if last_walked is None and never:
        # Nothing due yet, but record where this stream starts, so that instants
        # missed from here on are caught up (not silently skipped) later.
        last_walked = base
    if paused:
        kept = []
    if last_walked is not None:
        t = last_walked
    new_last = last_walked if last_walked is not None else cursor.last_plan_time
    if max_runs is not None and count + len(kept) >= max_runs:
        return Walk(kept, new_last, None)
    return Walk(kept, new_last, job.schedule.next_after(t))


#: The smallest step of time (schedules work in microseconds).
_TICK = timedelta(microseconds=1)
#: First step back when looking for the newest missed instant; doubles each probe.
_PROBE_STEP = timedelta(seconds=1)


def newest_walk_start(schedule: Schedule, start: datetime, before: datetime) -> datetime:
    """A point at or after ``start`` from which walking ``schedule`` forward still meets its
    newest instant before ``before`` (if it has one after ``start``) within
    :data:`_PROBE_STEP` of schedule time, found by probing backwards from ``before`` in
    doubling steps, then halving the step that found an instant: O(log(gap)) schedule
    steps instead of a walk over every instant since ``start`` (a schedule that ended long
    ago is found just before its end, not up to as far again before it)."""
    step = _PROBE_STEP
    hi = before  # no instant lies in (hi, before)
    while True:
        probe = before - step
        if probe <= start:
            lo = start
            nxt = schedule.next_after(start)
            if nxt is None or nxt >= before:
                return start  # nothing to meet
            break
        nxt = schedule.next_after(probe)
        if nxt is not None and nxt < before:
            lo = probe
            break
        hi = probe
        step *= 2
    # The newest instant before ``before`` lies in (lo, hi]: narrow that down.
    while hi - lo > _PROBE_STEP:
        mid = lo + (hi - lo) / 2
        nxt = schedule.next_after(mid)
        if nxt is not None and nxt < before:
            lo = mid
        else:
            hi = mid
    return lo
