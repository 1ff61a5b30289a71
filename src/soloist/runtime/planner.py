"""The planner materialises due occurrences of every recurring job, idempotently.

For each (job, scope) stream the store keeps a cursor: the last plan time materialised.
A tick reads the cursor, walks the schedule from there up to ``now + lookahead``, applies
the catch-up policy to instants that were missed (older than ``misfire_grace``), and
writes the new occurrences and the new cursor in one compare-and-set
(:meth:`Store.plan_advance`). Every instance plans; if two race, one CAS fails and that
planner simply re-reads. Duplicate occurrences are impossible anyway: each has a unique
dedupe key ``(job, scope, plan_time)``.

The planner never sleeps in fixed ticks: it wakes just before the earliest next plan time
of all streams, or after ``refresh`` at the latest (to see dynamic schedules, pauses and
new scopes that other instances wrote).

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

import inspect
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from soloist.clock import to_epoch_us
from soloist.models import CatchUp, JobRecord, Kind, NewOccurrence, PlanAdvance
from soloist.registry import JobDef, Registry, local_name
from soloist.runtime.service import Service, ServiceBundle
from soloist.schedules import Schedule
from soloist.stores.base import Store

#: Give up walking a dense schedule after this many instants in one tick (catch-up skip and
#: latest only need the newest missed instant; the rest of the walk is skipped).
MAX_WALK = 100_000
#: At most this many missed occurrences of one stream are created per tick (catch_up=all).
CATCH_UP_BATCH = 1_000


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
        self.planned_total = 0

    async def tick(self) -> float:
        if not self.active():
            self.log(logging.DEBUG, "not the leader: skipping planning", action="skip_planning")
            return self.refresh.total_seconds()  # winning the election wakes us
        read_at = self.clock.monotonic()
        now = await self.store.now()
        records = {r.name: r for r in await self.store.job_list()}
        jobs = list(self.registry.jobs.values()) + self._dynamic_jobs(records)
        next_wake = now + self.refresh
        for job in jobs:
            record = records.get(job.name)
            paused = record.paused if record is not None else False
            for scope in await self._scopes(job, now):
                upcoming = await self.plan_stream(job, scope, now, paused, record)
                if upcoming is not None:
                    next_wake = min(next_wake, upcoming - self.lookahead)
        # Only the store's clock: its time at the read, plus what elapsed since, locally.
        elapsed = self.clock.monotonic() - read_at
        return max(0.0, (next_wake - now).total_seconds() - elapsed)

    def _dynamic_jobs(self, records: dict[str, JobRecord]) -> list[JobDef]:
        jobs = []
        for record in records.values():
            if not record.dynamic or record.task not in self.registry.tasks:
                continue
            try:
                jobs.append(
                    JobDef.from_stored(record.name, record.task, record.schedule, record.payload)
                )
            except Exception as exc:  # a bad stored record must not stop the others
                self.log(
                    logging.ERROR,
                    "dynamic schedule %r is unreadable: %s",
                    record.name,
                    exc,
                    action="plan_error",
                    job=record.name,
                )
        return jobs

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

    async def plan_stream(
        self,
        job: JobDef,
        scope: str,
        now: datetime,
        paused: bool,
        record: JobRecord | None,
    ) -> datetime | None:
        """Plan one stream up to ``now + lookahead``; return its next plan time after that."""
        stream = job.name if self.local_owner is None else local_name(job.name, self.local_owner)
        cursor = await self.store.plan_cursor_get(stream, scope)
        if cursor is None:
            # A stream seen for the first time starts now (no back-fill of history), or,
            # for a dynamic schedule, when it was added.
            created = record.created_at if record is not None and job.dynamic else None
            base = min(now, created) if created is not None else now
            expected, count = None, 0
        else:
            base = cursor.last_plan_time or now
            expected, count = cursor.last_plan_time, cursor.planned_count
        horizon = now + self.lookahead
        missed_before = now - self.misfire_grace
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
        if last_walked is None and cursor is None:
            # Nothing due yet, but record where this stream starts, so that instants
            # missed from here on are caught up (not silently skipped) later.
            last_walked = base
        if paused:
            kept = []
        if last_walked is not None:
            items = [self._occurrence(job, scope, p) for p in kept]
            step = PlanAdvance(stream, scope, expected, last_walked, len(items), items)
            if await self.store.plan_advance(step):
                self.planned_total += len(items)
                if items:
                    self.log(
                        logging.DEBUG,
                        "planned %d occurrence(s) of %s up to %s",
                        len(items),
                        job.name,
                        last_walked.isoformat(),
                        action="planned",
                        job=job.name,
                        scope=scope,
                    )
                    if self.on_planned is not None:
                        self.on_planned()
            else:
                # Another instance planned this stretch first: look again at once.
                return now
            t = last_walked
        if max_runs is not None and count + len(kept) >= max_runs:
            return None
        return job.schedule.next_after(t)

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


#: The smallest step of time (schedules work in microseconds).
_TICK = timedelta(microseconds=1)
#: First step back when looking for the newest missed instant; doubles each probe.
_PROBE_STEP = timedelta(seconds=1)


def newest_walk_start(schedule: Schedule, start: datetime, before: datetime) -> datetime:
    """A point at or after ``start`` from which walking ``schedule`` forward still meets its
    newest instant before ``before`` (if it has one after ``start``), found by probing
    backwards from ``before`` in doubling steps: O(log(gap)) schedule steps instead of a
    walk over every instant since ``start``."""
    step = _PROBE_STEP
    while True:
        probe = before - step
        if probe <= start:
            return start
        nxt = schedule.next_after(probe)
        if nxt is not None and nxt < before:
            return probe
        step *= 2
