"""A job's timeline, looked at from outside the planner: backwards (a backfill plans the
instants of a past range) and forwards (the next fire times, daylight-saving shifts marked).

**Backfill** writes the occurrences the planner would have written for the instants of
``[start, end]``, with the planner's own deterministic keys (one per job, scope and plan
time: :func:`soloist.runtime.planner.occurrence_key`) through
:meth:`Store.occurrence_insert_many`, which ignores a key that exists. So an instant that
already ran, is planned, or was backfilled before is never doubled, and backfilling the
same range twice adds nothing the second time. What it cannot see is an occurrence that
history retention has deleted since. The instants run one after another in plan-time
order (they queue, whatever the job's ``overlap``), each with the job's attempts
and payload. A range is bounded (:data:`MAX_BACKFILL` instants) and must lie in the past:
the planner plans what is to come.

**Upcoming** instants come from the same pure ``Schedule.next_after`` the planner uses;
each is shown in its schedule's zone with what daylight saving does to it: a UTC offset
that differs from the previous instant's, a wall time skipped by a spring-forward gap (a
fixed-time cron runs it right after the gap), a wall time that a fall-back repeats. It
reads, never writes.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from soloist._timemath import parse_instant
from soloist.errors import ConfigError
from soloist.models import DEFAULT_MAX_CRASHES, JobRecord, JSONDict, Kind, NewOccurrence, Overlap
from soloist.registry import JobDef, Registry
from soloist.runtime.planner import occurrence_key
from soloist.schedules import CronSchedule, Schedule
from soloist.stores.base import Store

#: At most this many occurrences (instants times scopes) per backfill.
MAX_BACKFILL = 10_000
#: At most this many upcoming instants per look.
MAX_UPCOMING = 1_000
#: Occurrences per store call of a backfill.
BACKFILL_BATCH = 1_000

_ONE_US = timedelta(microseconds=1)
#: The earliest start of a backfill: no job ran before the Unix epoch, and a start near
#: year 1 overflows the arithmetic of dates (and of zones' local mean times).
_EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class PlannedJob:
    """A job as a process that may not define it sees it: its definition (from code, or
    rebuilt from its store record), the attempts and crashes its task allows, and whether
    it is paused (None: not known here)."""

    job: JobDef
    max_attempts: int
    max_crashes: int
    paused: bool | None = None
    in_code: bool = True


def planned_job(registry: Registry, name: str, record: JobRecord | None) -> PlannedJob | None:
    """The job ``name``: defined in this process, else from its store ``record`` (None: no
    such job)."""
    defn = registry.jobs.get(name)
    paused = record.paused if record is not None else None
    if defn is not None and (record is None or not record.dynamic):
        task = registry.task(defn.task)
        return PlannedJob(defn, task.retry.max_attempts, task.max_crashes, paused)
    if record is None:
        return None
    stored = record.schedule
    return PlannedJob(
        JobDef.from_stored(record.name, record.task, stored, record.payload),
        int(stored.get("max_attempts", 1)),
        int(stored.get("max_crashes", DEFAULT_MAX_CRASHES)),
        paused,
        in_code=False,
    )


# -- backfill -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Backfill:
    """What a backfill did: the occurrences of the range (instants times scopes), how many
    it added and how many were there already (ran, planned, or backfilled before)."""

    job: str
    start: datetime
    end: datetime
    scopes: tuple[str, ...]
    instants: int
    added: int

    @property
    def existing(self) -> int:
        return self.instants - self.added

    def to_json(self) -> JSONDict:
        return {
            "job": self.job,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "scopes": list(self.scopes),
            "instants": self.instants,
            "added": self.added,
            "existing": self.existing,
        }


def backfill_range(start: object, end: object, now: datetime) -> tuple[datetime, datetime]:
    """``start`` and ``end`` (aware datetimes, RFC 3339 strings or dates) checked: both
    given, ``start <= end <= now``."""
    first, last = parse_instant(start, "start"), parse_instant(end, "end")
    if first is None or last is None:
        raise ConfigError("a backfill needs both start and end: the past range to plan")
    if first < _EARLIEST:
        raise ConfigError(
            f"invalid start {first.isoformat()!r}: expected a time from {_EARLIEST.isoformat()} on"
        )
    if last < first:
        raise ConfigError(
            f"invalid end {last.isoformat()!r}: must not be before start {first.isoformat()!r}"
        )
    if last > now:
        raise ConfigError(
            f"invalid end {last.isoformat()!r}: it is in the future (the store's time is "
            f"{now.isoformat()}); a backfill plans past instants, the planner the rest"
        )
    return first, last


def instants_between(
    schedule: Schedule, start: datetime, end: datetime, limit: int
) -> list[datetime]:
    """The schedule's instants in ``[start, end]``; ConfigError past ``limit`` of them."""
    found: list[datetime] = []
    t = start - _ONE_US
    while True:
        nxt = schedule.next_after(t)
        if nxt is None or nxt > end:
            return found
        if len(found) >= limit:
            raise ConfigError(
                f"invalid range {start.isoformat()} to {end.isoformat()}: "
                f"{schedule.describe()} has more than {limit} instants in it; backfill at "
                f"most {limit} at a time (a shorter range)"
            )
        found.append(nxt)
        t = nxt


