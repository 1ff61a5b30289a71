"""The schedule maths where ``make mutate MUTATE=schedules`` found no test: each error names
the option and the value at fault, instants stay in UTC whatever the machine's zone, the
stand-in for a wall time that daylight saving skipped, durations as text, and the
options a one-shot schedule and a serialised schedule carry."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from soloist._cron_fields import field_problem
from soloist._timemath import format_duration, offset_change, parse_rfc3339, wall_to_instant
from soloist.errors import ScheduleError
from soloist.schedules import (
    IntervalSchedule,
    OneShotSchedule,
    Schedule,
    at,
    cron,
    every,
    schedule_from_dict,
)

UTC = timezone.utc
T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: Europe/Paris springs forward on 2026-03-29: 02:00 local (01:00 UTC) becomes 03:00.
PARIS_GAP_END = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
#: time.tzset, which makes the process read its local zone (TZ) again, is Unix-only.
needs_tzset = pytest.mark.skipif(
    not hasattr(time, "tzset"), reason="the local zone cannot be changed without time.tzset"
)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: cron("* * * * *", start="bogus"), "invalid start 'bogus': expected an aware"),
        (lambda: cron("* * * * *", end="bogus"), "invalid end 'bogus': expected an aware"),
        (lambda: every("1m", start="bogus"), "invalid start 'bogus': expected an aware"),
        (lambda: every("1m", end="bogus"), "invalid end 'bogus': expected an aware"),
        (lambda: every("bogus"), "invalid interval 'bogus': expected a duration"),
        (lambda: every("1m", jitter="bogus"), "invalid jitter 'bogus': expected a duration"),
        (lambda: at(T0, jitter="bogus"), "invalid jitter 'bogus': expected a duration"),
        (lambda: at("-5s", now=T0), "invalid when '-5s': expected an aware datetime"),
        (lambda: at("9999-12-31T23:59:59-12:00"), "invalid when '9999-12-31T23:59:59-12:00'"),
        (lambda: OneShotSchedule("bogus"), "invalid when 'bogus': expected an aware"),
        (lambda: OneShotSchedule(None), "invalid when None: expected an aware datetime"),
        (lambda: every("0s"), "invalid interval '0s': must be positive"),
        (lambda: cron(5), "invalid cron expression 5: expected 5 fields (minute hour day"),
        (
            lambda: cron("* * * * *", start="bogus"),
            "invalid start 'bogus': expected an aware datetime, an RFC 3339 string such as "
            "'2026-12-01T09:00:00+01:00', or a date such as '2027-01-01' (midnight UTC)",
        ),
        (
            lambda: every("1m", end="2026-01-01T09:00:00"),
            "invalid end '2026-01-01T09:00:00': it has no UTC offset; give an aware datetime "
            "or a string with an offset such as '2026-12-01T09:00:00+01:00'",
        ),
        (lambda: OneShotSchedule(T0, relative="yes"), "invalid relative 'yes': expected a bool"),
        (lambda: IntervalSchedule(timedelta(0)), "invalid interval datetime.timedelta(0): must"),
        (
            lambda: IntervalSchedule(timedelta(minutes=1), jitter="x"),
            "invalid jitter 'x': expected a positive duration",
        ),
        (
            lambda: IntervalSchedule(timedelta(minutes=1), jitter=timedelta(0)),
            "invalid jitter datetime.timedelta(0): expected a positive duration",
        ),
        (
            lambda: IntervalSchedule(timedelta(minutes=1), start="x"),
            "invalid start 'x': expected an aware datetime",
        ),
        (
            lambda: IntervalSchedule(timedelta(minutes=1), end="x"),
            "invalid end 'x': expected an aware datetime",
        ),
        (lambda: schedule_from_dict([1]), "invalid schedule [1]: expected a mapping with a"),
        (
            lambda: schedule_from_dict({"type": "x"}),
            "invalid schedule {'type': 'x'}: 'type' must be 'cron', 'every' or 'at'",
        ),
        (
            lambda: schedule_from_dict({"type": "cron", "bogus": 1}),
            "invalid cron schedule {'type': 'cron', 'bogus': 1}: missing ['expr'], unknown",
        ),
        (
            lambda: at(T0).with_limits(end=T0, max_runs=3),
            "invalid end and max_runs (datetime.datetime(2026, 1, 1, 0, 0, tzinfo=datetime."
            "timezone.utc), 3) for at 2026-01-01T00:00:00+00:00: a one-shot schedule runs once",
        ),
    ],
)
def test_a_bad_option_is_named_with_its_value(make: Callable[[], Schedule], expected: str) -> None:
    """The error names the option (start, end, interval, jitter, when, relative...) and
    the value given, not only that something is wrong."""
    with pytest.raises(ScheduleError) as raised:
        make()
    assert str(raised.value).startswith(expected), str(raised.value)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("@sometimes", "'@sometimes': unknown alias; expected 5 fields"),
        ("@REBOOT", "'@REBOOT': @reboot has no planned instant; expected 5 fields"),
        ("* * * *", "'* * * *': 4 fields; expected 5 fields"),
        ("0 0 31 2 *", "day-of-month field '31' never comes in month field '2' (no such date)"),
        ("0,61 * * * *", "minute field '0,61': '61' is out of range 0-59"),
        ("61 0 0 * * *", "second field '61' is out of range 0-59"),
        ("0 0 1,0 * *", "day-of-month field '1,0': '0' is out of range 1-31"),
        ("0 0 * * 8L", "day-of-week field '8L': '8' is out of range 0-7"),
        ("0 0 * * 5L,8", "day-of-week field '5L,8': '8' is out of range 0-7"),
        ("0 0 * * 5#0", "day-of-week field '5#0': '0' is not an nth day: expected 1 to 5"),
        ("0 0 * * 5#6", "day-of-week field '5#6': '6' is not an nth day: expected 1 to 5"),
        ("0 0 * * 8#2", "day-of-week field '8#2': '8' is out of range 0-7"),
        ("0 0 * * 2#3#4", "day-of-week field '2#3#4': '3#4' is not an nth day"),
        ("*/0 * * * *", "minute field '*/0': '0' is not a step: expected a whole number >= 1"),
        ("*/x * * * *", "minute field '*/x': 'X' is not a step"),
        ("61/5 * * * *", "minute field '61/5': '61' is out of range 0-59"),
        ("0/5/2 * * * *", "minute field '0/5/2': '5/2' is not a step"),
        ("0 0 * MAR-JAN *", "month field 'MAR-JAN' is a range that runs backwards"),
        ("0 0 * 2-JAN *", "month field '2-JAN' is a range that runs backwards"),
        ("0 0 * FEB-1 *", "month field 'FEB-1' is a range that runs backwards"),
        ("0 3-2 * * *", "hour field '3-2' is a range that runs backwards"),
        ("0 0 * * 5-3", "day-of-week field '5-3' is a range that runs backwards"),
        ("0 0 1-2-3 * *", "day-of-month field '1-2-3': '2-3' is not a number"),
        ("0 0 * * L", "day-of-week field 'L' has a missing number: expected a number 0-7"),
        ("0 0 * * SUNL", "day-of-week field 'SUNL': 'SUN' is not a number: expected a number 0-7"),
        ("0 0 * LW *", "month field 'LW' is not a number: expected a number 1-12 or a name"),
        ("0 0 * * 1,,2", "day-of-week field '1,,2' has an empty item in its list"),
        ("0 0 LW,32 * *", "day-of-month field 'LW,32': '32' is out of range 1-31"),
        ("0 L * * *", "hour field 'L' is not a number: expected a number 0-23"),
        ("* 0 0 * * 7L", None),
        ("@foo * * * *", "'@foo * * * *': unknown alias; expected 5 fields"),
        ("0 0 * * 1-SUN", "day-of-week field '1-SUN' is a range that runs backwards"),
        ("0 0 L,32 * *", "day-of-month field 'L,32': '32' is out of range 1-31"),
        ("*,61 * * * *", "minute field '*,61': '61' is out of range 0-59"),
        ("0 0 * * 5#1,8", "day-of-week field '5#1,8': '8' is out of range 0-7"),
        ("0 0 * * 5#5,8", "day-of-week field '5#5,8': '8' is out of range 0-7"),
        ("0 0 * * 3-3,8", "day-of-week field '3-3,8': '8' is out of range 0-7"),
    ],
)
def test_a_bad_cron_field_is_explained(expr: str, expected: str | None) -> None:
    """A refused expression is named with the field, the piece of it at fault and why
    (and an expression cronsim accepts is not refused)."""
    if expected is None:
        assert cron(expr).next_after(T0) is not None
        return
    with pytest.raises(ScheduleError) as raised:
        cron(expr)
    assert str(raised.value).startswith(f"invalid cron expression {expr!r}: "), raised.value
    assert expected in str(raised.value), str(raised.value)


def test_a_bad_cron_field_message_is_the_explanation_alone() -> None:
    """An explained field is the whole message: no generic advice appended."""
    with pytest.raises(ScheduleError) as raised:
        cron("0,61 * * * *")
    assert str(raised.value) == (
        "invalid cron expression '0,61 * * * *': minute field '0,61': '61' is out of range 0-59"
    )


@pytest.mark.parametrize("expr", ["0 0 */31 * MON#5", "0 0 */31 2 5#5"])
def test_a_cron_expression_that_never_fires_is_refused_by_name(expr: str) -> None:
    """An expression whose every field is valid but that no date matches (the 1st of a
    month that is its 5th Monday, or Friday) is refused, naming it and saying why."""
    with pytest.raises(ScheduleError) as raised:
        cron(expr)
    assert str(raised.value) == (
        f"invalid cron expression {expr!r}: it never fires (no date matches)"
    )


@pytest.mark.parametrize("fields", [["*"] * 5, ["*"] * 6])
def test_a_cronsim_message_that_names_no_field_is_explained_by_nothing(
    fields: list[str],
) -> None:
    """field_problem answers None for a cronsim message that names no field (its 'Wrong
    number of fields'), as its docstring says, whether the expression has 5 fields or 6.
    Private helper: cron() counts the fields before cronsim reads them, so that message
    never reaches field_problem through the public API."""
    assert field_problem("Wrong number of fields", fields) is None
    assert field_problem("Bad seconds", fields) is None


def test_instants_are_read_with_a_lowercase_z_and_stored_in_utc() -> None:
    """An RFC 3339 time ending in a lowercase 'z' is UTC (datetime.fromisoformat refuses
    it); start and end given to a schedule class directly are stored as UTC datetimes."""
    assert at("2026-01-01T00:00:00z").when == T0
    assert every("1m", start="2026-01-01T00:00:00z").start == T0
    plus_two = timezone(timedelta(hours=2))
    direct = IntervalSchedule(
        timedelta(minutes=1), start="2026-01-01", end=datetime(2026, 6, 1, 2, tzinfo=plus_two)
    )
    assert direct.start == T0 and direct.start.tzinfo is UTC
    assert direct.end == datetime(2026, 6, 1, tzinfo=UTC) and direct.end.tzinfo is UTC


def test_an_offset_change_is_found_to_the_microsecond_within_a_day() -> None:
    """offset_change bisects a day that holds a change down to the change itself."""
    paris = ZoneInfo("Europe/Paris")
    lo, hi = datetime(2026, 3, 28, 12, 0, 0, 123, tzinfo=UTC), datetime(2026, 3, 30, tzinfo=UTC)
    assert offset_change(paris, lo, hi) == PARIS_GAP_END
    assert offset_change(paris, lo, PARIS_GAP_END - timedelta(microseconds=1)) is None


def test_an_offset_change_one_microsecond_after_t_restarts_the_search_there() -> None:
    """One microsecond before Paris's spring change, an every-third-hour cron (real
    elapsed time) finds the change itself, 03:00 local, not the third hour after it."""
    thirds = cron("0 */3 * * *", "Europe/Paris")
    assert thirds.next_after(PARIS_GAP_END - timedelta(microseconds=1)) == PARIS_GAP_END


def test_a_repeated_wall_time_is_its_first_pass_whatever_its_fold() -> None:
    """wall_to_instant maps a wall time that occurs twice to its first pass, also when the
    naive time carries fold=1. Private helper: cronsim yields every match with fold=0, so
    no schedule hands it fold=1 through the public API."""
    # Paris falls back on 2026-10-25: 03:00 local (01:00 UTC) becomes 02:00 again.
    paris, wall = ZoneInfo("Europe/Paris"), datetime(2026, 10, 25, 2, 30)
    first_pass = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert wall_to_instant(wall, paris) == first_pass
    assert wall_to_instant(wall.replace(fold=1), paris) == first_pass


@pytest.fixture
def india_local_time() -> Iterator[None]:
    """The process's local zone (what ``astimezone()`` with no argument uses) set to
    Asia/Kolkata, +05:30, for the test."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Kolkata"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


