"""Unit tests of soloist.schedules: cron, every, at, options, serialisation, bad input."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from soloist.errors import ConfigError, ScheduleError
from soloist.schedules import (
    CronSchedule,
    IntervalSchedule,
    OneShotSchedule,
    Schedule,
    at,
    cron,
    every,
    schedule_from_dict,
)

UTC = timezone.utc


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def take(schedule: Schedule, t: datetime, n: int) -> list[datetime]:
    out: list[datetime] = []
    for _ in range(n):
        nxt = schedule.next_after(t)
        if nxt is None:
            break
        out.append(nxt)
        t = nxt
    return out


# --- cron -------------------------------------------------------------------------------


def test_cron_five_fields_every_five_minutes() -> None:
    """A 5-field cron fires on each matching minute, strictly after t."""
    s = cron("*/5 * * * *")
    assert take(s, utc(2026, 1, 1, 10, 0), 3) == [
        utc(2026, 1, 1, 10, 5),
        utc(2026, 1, 1, 10, 10),
        utc(2026, 1, 1, 10, 15),
    ]


def test_cron_six_fields_leading_seconds() -> None:
    """A 6-field cron reads its first field as seconds."""
    s = cron("*/20 * * * * *")
    assert take(s, utc(2026, 1, 1, 10, 0, 0), 3) == [
        utc(2026, 1, 1, 10, 0, 20),
        utc(2026, 1, 1, 10, 0, 40),
        utc(2026, 1, 1, 10, 1, 0),
    ]


def test_cron_result_is_strictly_after_t_with_microseconds() -> None:
    """next_after(t) is > t even when t has microseconds and sits just before a match."""
    s = cron("0 * * * * *")
    t = utc(2026, 1, 1, 10, 0, 0).replace(microsecond=500)
    assert s.next_after(t) == utc(2026, 1, 1, 10, 1, 0)
    assert s.next_after(t - timedelta(microseconds=501)) == utc(2026, 1, 1, 10, 0, 0)


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        ("@yearly", utc(2027, 1, 1)),
        ("@annually", utc(2027, 1, 1)),
        ("@monthly", utc(2026, 4, 1)),
        ("@weekly", utc(2026, 3, 22)),  # 2026-03-22 is a Sunday
        ("@daily", utc(2026, 3, 18)),
        ("@midnight", utc(2026, 3, 18)),
        ("@hourly", utc(2026, 3, 17, 13)),
    ],
)
def test_cron_aliases(alias: str, expected: datetime) -> None:
    """Each @alias maps to its usual 5-field expression."""
    assert cron(alias).next_after(utc(2026, 3, 17, 12, 30)) == expected


def test_cron_time_zone_converts_to_utc() -> None:
    """A cron in a zone matches local wall time and returns the instant in UTC."""
    s = cron("0 9 * * *", tz="Europe/Berlin")
    winter = s.next_after(utc(2026, 1, 10, 12))
    summer = s.next_after(utc(2026, 7, 10, 12))
    assert winter == utc(2026, 1, 11, 8)
    assert summer == utc(2026, 7, 11, 7)
    assert winter is not None and winter.tzinfo is UTC


def test_cron_day_of_month_or_day_of_week() -> None:
    """Restricted day-of-month and day-of-week combine with OR."""
    s = cron("0 0 13 * 5")  # the 13th, or any Friday
    days = [d.date().isoformat() for d in take(s, utc(2026, 2, 1), 6)]
    # Fridays of Feb 2026: 6, 13, 20, 27; then Friday Mar 6 and Friday-the-13th Mar 13.
    assert days == [
        "2026-02-06",
        "2026-02-13",
        "2026-02-20",
        "2026-02-27",
        "2026-03-06",
        "2026-03-13",
    ]
    assert cron("0 0 14 * 5").next_after(utc(2026, 2, 6, 1)) == utc(2026, 2, 13)


def test_cron_wildcard_day_of_week_means_and() -> None:
    """With day-of-week '*', only day-of-month restricts the day."""
    assert take(cron("0 0 13 * *"), utc(2026, 2, 1), 2) == [utc(2026, 2, 13), utc(2026, 3, 13)]


# --- every ------------------------------------------------------------------------------


def test_every_is_anchored_on_the_epoch() -> None:
    """every(interval) fires on multiples of interval since the Unix epoch."""
    s = every("5m")
    assert take(s, utc(2026, 1, 1, 10, 2, 7), 2) == [
        utc(2026, 1, 1, 10, 5),
        utc(2026, 1, 1, 10, 10),
    ]
    assert every("1s").next_after(utc(2026, 1, 1, 0, 0, 0).replace(microsecond=1)) == utc(
        2026, 1, 1, 0, 0, 1
    )
    assert every("90s").next_after(utc(1970, 1, 1)) == utc(1970, 1, 1, 0, 1, 30)


def test_every_is_anchored_on_start() -> None:
    """With start, every() fires at start, start+interval, ... and never before start."""
    s = every("90s", start="2026-12-01T09:00:07+01:00")
    assert take(s, utc(2020, 1, 1), 3) == [
        utc(2026, 12, 1, 8, 0, 7),
        utc(2026, 12, 1, 8, 1, 37),
        utc(2026, 12, 1, 8, 3, 7),
    ]
    assert s.start == utc(2026, 12, 1, 8, 0, 7)


def test_every_accepts_timedelta_and_numbers() -> None:
    """interval may be a timedelta or a number of seconds."""
    assert every(timedelta(minutes=2)) == every("2m") == every(120)


def test_every_sub_second_interval_without_drift() -> None:
    """A 10ms interval yields exact instants far from the epoch (integer maths)."""
    s = every("10ms")
    t = utc(2026, 6, 1, 12, 0, 0).replace(microsecond=5)
    assert s.next_after(t) == utc(2026, 6, 1, 12, 0, 0).replace(microsecond=10_000)


# --- at ---------------------------------------------------------------------------------


def test_at_aware_datetime_and_rfc3339() -> None:
    """at() accepts an aware datetime or an RFC 3339 string (with offset or Z)."""
    when = utc(2026, 12, 1, 8)
    assert at(when).when == when
    assert at("2026-12-01T09:00:00+01:00").when == when
    assert at("2026-12-01T08:00:00Z").when == when
    assert not at(when).relative


def test_at_fires_once() -> None:
    """A one-shot schedule yields its instant when t is before it, then None."""
    s = at("2026-12-01T08:00:00Z")
    assert s.next_after(utc(2026, 1, 1)) == utc(2026, 12, 1, 8)
    assert s.next_after(utc(2026, 12, 1, 8)) is None


def test_at_delay_resolves_against_now() -> None:
    """A delay string or timedelta is added to now and marks the schedule relative."""
    now = utc(2026, 1, 1, 12)
    s = at("10s", now=now)
    assert s.when == utc(2026, 1, 1, 12, 0, 10)
    assert s.relative
    assert at(timedelta(minutes=1), now=now).when == utc(2026, 1, 1, 12, 1)


def test_at_delay_without_now_reads_the_clock() -> None:
    """With no now, a delay is resolved against the current UTC time."""
    before = datetime.now(UTC)
    s = at("1h")
    assert before + timedelta(hours=1) <= s.when <= datetime.now(UTC) + timedelta(hours=1)


# --- options ----------------------------------------------------------------------------


def test_start_and_end_bound_the_instants() -> None:
    """No instant before start nor after end; an instant equal to end is kept."""
    s = cron("0 * * * *", start="2026-01-01T10:30:00Z", end="2026-01-01T12:00:00Z")
    assert take(s, utc(2026, 1, 1), 10) == [utc(2026, 1, 1, 11), utc(2026, 1, 1, 12)]
    assert s.next_after(utc(2026, 1, 1, 12)) is None


def test_date_only_means_midnight_utc() -> None:
    """A date-only start or end string means midnight UTC of that day."""
    s = every("1h", start="2027-01-01", end="2027-01-02")
    assert s.start == utc(2027, 1, 1)
    assert s.end == utc(2027, 1, 2)


def test_options_are_stored() -> None:
    """max_runs and jitter are stored as attributes; max_runs is not applied by next_after."""
    s = every("1m", max_runs=2, jitter="30s")
    assert s.max_runs == 2
    assert s.jitter == timedelta(seconds=30)
    assert len(take(s, utc(2026, 1, 1), 5)) == 5


@pytest.mark.parametrize("max_runs", [0, -1, 1.5, True, "3"])
def test_max_runs_must_be_positive_int(max_runs: object) -> None:
    """max_runs other than a positive int raises ScheduleError naming it."""
    with pytest.raises(ScheduleError, match=f"max_runs {max_runs!r}"):
        every("1m", max_runs=max_runs)  # type: ignore[arg-type]


def test_end_must_be_after_start() -> None:
    """end <= start raises ScheduleError."""
    with pytest.raises(ScheduleError, match="must be after start"):
        cron("* * * * *", start="2027-01-01", end="2027-01-01")
    with pytest.raises(ScheduleError, match="must be after start"):
        every("1m", start="2027-01-02", end="2027-01-01")


def test_naive_start_is_rejected() -> None:
    """A naive datetime or an offset-less string as start raises ScheduleError naming it."""
    with pytest.raises(ScheduleError, match=r"start datetime\.datetime\(2026, 1, 1, 0, 0\)"):
        every("1m", start=datetime(2026, 1, 1))
    with pytest.raises(ScheduleError, match="'2026-01-01T09:00:00'"):
        every("1m", end="2026-01-01T09:00:00")


@pytest.mark.parametrize("value", ["tomorrow", "2026-13-01", "2026-02-30", "01/02/2026"])
def test_bad_date_string_is_rejected(value: str) -> None:
    """An unparseable start string raises ScheduleError naming it."""
    with pytest.raises(ScheduleError, match=f"'{value}'"):
        cron("* * * * *", start=value)


def test_jitter_offset_is_deterministic_and_in_range() -> None:
    """jitter_offset is a stable hash of the key, within [0, jitter), zero without jitter."""
    s = every("1m", jitter="30s")
    offsets = [s.jitter_offset(f"job-{i}") for i in range(200)]
    assert all(timedelta(0) <= o < timedelta(seconds=30) for o in offsets)
    assert len(set(offsets)) > 150  # spread, not constant
    assert s.jitter_offset("job-1") == every("5m", jitter="30s").jitter_offset("job-1")
    # Pinned value: the same in every process and Python version (sha256, not hash()).
    assert s.jitter_offset("job-1") == timedelta(microseconds=23_320_618)
    assert every("1m").jitter_offset("job-1") == timedelta(0)
    assert every("1m", jitter=0).jitter is None


# --- serialisation and describe ---------------------------------------------------------


@pytest.mark.parametrize(
    "schedule",
    [
        cron("*/5 * * * *"),
        cron("0 30 2 * * *", "Europe/Berlin", start="2026-01-01", end="2027-01-01T10:00:00+02:00"),
        cron("@daily", "America/New_York", max_runs=3, jitter="1m"),
        every("90s"),
        every("10ms", start="2026-01-01T00:00:00.123456Z", max_runs=10, jitter="1.5s"),
        at("2026-12-01T09:00:00+01:00"),
        at("10s", now=datetime(2026, 1, 1, tzinfo=UTC), jitter="2s"),
    ],
    ids=lambda s: s.describe(),
)
def test_to_dict_round_trip(schedule: Schedule) -> None:
    """to_dict is JSON-serialisable and schedule_from_dict is its exact inverse."""
    data = json.loads(json.dumps(schedule.to_dict()))
    again = schedule_from_dict(data)
    assert again == schedule
    assert type(again) is type(schedule)
    assert again.to_dict() == schedule.to_dict()
    assert again.relative == schedule.relative


def test_to_dict_shape() -> None:
    """to_dict names the type and its fields."""
    assert cron("*/5 * * * *", jitter="1s").to_dict() == {
        "type": "cron",
        "expr": "*/5 * * * *",
        "tz": "UTC",
        "start": None,
        "end": None,
        "max_runs": None,
        "jitter_s": 1.0,
    }


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"type": "rrule"},
        {"type": ["cron"]},
        {"type": "every", "interval_s": 60, "max_runs": "3"},
        {"type": "cron"},
        {"type": "cron", "expr": "* * * * *", "color": "red"},
        {"type": "cron", "expr": 5},
        {"type": "every", "interval_s": -1},
        {"type": "every", "interval_s": 60, "start": "yesterday"},
        {"type": "at", "when": None},
        {"type": "at", "when": "2026-01-01T00:00:00Z", "relative": "yes"},
        ["type", "cron"],
    ],
)
def test_schedule_from_dict_rejects_bad_dicts(data: object) -> None:
    """A malformed schedule dict raises ScheduleError."""
    with pytest.raises(ScheduleError):
        schedule_from_dict(data)  # type: ignore[arg-type]


def test_describe() -> None:
    """describe() gives short human text."""
    assert cron("*/5 * * * *").describe() == "cron '*/5 * * * *' (UTC)"
    assert every("90s").describe() == "every 90s"
    assert every("5m").describe() == "every 5m"
    assert at("2026-12-01T09:00:00+01:00").describe() == "at 2026-12-01T08:00:00+00:00"
    assert "until 2027-01-01" in every("1h", end="2027-01-01").describe()


def test_schedules_are_immutable_values() -> None:
    """Schedules are frozen, hashable and compare by value."""
    s = cron("0 9 * * *", "Europe/Berlin")
    assert s == cron("0 9 * * *", "Europe/Berlin")
    assert hash(s) == hash(cron("0 9 * * *", "Europe/Berlin"))
    assert s != cron("0 9 * * *", "UTC")
    with pytest.raises(AttributeError):
        s.expr = "* * * * *"  # type: ignore[misc]
    assert isinstance(s, CronSchedule)
    assert isinstance(every("1m"), IntervalSchedule)
    assert isinstance(at("1s"), OneShotSchedule)


# --- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        "61 * * * *",
        "* 24 * * *",
        "* * 32 * *",
        "* * * 13 *",
        "* * * * 8",
        "*/0 * * * *",
        "* * *",
        "1 2 3 4 5 6 7",
        "",
        "a b c d e",
        "0 0 30 2 *",
        "@reboot",
        "@fortnightly",
        "5-1 * * * *",
        "1#2 * * * *",
    ],
)
def test_bad_cron_expression(expr: str) -> None:
    """A bad cron expression raises ScheduleError naming it and saying what is expected
    (the bad field's problem: tests/unit/test_cron_errors.py)."""
    with pytest.raises(ScheduleError) as info:
        cron(expr)
    message = str(info.value)
    assert repr(expr) in message
    assert any(word in message for word in ("expected", "never fires", " field ")), message


def test_bad_cron_expression_type() -> None:
    """A non-string cron expression raises ScheduleError."""
    with pytest.raises(ScheduleError, match="None"):
        cron(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("tz", ["Mars/Base", "", "utc", "../etc/passwd", "Europe"])
def test_bad_time_zone(tz: str) -> None:
    """An unknown zone raises ScheduleError naming it and giving an IANA example."""
    with pytest.raises(ScheduleError, match=f"unknown time zone {tz!r}.*IANA"):
        cron("* * * * *", tz=tz)


@pytest.mark.parametrize("interval", ["0s", "-5m", "fast", "0.5ms", timedelta(0), True])
def test_bad_interval(interval: object) -> None:
    """A non-positive, unparseable or sub-millisecond interval raises ScheduleError."""
    with pytest.raises(ScheduleError) as info:
        every(interval)  # type: ignore[arg-type]
    assert isinstance(info.value, ConfigError)
    assert "interval" in str(info.value)


def test_bad_jitter() -> None:
    """An unparseable jitter raises ScheduleError naming it."""
    with pytest.raises(ScheduleError, match="'lots'"):
        cron("* * * * *", jitter="lots")


@pytest.mark.parametrize(
    "when",
    [
        "2026-12-01T09:00:00",
        "2026-12-01",
        "soon",
        "-5s",
        5,
        datetime(2026, 12, 1),
        timedelta(seconds=-1),
    ],
)
def test_bad_at(when: object) -> None:
    """at() with a naive datetime or unparseable value raises ScheduleError naming it."""
    with pytest.raises(ScheduleError) as info:
        at(when)  # type: ignore[arg-type]
    assert repr(when) in str(info.value)
    assert "RFC 3339" in str(info.value)


def test_at_naive_now_is_rejected() -> None:
    """A naive now for a delay raises ScheduleError."""
    with pytest.raises(ScheduleError, match="now"):
        at("10s", now=datetime(2026, 1, 1))


@pytest.mark.parametrize("schedule", [cron("* * * * *"), every("1m"), at("1s")])
def test_next_after_rejects_naive_t(schedule: Schedule) -> None:
    """next_after(naive) raises ScheduleError naming the value."""
    with pytest.raises(ScheduleError, match=r"datetime\.datetime\(2026, 1, 1, 0, 0\)"):
        schedule.next_after(datetime(2026, 1, 1))
