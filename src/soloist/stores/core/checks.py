"""The checks every store gets from the core, whatever its dialect: values crossing the
store boundary are validated and normalised here, once, so that drivers only translate.

Each function returns the value a driver may rely on (times as aware UTC datetimes, a
positive TTL, a :class:`~soloist.models.State`), or raises :class:`ConfigError` naming the
bad value and what was expected.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from soloist.clock import UTC
from soloist.errors import ConfigError
from soloist.models import (
    SLOTS,
    InstanceInfo,
    JobRecord,
    NewOccurrence,
    Outcome,
    PlanAdvance,
    State,
)

__all__ = [
    "MAX_LIMIT",
    "OUTCOME_STATES",
    "aware_utc",
    "check_delay",
    "check_info",
    "check_item",
    "check_items",
    "check_job",
    "check_limit",
    "check_outcomes",
    "check_partitions",
    "check_slots",
    "check_state",
    "check_step",
    "check_streams",
    "check_tasks",
    "positive_ttl",
]

#: The states an attempt's outcome may write (``occurrence_complete``). A tuple, not a
#: set: enum members hash by name, so a set would not find the plain string values.
OUTCOME_STATES = (State.SUCCEEDED, State.FAILED, State.DEAD)


def aware_utc(moment: datetime, what: str) -> datetime:
    """``moment`` in UTC; a naive datetime is a caller bug, named here."""
    if type(moment) is datetime and moment.tzinfo is UTC:
        return moment  # the common case, and the hot path of bulk inserts
    if not isinstance(moment, datetime):
        raise ConfigError(f"invalid {what} {moment!r}: expected a timezone-aware datetime")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ConfigError(f"invalid {what} {moment!r}: expected a timezone-aware datetime")
    return moment.astimezone(UTC)


def positive_ttl(ttl: timedelta, what: str = "ttl") -> timedelta:
    """``ttl`` if it is a positive duration: a lease born expired is a caller bug."""
    if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
        raise ConfigError(f"invalid {what} {ttl!r}: expected a positive timedelta")
    return ttl


def check_delay(delay: timedelta) -> timedelta:
    """``delay`` if it is a duration of zero or more."""
    if not isinstance(delay, timedelta) or delay < timedelta(0):
        raise ConfigError(f"invalid delay {delay!r}: expected a timedelta >= 0")
    return delay


#: The largest limit (or count kept) a driver is given: a larger one asks for the same
#: rows, and would not fit the drivers' integers (SQLite's, PostgreSQL's, Redis's are 64-bit).
MAX_LIMIT = 2**31 - 1


def check_limit(limit: int) -> int:
    """``limit`` if it is an integer (zero or less asks for nothing), at most
    :data:`MAX_LIMIT`."""
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise ConfigError(f"invalid limit {limit!r}: expected an integer")
    return min(limit, MAX_LIMIT)


def check_tasks(tasks: Collection[str]) -> list[str]:
    """``tasks`` as a sorted list of distinct names (a bare string is a caller bug: it
    would read as a set of one-letter task names)."""
    if isinstance(tasks, str):
        raise ConfigError(f"invalid tasks {tasks!r}: expected a collection of task names")
    return sorted(set(tasks))


def check_jobs(jobs: Collection[str]) -> list[str]:
    """``jobs`` as a sorted list of distinct job names (a bare string is a caller bug)."""
    if isinstance(jobs, str) or not all(isinstance(job, str) for job in jobs):
        raise ConfigError(f"invalid jobs {jobs!r}: expected a collection of job names")
    return sorted(set(jobs))


def check_state(state: State | str | None) -> State | None:
    """``state`` as a :class:`State` (None: any state)."""
    if state is None:
        return None
    try:
        return State(state)
    except ValueError:
        names = ", ".join(s.value for s in State)
        raise ConfigError(f"invalid state {state!r}: expected one of {names}") from None


def check_item(item: NewOccurrence) -> NewOccurrence:
    """``item`` with its plan_time and due_at in UTC."""
    plan, due = aware_utc(item.plan_time, "plan_time"), aware_utc(item.due_at, "due_at")
    if plan is item.plan_time and due is item.due_at:
        return item
    return replace(item, plan_time=plan, due_at=due)


def check_items(items: Sequence[NewOccurrence]) -> Sequence[NewOccurrence]:
    """``items`` with every time in UTC (the same sequence when they already are)."""
    checked = [check_item(item) for item in items]
    if all(new is old for new, old in zip(checked, items, strict=True)):
        return items
    return checked


def check_outcomes(outcomes: Sequence[Outcome]) -> Sequence[Outcome]:
    """``outcomes`` if each writes an outcome state (as a :class:`State`); retry_at in
    UTC."""
    checked: list[Outcome] = []
    changed = False
    for outcome in outcomes:
        if outcome.state not in OUTCOME_STATES:
            raise ConfigError(
                f"invalid outcome state {outcome.state!r} for {outcome.id}: "
                "expected succeeded, failed or dead"
            )
        if type(outcome.state) is not State:
            outcome, changed = replace(outcome, state=State(outcome.state)), True
        if outcome.retry_at is not None:
            retry_at = aware_utc(outcome.retry_at, "retry_at")
            if retry_at is not outcome.retry_at:
                outcome, changed = replace(outcome, retry_at=retry_at), True
        checked.append(outcome)
    return checked if changed else outcomes


def check_job(record: JobRecord) -> JobRecord:
    """``record`` with its created_at, if given, in UTC."""
    if record.created_at is None:
        return record
    created = aware_utc(record.created_at, "created_at")
    return record if created is record.created_at else replace(record, created_at=created)


def check_info(info: InstanceInfo) -> InstanceInfo:
    """``info`` with its started_at in UTC."""
    started = aware_utc(info.started_at, "started_at")
    return info if started is info.started_at else replace(info, started_at=started)


def _optional_utc(moment: datetime | None, what: str) -> datetime | None:
    return aware_utc(moment, what) if moment is not None else None


def check_step(step: PlanAdvance) -> PlanAdvance:
    """A plan step with every time in UTC, a count >= 0, ``new_last`` None only when
    ``expected_last`` is, and a fence of integers."""
    if not isinstance(step.added_count, int) or step.added_count < 0:
        raise ConfigError(f"invalid added_count {step.added_count!r}: expected an integer >= 0")
    if step.new_last is None and step.expected_last is not None:
        raise ConfigError(
            f"invalid new_last None for {step.job!r}/{step.scope!r}: a planned stream "
            "(expected_last set) must keep a last plan time"
        )
    fence = step.fence
    if fence is not None and not (_is_int(fence.partition) and _is_int(fence.epoch)):
        raise ConfigError(f"invalid fence {fence!r}: expected integer partition and epoch")
    return replace(
        step,
        expected_last=_optional_utc(step.expected_last, "expected_last"),
        new_last=_optional_utc(step.new_last, "new_last"),
        next_plan_time=_optional_utc(step.next_plan_time, "next_plan_time"),
        items=check_items(step.items),
    )


def check_slots(slots: Sequence[tuple[int, int]] | None) -> list[tuple[int, int]] | None:
    """Slot ranges ``[lo, hi)`` within ``[0, SLOTS]`` (None: every slot)."""
    if slots is None:
        return None
    checked = []
    for pair in slots:
        lo, hi = pair
        if not (_is_int(lo) and _is_int(hi) and 0 <= lo < hi <= SLOTS):
            raise ConfigError(
                f"invalid slot range {pair!r}: expected integers 0 <= lo < hi <= {SLOTS}"
            )
        checked.append((lo, hi))
    return checked


def check_streams(streams: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(job, scope) pairs of strings."""
    checked = []
    for pair in streams:
        if isinstance(pair, str) or len(pair) != 2 or not all(isinstance(x, str) for x in pair):
            raise ConfigError(f"invalid stream {pair!r}: expected a (job, scope) pair of strings")
        checked.append((pair[0], pair[1]))
    return checked


def check_partitions(want: Collection[int]) -> list[int]:
    """Partition numbers: distinct integers >= 0, sorted."""
    if isinstance(want, str) or not all(_is_int(p) and p >= 0 for p in want):
        raise ConfigError(f"invalid partitions {want!r}: expected integers >= 0")
    return sorted(set(want))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