@pytest.fixture
def local_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """A function that sets the process's local zone (TZ, read again by time.tzset) for
    the test; the zone the process had is restored, and read again, afterwards."""

    def set_local_zone(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield set_local_zone
    monkeypatch.undo()
    time.tzset()


def is_utc(moment: datetime | None) -> bool:
    return moment is not None and moment.utcoffset() == timedelta(0)


def test_instants_are_utc_whatever_the_local_zone(india_local_time: None) -> None:
    """start, end, when and every planned instant are UTC datetimes even where the
    machine's own zone is not UTC (the local zone is never read)."""
    paris = "2026-06-01T09:00:00+02:00"
    for schedule in (
        cron("0 9 * * *", "Europe/Paris", start=paris, end="2027-01-01"),
        cron("*/15 * * * *", "Europe/Paris", start=paris),
        every("90s", start=paris, end="2027-01-01"),
    ):
        assert is_utc(schedule.start) and schedule.start == parse_rfc3339(paris)
        assert schedule.end is None or is_utc(schedule.end)
        later = schedule.next_after(datetime(2026, 7, 1, 12, tzinfo=timezone(timedelta(hours=5))))
        assert is_utc(later), (schedule, later)
    assert is_utc(at(paris).when) and is_utc(OneShotSchedule(paris).when)
    # A fixed-time expression across the autumn change of a zone that is not the local one.
    autumn = cron("30 1 * * *", "Europe/Paris").next_after(datetime(2026, 10, 24, tzinfo=UTC))
    assert autumn == datetime(2026, 10, 24, 23, 30, tzinfo=UTC) and is_utc(autumn)


def test_interval_schedules_cross_an_offset_change_in_the_zone_given(
    india_local_time: None,
) -> None:
    """An every-N-minutes cron finds the next instant across a daylight-saving change of
    its own zone, not of the machine's: at 01:59:59 UTC-offset +01:00 on the spring day,
    the next quarter hour in Paris is 03:00 local (01:00 UTC)."""
    quarter = cron("*/15 * * * *", "Europe/Paris")
    before_gap = PARIS_GAP_END - timedelta(seconds=1)
    assert quarter.next_after(before_gap) == PARIS_GAP_END
    assert offset_change(ZoneInfo("Europe/Paris"), T0, PARIS_GAP_END) == PARIS_GAP_END
    assert offset_change(ZoneInfo("Europe/Paris"), T0, PARIS_GAP_END - timedelta(1)) is None


@needs_tzset
@pytest.mark.parametrize("local", ["UTC", "Europe/London", "Asia/Tokyo"])
def test_a_skipped_wall_time_runs_at_the_transition_in_utc_whatever_the_local_zone(
    local: str, local_zone: Callable[[str], None]
) -> None:
    """A fixed-time cron whose wall time the spring gap skips runs at the transition
    instant, as a UTC datetime, whatever the machine's own zone: only the schedule's
    zone is read."""
    local_zone(local)
    # London springs forward on 2026-03-29: 01:00 GMT (01:00 UTC) becomes 02:00 BST.
    instant = cron("30 1 * * *", "Europe/London").next_after(datetime(2026, 3, 28, 12, tzinfo=UTC))
    assert instant == datetime(2026, 3, 29, 1, tzinfo=UTC) and is_utc(instant), instant


@needs_tzset
def test_nothing_comes_after_the_last_instant_whatever_the_local_zone(
    local_zone: Callable[[str], None],
) -> None:
    """Asked after the last representable instant, each kind of schedule answers None (it
    has nothing left), also where the machine's zone is ahead of UTC and that instant,
    read in it, would be past year 9999."""
    local_zone("Asia/Tokyo")
    last = datetime.max.replace(tzinfo=UTC)
    for schedule in (every("1m"), cron("* * * * *"), cron("0 9 * * *", "Europe/Paris"), at(T0)):
        assert schedule.next_after(last) is None, schedule


@pytest.mark.parametrize(
    ("expr", "skipped"),
    [
        ("30 2 * * *", datetime(2026, 3, 29, 2, 30)),
        ("0 2 * * *", datetime(2026, 3, 29, 2, 0)),
        ("30 1,2 * * *", datetime(2026, 3, 29, 2, 30)),
        ("30 0,2 * * *", datetime(2026, 3, 29, 2, 30)),
        ("59 59 1,2 * * *", datetime(2026, 3, 29, 2, 59, 59)),
        ("0 3 * * *", None),
        ("0 2,3 * * *", datetime(2026, 3, 29, 2, 0)),
    ],
)
def test_the_wall_time_a_spring_gap_skipped_is_named(expr: str, skipped: datetime | None) -> None:
    """At the end of Paris's spring gap (03:00 local), a fixed-time expression's instant
    stands in for the first wall time of it that the gap skipped (02:00 to 02:59:59); an
    expression that matches 03:00 itself stands in for nothing."""
    schedule = cron(expr, "Europe/Paris")
    assert schedule.next_after(PARIS_GAP_END - timedelta(seconds=1)) == PARIS_GAP_END
    assert schedule.skipped_wall_time(PARIS_GAP_END) == skipped


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(days=2), "2d"),
        (timedelta(hours=3), "3h"),
        (timedelta(hours=25), "25h"),
        (timedelta(minutes=90), "90m"),
        (timedelta(seconds=90), "90s"),
        (timedelta(milliseconds=1500), "1500ms"),
        (timedelta(milliseconds=2), "2ms"),
        (timedelta(microseconds=1500), "0.0015s"),
        (timedelta(microseconds=999_999), "0.999999s"),
    ],
)
def test_durations_are_written_in_their_largest_whole_unit(delta: timedelta, text: str) -> None:
    """format_duration, used by describe() and the error messages: the largest unit that
    divides the duration, down to milliseconds, else seconds with a fraction."""
    assert format_duration(delta) == text


