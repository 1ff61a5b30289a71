"""Schedules: when a job should run, as pure, immutable values.

A schedule answers one question, :meth:`Schedule.next_after`: the first planned instant
strictly after an aware datetime ``t``, or ``None`` once the schedule has ended. It never
reads the clock (the single exception: :func:`at` with a delay and no ``now``) and does
no I/O, so every process computes the same instants, and tests can ask about any time.

Options shared by ``cron`` and ``every``: ``start`` (no instant before it), ``end`` (no
instant after it), ``max_runs`` (stored only: the planner counts runs) and ``jitter`` (a
duration; zero means none; see :meth:`Schedule.jitter_offset`).
``start`` and ``end`` accept an aware datetime, an RFC 3339 string (``Z`` allowed) or a
date-only string ``"2027-01-01"``, which means midnight UTC of that day.

Cron and daylight saving time follow system (Vixie/Debian) cron. An expression is
*fixed-time* when neither its minute nor its hour field starts with ``*`` (the test of
Debian cron and cronsim):

* fixed-time: a wall time that the spring-forward gap skips runs once, at the transition
  instant (the first real wall time after the gap); a wall time that occurs twice when
  clocks fall back runs once, in its first pass (``fold=0``).
* otherwise (``*/15 * * * *``, ``0 * * * *``): real elapsed time. Instants are the ones
  whose wall time matches, so both passes of a repeated hour fire and a skipped hour has
  none.

cronsim does the calendar maths, but its DST handling is not used, because it covers
5-field expressions only, returns a time *before* ``t`` when ``t`` lies in the second pass
of a repeated hour, and skips matches after 30-minute shifts (Australia/Lord_Howe). So:

* fixed-time expressions (5 or 6 fields) iterate cronsim on *naive* wall-clock times
  starting from ``t``'s wall time; each match maps to an instant (ambiguous -> first
  pass, imaginary -> transition instant) and iteration goes on until the instant is
  strictly after ``t``. That guard is what stops a second run in the repeated hour.
* other expressions run cronsim in the fixed UTC offset in force at ``t``; if the zone's
  offset changes before the candidate, the search restarts at the change with the new
  offset. Changes are found by probing the offset a day apart and bisecting, which
  assumes a zone never changes its offset twice within one day.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from soloist._cron_fields import field_problem
from soloist._timemath import (
    format_duration,
    micros,
    offset_change,
    parse_instant,
    parse_rfc3339,
    wall_to_instant,
)
from soloist.durations import parse_duration
from soloist.errors import ConfigError, ScheduleError

__all__ = [
    "CronSchedule",
    "IntervalSchedule",
    "OneShotSchedule",
    "Schedule",
    "at",
    "cron",
    "every",
    "schedule_from_dict",
]

DurationLike = timedelta | str | float
InstantLike = datetime | str

_UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)
_ONE_US = timedelta(microseconds=1)
_MIN_INTERVAL = timedelta(milliseconds=1)
_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_CRON_EXPECTED = (
    "expected 5 fields (minute hour day month weekday) or 6 with leading seconds, "
    "or an alias such as '@daily'"
)
_WHEN_EXPECTED = (
    "expected an aware datetime, an RFC 3339 string such as '2026-12-01T09:00:00+01:00', "
    "or a delay such as '10s'"
)
_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")
_OPTIONS = {"start", "end", "max_runs", "jitter_s"}
_KEYS = {  # schedule_from_dict: type -> (required keys, optional keys)
    "cron": ({"expr"}, {"tz", *_OPTIONS}),
    "every": ({"interval_s"}, _OPTIONS),
    "at": ({"when"}, {"relative", "jitter_s"}),
}


def _duration(value: object, what: str, *, allow_zero: bool = False) -> timedelta:
    try:
        return parse_duration(value, what=what, allow_zero=allow_zero)
    except ConfigError as exc:
        raise ScheduleError(str(exc)) from exc


class Schedule(ABC):
    """A planned sequence of instants; concrete schedules are frozen dataclasses.

    ``start``/``end`` are aware UTC datetimes or None, ``max_runs`` a positive int or None
    (not applied by :meth:`next_after`), ``jitter`` a positive timedelta or None.
    """

    start: datetime | None
    end: datetime | None
    max_runs: int | None
    jitter: timedelta | None

    @property
    def relative(self) -> bool:
        """True only for a one-shot schedule given as a delay from ``now``."""
        return False

    def next_after(self, t: datetime) -> datetime | None:
        """First planned instant strictly after aware ``t``, in UTC; None once ended.

        No instant is before ``start`` or after ``end``. Raises :class:`ScheduleError`
        if ``t`` is naive.
        """
        if not isinstance(t, datetime) or t.utcoffset() is None:
            raise ScheduleError(f"next_after needs an aware datetime, got {t!r}")
        after = t.astimezone(_UTC)
        if self.start is not None and after < self.start:
            after = self.start - _ONE_US
        try:
            instant = self._first_after(after)
        except OverflowError:  # past datetime.max: the schedule has nothing left
            return None
        if instant is None or (self.end is not None and instant > self.end):
            return None
        return instant

    def jitter_offset(self, key: str) -> timedelta:
        """Deterministic offset in ``[0, jitter)`` from the SHA-256 of ``key``; zero if none.

        Every process computes the same value for the same key (no ``hash()`` salt).
        """
        if self.jitter is None:
            return timedelta(0)
        digest = hashlib.sha256(key.encode("utf-8")).digest()
        return timedelta(microseconds=int.from_bytes(digest[:8], "big") % micros(self.jitter))

    def with_limits(self, *, end: object = None, max_runs: object = None) -> Schedule:
        """A copy with ``end`` and/or ``max_runs`` set (``None`` keeps the current value).
        Refused for a one-shot schedule, which runs once anyway."""
        changes = {k: v for k, v in (("end", end), ("max_runs", max_runs)) if v is not None}
        if not changes:
            return self
        if isinstance(self, OneShotSchedule):
            raise ScheduleError(
                f"invalid {' and '.join(changes)} {tuple(changes.values())!r} for "
                f"{self.describe()}: a one-shot schedule runs once"
            )
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def in_default_zone(self, tz: str) -> Schedule:
        """This schedule, a cron expression that names no zone of its own evaluated in
        ``tz`` (the scheduler's default time zone); any other schedule unchanged."""
        return self

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form; :func:`schedule_from_dict` is its exact inverse."""

    @abstractmethod
    def describe(self) -> str:
        """Short human text such as ``"every 90s"``."""

    @abstractmethod
    def _first_after(self, t: datetime) -> datetime | None:
        """First instant strictly after UTC ``t``, ignoring ``start``/``end``."""

    def _check_options(self) -> None:
        start, end = parse_instant(self.start, "start"), parse_instant(self.end, "end")
        if start is not None and end is not None and end <= start:
            raise ScheduleError(
                f"invalid end {end.isoformat()!r}: must be after start {start.isoformat()!r}"
            )
        runs = self.max_runs
        if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 1):
            raise ScheduleError(f"invalid max_runs {runs!r}: expected a positive integer")
        if self.jitter is not None and (
            not isinstance(self.jitter, timedelta) or self.jitter <= timedelta(0)
        ):
            raise ScheduleError(f"invalid jitter {self.jitter!r}: expected a positive duration")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)

    def _options_dict(self) -> dict[str, Any]:
        return {
            "start": None if self.start is None else self.start.isoformat(),
            "end": None if self.end is None else self.end.isoformat(),
            "max_runs": self.max_runs,
            "jitter_s": None if self.jitter is None else self.jitter.total_seconds(),
        }

    def _options_text(self) -> str:
        parts = [f"from {self.start.isoformat()}"] if self.start else []
        parts += [f"until {self.end.isoformat()}"] if self.end else []
        parts += [f"at most {self.max_runs} runs"] if self.max_runs else []
        parts += [f"jitter {format_duration(self.jitter)}"] if self.jitter else []
        return "".join(f", {part}" for part in parts)


@dataclass(frozen=True)
class CronSchedule(Schedule):
    """A cron expression evaluated in the IANA zone ``tz`` (DST rule: see module doc).

    ``tz_unset``: no zone was given (``cron(expr)``); ``tz`` is then ``"UTC"`` until a
    scheduler applies its default time zone (:meth:`in_default_zone`)."""

    expr: str
    tz: str = "UTC"
    start: datetime | None = None
    end: datetime | None = None
    max_runs: int | None = None
    jitter: timedelta | None = None
    tz_unset: bool = field(default=False, compare=False, repr=False)
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _expanded: str = field(init=False, repr=False, compare=False)
    _fixed_time: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.expr, str):
            raise ScheduleError(f"invalid cron expression {self.expr!r}: {_CRON_EXPECTED}")
        expanded = _ALIASES.get(self.expr.strip().lower(), " ".join(self.expr.split()))
        fields = expanded.split()
        if expanded.startswith("@") or len(fields) not in (5, 6):
            why = "unknown alias" if expanded.startswith("@") else f"{len(fields)} fields"
            why = "@reboot has no planned instant" if expanded.lower() == "@reboot" else why
            raise ScheduleError(f"invalid cron expression {self.expr!r}: {why}; {_CRON_EXPECTED}")
        try:
            next(CronSim(expanded, datetime(2000, 1, 1)))
        except StopIteration:
            raise ScheduleError(
                f"invalid cron expression {self.expr!r}: it never fires (no date matches)"
            ) from None
        except Exception as exc:  # CronSimError, and whatever else garbage provokes
            named = field_problem(str(exc), fields) if isinstance(exc, CronSimError) else None
            detail = named or f"{exc if isinstance(exc, CronSimError) else repr(exc)}; "
            detail += "" if named else _CRON_EXPECTED
            raise ScheduleError(f"invalid cron expression {self.expr!r}: {detail}") from exc
        try:
            zone = ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError, TypeError, OSError) as exc:
            raise ScheduleError(
                f"unknown time zone {self.tz!r}: expected an IANA name such as 'Europe/Berlin'"
            ) from exc
        minute, hour = fields[-5], fields[-4]
        object.__setattr__(self, "_zone", zone)
        object.__setattr__(self, "_expanded", expanded)
        object.__setattr__(self, "_fixed_time", not (minute[0] == "*" or hour[0] == "*"))
        self._check_options()

    def in_default_zone(self, tz: str) -> Schedule:
        if not self.tz_unset:
            return self
        return dataclasses.replace(self, tz=tz, tz_unset=False)

    def skipped_wall_time(self, instant: datetime) -> datetime | None:
        """The local wall time (naive) that a daylight-saving gap skipped and that
        ``instant``, one of this schedule's, stands in for (a fixed-time expression runs
        such a time right after the gap), or None: ``instant`` is its own wall time."""
        if not self._fixed_time:
            return None
        before = (instant - _ONE_US).astimezone(self._zone).utcoffset()
        after = instant.astimezone(self._zone).utcoffset()
        if before is None or after is None or after <= before:
            return None  # not the end of a gap
        wall = instant.astimezone(self._zone).replace(tzinfo=None)
        gap_start = wall - (after - before)
        match = next(CronSim(self._expanded, gap_start - timedelta(seconds=1)), None)
        return match if match is not None and gap_start <= match < wall else None

    def to_dict(self) -> dict[str, Any]:
        """``{"type": "cron", "expr", "tz", "start", "end", "max_runs", "jitter_s"}``."""
        return {"type": "cron", "expr": self.expr, "tz": self.tz, **self._options_dict()}

    def describe(self) -> str:
        """E.g. ``"cron '*/5 * * * *' (UTC)"``."""
        return f"cron {self.expr!r} ({self.tz}){self._options_text()}"

    def _first_after(self, t: datetime) -> datetime | None:
        if self._fixed_time:
            wall = t.astimezone(self._zone).replace(tzinfo=None)
            for match in CronSim(self._expanded, wall):
                instant = wall_to_instant(match, self._zone)
                if instant > t:
                    return instant
            return None
        after = segment = t
        while True:
            offset = segment.astimezone(self._zone).utcoffset()
            assert offset is not None  # ZoneInfo always knows the offset of an instant
            try:
                found = next(CronSim(self._expanded, after.astimezone(timezone(offset))))
            except StopIteration:
                return None
            candidate = found.astimezone(_UTC)
            change = offset_change(self._zone, segment, candidate)
            if change is None:
                return candidate
            segment, after = change, change - _ONE_US


@dataclass(frozen=True)
class IntervalSchedule(Schedule):
    """Instants ``anchor + k * interval``; anchor is ``start``, else the Unix epoch."""

    interval: timedelta
    start: datetime | None = None
    end: datetime | None = None
    max_runs: int | None = None
    jitter: timedelta | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.interval, timedelta) or self.interval < _MIN_INTERVAL:
            raise ScheduleError(f"invalid interval {self.interval!r}: must be at least 1ms")
        self._check_options()

    def to_dict(self) -> dict[str, Any]:
        """``{"type": "every", "interval_s", "start", "end", "max_runs", "jitter_s"}``."""
        return {
            "type": "every",
            "interval_s": self.interval.total_seconds(),
            **self._options_dict(),
        }

    def describe(self) -> str:
        """E.g. ``"every 90s"``."""
        return f"every {format_duration(self.interval)}{self._options_text()}"

    def _first_after(self, t: datetime) -> datetime | None:
        anchor = self.start or _EPOCH
        step = micros(self.interval)
        k = micros(t - anchor) // step + 1  # integer maths: no float drift
        return anchor + timedelta(microseconds=k * step)


@dataclass(frozen=True)
class OneShotSchedule(Schedule):
    """A single instant ``when`` (UTC); ``relative`` if it came from a delay."""

    when: datetime
    relative: bool = False  # a field replacing the base property
    #: The delay it was made from (for messages only; not stored, not compared).
    delay: timedelta | None = field(default=None, compare=False, repr=False)
    jitter: timedelta | None = None
    start: datetime | None = field(default=None, init=False)
    end: datetime | None = field(default=None, init=False)
    max_runs: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        when = parse_instant(self.when, "when")
        if when is None:
            raise ScheduleError(f"invalid when {self.when!r}: {_WHEN_EXPECTED}")
        object.__setattr__(self, "when", when)
        if not isinstance(self.relative, bool):
            raise ScheduleError(f"invalid relative {self.relative!r}: expected a bool")
        self._check_options()

    def to_dict(self) -> dict[str, Any]:
        """``{"type": "at", "when", "relative", "jitter_s"}``."""
        jitter = self._options_dict()["jitter_s"]
        return {
            "type": "at",
            "when": self.when.isoformat(),
            "relative": self.relative,
            "jitter_s": jitter,
        }

    def describe(self) -> str:
        """E.g. ``"at 2026-12-01T08:00:00+00:00"`` or ``"at('10s') = 2026-..."``."""
        given = f"('{format_duration(self.delay)}') = " if self.delay is not None else " "
        return f"at{given}{self.when.isoformat()}{self._options_text()}"

    def _first_after(self, t: datetime) -> datetime | None:
        return self.when if self.when > t else None


def _jitter(value: object) -> timedelta | None:
    if value is None:
        return None
    delta = _duration(value, "jitter", allow_zero=True)
    return delta or None


def cron(
    expr: str,
    tz: str | None = None,
    *,
    start: InstantLike | None = None,
    end: InstantLike | None = None,
    max_runs: int | None = None,
    jitter: DurationLike | None = None,
) -> CronSchedule:
    """Cron schedule: 5 fields, 6 with leading seconds, or an alias (``@daily``...).

    ``tz``: the IANA zone of the expression; None: the default time zone of the
    scheduler it is given to (``Scheduler(timezone=...)``, ``SOLOIST_TIMEZONE``), UTC
    unless set.

    Raises :class:`ScheduleError` naming the value for a bad expression, ``@reboot``, an
    expression that never fires, an unknown zone, or bad options.
    """
    return CronSchedule(
        expr,
        tz if tz is not None else "UTC",
        start=parse_instant(start, "start"),
        end=parse_instant(end, "end"),
        max_runs=max_runs,
        jitter=_jitter(jitter),
        tz_unset=tz is None,
    )


def every(
    interval: DurationLike,
    *,
    start: InstantLike | None = None,
    end: InstantLike | None = None,
    max_runs: int | None = None,
    jitter: DurationLike | None = None,
) -> IntervalSchedule:
    """Fixed-rate schedule on a grid shared by all processes.

    ``every("5m")`` fires on multiples of 5 minutes since the Unix epoch, or since
    ``start`` when given. ``interval`` must be at least 1ms.
    """
    delta = _duration(interval, "interval")
    if delta < _MIN_INTERVAL:
        raise ScheduleError(f"invalid interval {interval!r}: must be at least 1ms")
    return IntervalSchedule(
        delta,
        start=parse_instant(start, "start"),
        end=parse_instant(end, "end"),
        max_runs=max_runs,
        jitter=_jitter(jitter),
    )


def at(
    when: InstantLike | timedelta,
    *,
    now: datetime | None = None,
    jitter: DurationLike | None = None,
) -> OneShotSchedule:
    """One-shot schedule at an aware datetime, an RFC 3339 string, or a delay.

    A delay (``"10s"``, a timedelta) is resolved against ``now``, an aware datetime; when
    ``now`` is None this reads ``datetime.now(timezone.utc)``, the module's only clock
    read. The result is then ``relative``.
    """
    instant: object = when
    delay = when if isinstance(when, timedelta) else None
    if isinstance(when, str):
        instant = parse_rfc3339(when.strip())
        try:
            delay = None if instant else parse_duration(when, what="delay", allow_zero=True)
        except ConfigError:
            delay = None
    if isinstance(instant, datetime):
        if instant.utcoffset() is None:
            raise ScheduleError(f"invalid when {when!r}: it has no UTC offset; {_WHEN_EXPECTED}")
        # Read again from ``when``: named as given if its offset takes it out of range.
        moment = parse_instant(when, "when")
        assert moment is not None  # (when is a time here)
        return OneShotSchedule(moment, jitter=_jitter(jitter))
    if delay is None or delay < timedelta(0):
        raise ScheduleError(f"invalid when {when!r}: {_WHEN_EXPECTED}")
    if now is None:
        now = datetime.now(_UTC)
    elif not isinstance(now, datetime) or now.utcoffset() is None:
        raise ScheduleError(f"invalid now {now!r}: expected an aware datetime")
    return OneShotSchedule(now + delay, relative=True, jitter=_jitter(jitter), delay=delay)


def schedule_from_dict(d: Mapping[str, Any]) -> Schedule:
    """Rebuild a schedule from :meth:`Schedule.to_dict` output; ScheduleError if bad."""
    if not isinstance(d, Mapping):
        raise ScheduleError(f"invalid schedule {d!r}: expected a mapping with a 'type' key")
    kind = d.get("type")
    if not isinstance(kind, str) or kind not in _KEYS:
        raise ScheduleError(f"invalid schedule {d!r}: 'type' must be 'cron', 'every' or 'at'")
    required, optional = _KEYS[kind]
    missing, unknown = required - set(d), set(d) - required - optional - {"type"}
    if missing or unknown:
        raise ScheduleError(
            f"invalid {kind} schedule {d!r}: missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    options: dict[str, Any] = {
        "start": d.get("start"),
        "end": d.get("end"),
        "max_runs": d.get("max_runs"),
        "jitter": d.get("jitter_s"),
    }
    if kind == "cron":
        return cron(d["expr"], d.get("tz", "UTC"), **options)
    if kind == "every":
        return every(d["interval_s"], **options)
    return OneShotSchedule(
        d["when"],
        relative=d.get("relative", False),
        jitter=_jitter(d.get("jitter_s")),
    )
