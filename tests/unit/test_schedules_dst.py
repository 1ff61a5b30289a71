"""Cron across daylight saving changes, with system (Vixie/Debian) cron rules.

Each test enumerates every instant of one whole local day by chaining next_after.
Change days used: Europe/Berlin 2026-03-29 (02:00 -> 03:00) and 2026-10-25
(03:00 -> 02:00); America/New_York 2026-03-08 (02:00 -> 03:00) and 2026-11-01
(02:00 -> 01:00); Australia/Lord_Howe 2026-10-04 (02:00 -> 02:30) and 2026-04-05
(02:00 -> 01:30).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from soloist.schedules import cron

UTC = timezone.utc

SPRING = [("Europe/Berlin", date(2026, 3, 29)), ("America/New_York", date(2026, 3, 8))]
FALL = [("Europe/Berlin", date(2026, 10, 25)), ("America/New_York", date(2026, 11, 1))]


def local_day(expr: str, tz: str, day: date) -> list[datetime]:
    """All instants of cron(expr, tz) during the local calendar day, as aware local times."""
    zone = ZoneInfo(tz)
    begin = datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)
    after = day + timedelta(days=1)
    finish = datetime(after.year, after.month, after.day, tzinfo=zone).astimezone(UTC)
    schedule = cron(expr, tz)
    out: list[datetime] = []
    t = begin - timedelta(microseconds=1)
    while (nxt := schedule.next_after(t)) is not None and nxt < finish:
        assert nxt > t
        out.append(nxt.astimezone(zone))
        t = nxt
    return out


def hhmm(instants: list[datetime]) -> list[str]:
    return [d.strftime("%H:%M:%S%z") for d in instants]


def test_day_length_sanity() -> None:
    """The chosen days really are 23 h and 25 h long (guards the test data)."""
    for tz, day in SPRING:
        assert len(local_day("0 * * * *", tz, day)) == 23
    for tz, day in FALL:
        assert len(local_day("0 * * * *", tz, day)) == 25


@pytest.mark.parametrize("expr", ["30 2 * * *", "0 30 2 * * *"])
@pytest.mark.parametrize(("tz", "day"), SPRING)
def test_fixed_time_in_skipped_hour_runs_once_after_the_gap(expr: str, tz: str, day: date) -> None:
    """A fixed time inside the spring-forward gap runs once, at the transition instant."""
    assert hhmm(local_day(expr, tz, day)) == [
        "03:00:00+0200" if tz == "Europe/Berlin" else "03:00:00-0400"
    ]


@pytest.mark.parametrize(
    ("expr", "tz", "day", "expected"),
    [
        ("30 2 * * *", "Europe/Berlin", date(2026, 10, 25), "02:30:00+0200"),
        ("0 30 2 * * *", "Europe/Berlin", date(2026, 10, 25), "02:30:00+0200"),
        ("30 1 * * *", "America/New_York", date(2026, 11, 1), "01:30:00-0400"),
        ("0 30 1 * * *", "America/New_York", date(2026, 11, 1), "01:30:00-0400"),
    ],
)
def test_fixed_time_in_repeated_hour_runs_once_in_first_pass(
    expr: str, tz: str, day: date, expected: str
) -> None:
    """A fixed time inside the repeated hour runs once, in the first pass."""
    assert hhmm(local_day(expr, tz, day)) == [expected]


@pytest.mark.parametrize("expr", ["30 2 * * *", "0 30 2 * * *"])
def test_fixed_time_asked_from_the_second_pass_waits_for_next_day(expr: str) -> None:
    """Asked from inside the second pass of the repeated hour, a fixed time does not rerun."""
    zone = ZoneInfo("Europe/Berlin")
    second_pass = datetime(2026, 10, 25, 2, 10, tzinfo=zone, fold=1)
    nxt = cron(expr, "Europe/Berlin").next_after(second_pass)
    assert nxt is not None
    assert nxt.astimezone(zone) == datetime(2026, 10, 26, 2, 30, tzinfo=zone)


@pytest.mark.parametrize("expr", ["*/30 * * * *", "0 */30 * * * *"])
@pytest.mark.parametrize(("tz", "day"), FALL)
def test_wildcard_hour_fires_in_both_passes(expr: str, tz: str, day: date) -> None:
    """*/30 with a wildcard hour fires 48 + 2 times on the fall-back day."""
    instants = local_day(expr, tz, day)
    assert len(instants) == 50
    repeated = "02" if tz == "Europe/Berlin" else "01"
    assert len([d for d in instants if d.strftime("%H") == repeated]) == 4


@pytest.mark.parametrize("expr", ["*/30 * * * *", "0 */30 * * * *"])
@pytest.mark.parametrize(("tz", "day"), SPRING)
def test_wildcard_hour_skips_the_gap(expr: str, tz: str, day: date) -> None:
    """*/30 with a wildcard hour fires 48 - 2 times on the spring-forward day."""
    instants = local_day(expr, tz, day)
    assert len(instants) == 46
    assert not [d for d in instants if d.hour == 2]


def test_fixed_times_around_the_gap_keep_their_order() -> None:
    """'15 1-3' on a spring-forward day runs 01:15, 03:00 (for 02:15), 03:15."""
    assert hhmm(local_day("15 1-3 * * *", "Europe/Berlin", date(2026, 3, 29))) == [
        "01:15:00+0100",
        "03:00:00+0200",
        "03:15:00+0200",
    ]


def test_fixed_time_with_seconds_field_in_the_gap_runs_once() -> None:
    """Every second of 02:30 is skipped by the gap: the job still runs once."""
    assert hhmm(local_day("* 30 2 * * *", "Europe/Berlin", date(2026, 3, 29))) == ["03:00:00+0200"]


def test_half_hour_dst_gap_fixed_time() -> None:
    """Lord Howe skips 02:00-02:30: a job at 02:15 runs once at 02:30 (+11)."""
    assert hhmm(local_day("15 2 * * *", "Australia/Lord_Howe", date(2026, 10, 4))) == [
        "02:30:00+1100"
    ]


def test_half_hour_dst_gap_wildcard_minute() -> None:
    """After Lord Howe's 30-minute jump, '*/10 3' still fires at 03:00, 03:10, 03:20.

    cronsim alone skips them (it rewinds to 02:00, which does not exist, and lands on 03:30).
    """
    zone = ZoneInfo("Australia/Lord_Howe")
    nxt = cron("*/10 3 * * *", "Australia/Lord_Howe").next_after(
        datetime(2026, 10, 4, 2, 40, tzinfo=zone)
    )
    assert nxt is not None
    assert nxt.astimezone(zone) == datetime(2026, 10, 4, 3, 0, tzinfo=zone)
    assert len(local_day("*/10 3 * * *", "Australia/Lord_Howe", date(2026, 10, 4))) == 6


def test_half_hour_dst_overlap_wildcard_minute() -> None:
    """Lord Howe repeats 01:30-02:00: '*/10 * * * *' fires 144 + 3 times that day."""
    instants = local_day("*/10 * * * *", "Australia/Lord_Howe", date(2026, 4, 5))
    assert len(instants) == 147
    assert len(local_day("*/10 2 * * *", "Australia/Lord_Howe", date(2026, 4, 5))) == 6