async def job_scopes(planned: PlannedJob, scopes: Iterable[str] | None, now: datetime) -> list[str]:
    """The scopes to backfill: those given, else the job's scope provider's (defined here),
    else the stream without a scope."""
    if scopes is None:
        provider = planned.job.scopes
        if provider is None:
            return [""]
        provided = provider(now)
        if inspect.isawaitable(provided):
            provided = await provided
        scopes = provided
    if isinstance(scopes, str):
        raise ConfigError(f"invalid scopes {scopes!r}: expected a list of scope keys")
    chosen = sorted({str(s) for s in scopes})
    bad = [s for s in chosen if any(ord(c) < 32 for c in s)]
    if bad:
        raise ConfigError(f"invalid scopes {bad!r}: expected keys without control characters")
    return chosen


async def backfill(
    store: Store,
    planned: PlannedJob,
    start: datetime,
    end: datetime,
    scopes: Sequence[str],
) -> Backfill:
    """Insert the occurrences of ``planned``'s instants in ``[start, end]`` for each scope,
    with the planner's keys; existing keys are left as they are."""
    job = planned.job
    if job.schedule.max_runs is not None:
        # The planner counts a stream's runs against max_runs from where it started;
        # instants added beside its count would run past the bound.
        raise ConfigError(
            f"job {job.name!r} has max_runs={job.schedule.max_runs}: a backfill would add "
            "runs that its count does not see; trigger it instead"
        )
    limit = MAX_BACKFILL // max(len(scopes), 1)
    instants = instants_between(job.schedule, start, end, limit)
    # One after another, oldest first, whatever the job's overlap: a skip job's would skip
    # each other, an allow job's would all start at once.
    overlap = Overlap.QUEUE
    items = [
        NewOccurrence(
            dedupe_key=key,
            job=job.name,
            task=job.task,
            scope=scope,
            plan_time=instant,
            due_at=instant + job.schedule.jitter_offset(key),
            kind=Kind.SCHEDULE,
            max_attempts=planned.max_attempts,
            overlap=overlap,
            payload=job.payload,
            max_crashes=planned.max_crashes,
        )
        for scope in scopes
        for instant in instants
        for key in (occurrence_key(job.name, scope, instant),)
    ]
    added = 0
    for i in range(0, len(items), BACKFILL_BATCH):
        added += await store.occurrence_insert_many(items[i : i + BACKFILL_BATCH])
    return Backfill(job.name, start, end, tuple(scopes), len(items), added)


async def backfill_job(
    store: Store,
    registry: Registry,
    name: str,
    start: object,
    end: object,
    scopes: Iterable[str] | None,
    unknown: Callable[[str], Awaitable[Exception]],
) -> Backfill:
    """Backfill the job ``name`` (defined here or in the store) over ``[start, end]``;
    ``unknown(name)`` makes the error for a name that is no job."""
    record = await store.job_get(name)
    planned = planned_job(registry, name, record)
    if planned is None:
        raise await unknown(name)
    now = await store.now()
    first, last = backfill_range(start, end, now)
    chosen = await job_scopes(planned, scopes, now)
    dynamic = record is not None and record.dynamic  # (never scoped)
    unscoped = dynamic or (planned.in_code and planned.job.scopes is None)
    if unscoped and chosen != [""]:
        # Its occurrences would carry a scope the job never has (ctx.scope), in streams
        # that no planner knows: a mistyped --scope must not make such runs.
        raise ConfigError(
            f"invalid scopes {chosen!r} for job {name!r}: it has no scopes (no scope "
            "provider); backfill it without --scope / scopes="
        )
    if scopes is None and not planned.in_code and chosen == [""]:
        # Not defined here: its scope provider is out of reach. A job with scopes has no
        # stream without one; backfilling that stream would run the job unscoped.
        assert record is not None  # (a job not defined here is known by its record)
        if not record.dynamic and await store.plan_cursor_get(name, "") is None:
            raise ConfigError(
                f"job {name!r} has no stream without a scope here (a job with scopes, or "
                "one no instance has planned yet): name its scopes (--scope, scopes=[...])"
            )
    return await backfill(store, planned, first, last, chosen)