def test_describe_lists_every_option_in_order() -> None:
    """describe() names the schedule and then each option it has, comma-separated."""
    schedule = every(
        "90s", start="2026-01-01", end="2027-01-01", max_runs=3, jitter=timedelta(seconds=5)
    )
    assert schedule.describe() == (
        "every 90s, from 2026-01-01T00:00:00+00:00, until 2027-01-01T00:00:00+00:00, "
        "at most 3 runs, jitter 5s"
    )
    assert every("1h").describe() == "every 1h"


def test_a_one_shot_schedule_keeps_its_jitter_and_a_zero_delay() -> None:
    """at() passes jitter on, for an instant and for a delay, and a delay of zero is now
    (not refused); a negative delay is refused."""
    assert at(T0, jitter="5s").jitter == timedelta(seconds=5)
    assert at("2026-01-01T00:00:00Z", jitter="5s").jitter == timedelta(seconds=5)
    assert at("10s", now=T0, jitter="2s").jitter == timedelta(seconds=2)
    assert at(timedelta(0), now=T0).when == T0
    assert at("0s", now=T0).when == T0 and at("0s", now=T0).relative
    with pytest.raises(ScheduleError, match="invalid when"):
        at(timedelta(microseconds=-1), now=T0)


def test_a_serialised_cron_without_a_zone_is_utc_and_an_at_is_absolute() -> None:
    """schedule_from_dict: a cron dict without 'tz' is in UTC as given (the scheduler's
    default zone does not replace it), and an 'at' dict without 'relative' is absolute."""
    schedule = schedule_from_dict({"type": "cron", "expr": "0 9 * * *"})
    assert schedule.in_default_zone("Europe/Paris").to_dict()["tz"] == "UTC"
    assert schedule.next_after(T0) == datetime(2026, 1, 1, 9, tzinfo=UTC)
    one_shot = schedule_from_dict({"type": "at", "when": "2026-01-01T00:00:00+00:00"})
    assert one_shot.relative is False


def test_a_cron_given_no_zone_takes_the_default_zone_once() -> None:
    """cron(expr) with no zone takes the scheduler's default zone; after that it has a
    zone of its own, so another default does not move it again."""
    paris = cron("0 9 * * *").in_default_zone("Europe/Paris")
    assert paris.in_default_zone("Asia/Tokyo").to_dict()["tz"] == "Europe/Paris"