# -- upcoming -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Upcoming:
    """One upcoming instant of a job, in its schedule's zone, with what daylight saving
    does to it (``note``; ``shift``: the UTC offset differs from the previous instant's)."""

    job: str
    plan_time: datetime
    zone: str
    shift: bool = False
    note: str | None = None

    @property
    def local(self) -> datetime:
        return self.plan_time.astimezone(ZoneInfo(self.zone))

    def to_json(self) -> JSONDict:
        local = self.local
        return {
            "job": self.job,
            "plan_time": self.plan_time.isoformat(),
            "local_time": local.isoformat(),
            "zone": self.zone,
            "utc_offset": _offset(local),
            "dst_shift": self.shift,
            "note": self.note,
        }


def upcoming(
    name: str, schedule: Schedule, after: datetime, count: int, remaining: int | None = None
) -> list[Upcoming]:
    """The next ``count`` instants of ``schedule`` after ``after`` (fewer if it ends, or if
    only ``remaining`` runs are left of its ``max_runs``), each annotated."""
    check_count(count)
    if remaining is not None:
        count = min(count, max(remaining, 0))
    zone = schedule.tz if isinstance(schedule, CronSchedule) else "UTC"
    tz = ZoneInfo(zone)
    previous = after.astimezone(tz).utcoffset()
    found: list[Upcoming] = []
    t = after
    while len(found) < count:
        nxt = schedule.next_after(t)
        if nxt is None:
            break
        local = nxt.astimezone(tz)
        offset = local.utcoffset()
        notes = []
        shift = offset != previous
        if shift and previous is not None and offset is not None:
            way = "forward" if offset > previous else "back"
            notes.append(f"UTC offset {_format(previous)} -> {_format(offset)} (clocks went {way})")
        skipped = schedule.skipped_wall_time(nxt) if isinstance(schedule, CronSchedule) else None
        if skipped is not None:
            notes.append(
                f"{skipped:%H:%M} does not exist on {skipped:%Y-%m-%d} (clocks spring forward): "
                f"runs at {local:%H:%M}, right after the gap"
            )
        if _repeated(local, tz):
            which = "second" if local.fold else "first"
            notes.append(
                f"{local:%H:%M} happens twice on {local:%Y-%m-%d} (clocks fall back): "
                f"this is its {which} pass"
            )
        found.append(Upcoming(name, nxt, zone, shift, "; ".join(notes) or None))
        previous, t = offset, nxt
    return found


async def upcoming_of_job(
    store: Store,
    registry: Registry,
    name: str,
    count: int,
    unknown: Callable[[str], Awaitable[Exception]],
) -> list[Upcoming]:
    """The next ``count`` instants of the job ``name`` after the store's time now (what
    remains of its ``max_runs``, as its stream without a scope counts them). Reads only."""
    check_count(count)
    record = await store.job_get(name)
    planned = planned_job(registry, name, record)
    if planned is None:
        raise await unknown(name)
    schedule = planned.job.schedule
    remaining = None
    if schedule.max_runs is not None:
        cursor = await store.plan_cursor_get(name, "")
        remaining = schedule.max_runs - (cursor.planned_count if cursor is not None else 0)
    return upcoming(name, schedule, await store.now(), count, remaining)


def check_count(count: object) -> int:
    """``count`` if it is an integer from 1 to :data:`MAX_UPCOMING`."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_UPCOMING:
        raise ConfigError(f"invalid count {count!r}: expected an integer from 1 to {MAX_UPCOMING}")
    return count


def _repeated(local: datetime, tz: ZoneInfo) -> bool:
    """Whether ``local``'s wall time occurs twice in ``tz`` (a fall-back's repeated hour)."""
    wall = local.replace(tzinfo=None)
    first = wall.replace(tzinfo=tz, fold=0)
    second = wall.replace(tzinfo=tz, fold=1)
    if first.utcoffset() == second.utcoffset():
        return False
    # Both readings must name real instants that show this wall time (not a gap).
    return all(
        d.astimezone(timezone.utc).astimezone(tz).replace(tzinfo=None) == wall
        for d in (first, second)
    )


def _offset(local: datetime) -> str:
    offset = local.utcoffset()
    return _format(offset) if offset is not None else "+00:00"


def _format(offset: timedelta) -> str:
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{mins:02d}"


__all__ = [
    "MAX_BACKFILL",
    "Backfill",
    "PlannedJob",
    "Upcoming",
    "backfill",
    "backfill_job",
    "planned_job",
    "upcoming",
    "upcoming_of_job",
]
