"""Property tests of schedule maths, differential against a brute-force reference.

The reference knows the value set of every generated cron field and walks time minute by
minute, so it shares no code with soloist.schedules or cronsim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from soloist.errors import ScheduleError
from soloist.schedules import Schedule, cron, every, schedule_from_dict

UTC = timezone.utc
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
MINUTE = timedelta(minutes=1)
CLOSE = timedelta(days=2)  # the brute-force reference only walks gaps up to this long
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _transitions(zone_name: str) -> list[datetime]:
    """UTC instants (to the minute) at which the zone changes offset in 2026."""
    zone = ZoneInfo(zone_name)
    found = []
    t = datetime(2026, 1, 1, tzinfo=UTC)
    while t.year == 2026:
        if t.astimezone(zone).utcoffset() != (t + timedelta(days=1)).astimezone(zone).utcoffset():
            u = t
            while u.astimezone(zone).utcoffset() == t.astimezone(zone).utcoffset():
                u += MINUTE
            found.append(u)
        t += timedelta(days=1)
    return found


TRANSITIONS = {name: _transitions(name) for name in ZONES}


@dataclass(frozen=True)
class Spec:
    """A generated cron expression with the value set of each field."""

    texts: tuple[str, ...]  # second minute hour day month weekday
    sets: tuple[frozenset[int], ...] = field(repr=False)
    six: bool = False

    @property
    def expr(self) -> str:
        return " ".join(self.texts if self.six else self.texts[1:])

    @property
    def fixed_time(self) -> bool:
        return not (self.texts[1].startswith("*") or self.texts[2].startswith("*"))

    def day_matches(self, wall: datetime) -> bool:
        dom = wall.day in self.sets[3]
        dow = wall.isoweekday() % 7 in self.sets[5]
        if self.texts[3].startswith("*") or self.texts[5].startswith("*"):
            return dom and dow
        return dom or dow

    def minute_matches(self, wall: datetime) -> bool:
        """Wall time matches every field but seconds."""
        return (
            wall.minute in self.sets[1]
            and wall.hour in self.sets[2]
            and wall.month in self.sets[4]
            and self.day_matches(wall)
        )

    @property
    def seconds(self) -> list[int]:
        return sorted(self.sets[0]) if self.six else [0]


def cron_field(
    lo: int, hi: int, *, wild_weight: int = 1
) -> st.SearchStrategy[tuple[str, set[int]]]:
    """Cron field text with its value set (cronsim's syntax: *, */n, a, a-b, a-b/n, lists)."""
    full = set(range(lo, hi + 1))
    value = st.integers(lo, hi)
    span = st.tuples(value, value).filter(lambda ab: ab[0] < ab[1])
    options = [st.just(("*", full))] * wild_weight + [
        st.integers(1, hi - lo).map(lambda n: (f"*/{n}", set(range(lo, hi + 1, n)))),
        value.map(lambda v: (str(v), {v})),
        span.map(lambda ab: (f"{ab[0]}-{ab[1]}", set(range(ab[0], ab[1] + 1)))),
        st.tuples(span, st.integers(1, 5)).map(
            lambda x: (f"{x[0][0]}-{x[0][1]}/{x[1]}", set(range(x[0][0], x[0][1] + 1, x[1])))
        ),
        st.sets(value, min_size=2, max_size=4).map(
            lambda vs: (",".join(map(str, sorted(vs))), set(vs))
        ),
    ]
    return st.one_of(*options)


FIELDS = (  # built once: building strategies inside a draw is slow
    cron_field(0, 59),
    cron_field(0, 59),
    cron_field(0, 23),
    cron_field(1, 31, wild_weight=8),
    cron_field(1, 12, wild_weight=8),
    cron_field(0, 7, wild_weight=6),
)


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    parts = [draw(strategy) for strategy in FIELDS]
    texts = tuple(text for text, _ in parts)
    sets = [frozenset(values) for _, values in parts]
    sets[5] = frozenset(v % 7 for v in sets[5])  # 7 is Sunday too
    return Spec(texts, tuple(sets), draw(st.booleans()))


@st.composite
def instants(draw: st.DrawFn, zone_name: str) -> datetime:
    """An aware UTC datetime, often shortly before or inside a DST change."""
    near = TRANSITIONS[zone_name]
    hours = draw(st.sampled_from([0, 36, 2])) if near else 0  # 0: anywhere in 2000-2040
    if hours:
        base = draw(st.sampled_from(near))
        micros = draw(st.integers(-hours * 3600 * 10**6, 2 * 3600 * 10**6))
        return base + timedelta(microseconds=micros)
    return draw(
        st.datetimes(
            min_value=datetime(2000, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
        )
    )


def wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def wall_to_instant(naive: datetime, zone: ZoneInfo) -> datetime:
    """Debian mapping: first pass when ambiguous, end of the gap when skipped."""
    instant = naive.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if wall(instant, zone) == naive:
        return instant
    # Skipped: the transition is the first minute whose wall time is past `naive`.
    instant = instant.replace(second=0, microsecond=0)
    while wall(instant - MINUTE, zone) > naive:
        instant -= MINUTE
    return instant


def reference(spec: Spec, zone: ZoneInfo, lo: datetime, hi: datetime) -> set[datetime]:
    """All instants of the schedule in [lo, hi], by walking every minute."""
    found: set[datetime] = set()
    if spec.fixed_time:  # walk wall-clock minutes; an instant's wall time may be 2h off
        cursor = wall(lo, zone).replace(second=0, microsecond=0) - timedelta(hours=2)
        stop = wall(hi, zone) + timedelta(hours=2)
        while cursor <= stop:
            if spec.minute_matches(cursor):
                for s in spec.seconds:
                    found.add(wall_to_instant(cursor + timedelta(seconds=s), zone))
            cursor += MINUTE
    else:  # walk real minutes; every zone here has whole-minute offsets
        cursor = lo.replace(second=0, microsecond=0)
        while cursor <= hi:
            if spec.minute_matches(wall(cursor, zone)):
                found.update(cursor + timedelta(seconds=s) for s in spec.seconds)
            cursor += MINUTE
    return {u for u in found if lo <= u <= hi}


def make(spec: Spec, tz: str) -> Schedule:
    try:
        return cron(spec.expr, tz)
    except ScheduleError:
        assume(False)
        raise


@SETTINGS
@given(spec=specs(), data=st.data(), zone_name=st.sampled_from(ZONES))
def test_cron_next_after_is_the_first_reference_instant(
    spec: Spec, data: st.DataObject, zone_name: str
) -> None:
    """next_after(t) is > t, an instant of the schedule, and none of its instants is skipped."""
    schedule = make(spec, zone_name)
    zone = ZoneInfo(zone_name)
    t = data.draw(instants(zone_name))
    nxt = schedule.next_after(t)
    assume(nxt is not None)
    assert nxt is not None
    assert nxt > t
    assert nxt.utcoffset() == timedelta(0)
    close = nxt - t <= CLOSE
    expected = reference(spec, zone, t if close else nxt, nxt)
    assert nxt in expected, f"{nxt} ({nxt.astimezone(zone)}) is not an instant of {spec.expr}"
    if close:
        assert min(u for u in expected if u > t) == nxt


SECONDS = {"0": {0}, "30": {30}, "0,20,40": {0, 20, 40}, "*/15": {0, 15, 30, 45}}


@st.composite
def dst_cases(draw: st.DrawFn) -> tuple[str, Spec, datetime, datetime]:
    """(zone, spec, t, change): hours near a DST change of the zone, t within 3h of it."""
    zone_name = draw(st.sampled_from([name for name in ZONES if TRANSITIONS[name]]))
    change = draw(st.sampled_from(TRANSITIONS[zone_name]))
    hour = wall(change, ZoneInfo(zone_name)).hour
    hours = draw(st.sets(st.integers(hour - 2, hour + 2).map(lambda h: h % 24), min_size=1))
    minute_text, minutes = draw(FIELDS[1])
    second_text = draw(st.sampled_from(sorted(SECONDS)))
    spec = Spec(
        (second_text, minute_text, ",".join(map(str, sorted(hours))), "*", "*", "*"),
        (
            frozenset(SECONDS[second_text]),
            frozenset(minutes),
            frozenset(hours),
            frozenset(range(1, 32)),
            frozenset(range(1, 13)),
            frozenset(range(7)),
        ),
        draw(st.booleans()),
    )
    t = change + timedelta(microseconds=draw(st.integers(-3 * 3600 * 10**6, 3 * 3600 * 10**6)))
    return zone_name, spec, t, change


@SETTINGS
@given(case=dst_cases())
def test_cron_around_dst_changes_matches_reference(
    case: tuple[str, Spec, datetime, datetime],
) -> None:
    """Around a DST change, chaining next_after from t yields exactly the reference instants."""
    zone_name, spec, t, change = case
    schedule = make(spec, zone_name)
    horizon = change + timedelta(hours=4)
    expected = sorted(u for u in reference(spec, ZoneInfo(zone_name), t, horizon) if u > t)
    got: list[datetime] = []
    cursor = t
    while (nxt := schedule.next_after(cursor)) is not None and nxt <= horizon:
        got.append(nxt)
        cursor = nxt
    assert got == expected


@SETTINGS
@given(spec=specs(), data=st.data(), zone_name=st.sampled_from(ZONES))
def test_cron_chain_is_strictly_increasing(spec: Spec, data: st.DataObject, zone_name: str) -> None:
    """Chaining next_after yields strictly increasing instants matching the expression."""
    schedule = make(spec, zone_name)
    zone = ZoneInfo(zone_name)
    t = data.draw(instants(zone_name))
    for _ in range(6):
        nxt = schedule.next_after(t)
        if nxt is None:
            break
        assert nxt > t
        if not spec.fixed_time:
            local = nxt.astimezone(zone)
            assert spec.minute_matches(local.replace(tzinfo=None))
            assert local.second in spec.seconds
        t = nxt


@SETTINGS
@given(spec=specs(), zone_name=st.sampled_from(ZONES))
def test_cron_to_dict_round_trip(spec: Spec, zone_name: str) -> None:
    """Any valid cron schedule survives to_dict -> JSON -> schedule_from_dict."""
    schedule = make(spec, zone_name)
    assert schedule_from_dict(json.loads(json.dumps(schedule.to_dict()))) == schedule


intervals = st.integers(1000, 10 * 86_400 * 10**6).map(lambda us: timedelta(microseconds=us))
moments = st.datetimes(
    min_value=datetime(1960, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)


def micros(delta: timedelta) -> int:
    return delta // timedelta(microseconds=1)


@settings(max_examples=300, deadline=None)
@given(interval=intervals, start=st.none() | moments, t=moments)
def test_every_next_after_is_the_next_grid_point(
    interval: timedelta, start: datetime | None, t: datetime
) -> None:
    """every(): the result is on the anchor grid, after t, and at most one interval away."""
    schedule = every(interval, start=start)
    anchor = start or datetime(1970, 1, 1, tzinfo=UTC)
    nxt = schedule.next_after(t)
    assert nxt is not None
    assert nxt > t
    assert micros(nxt - anchor) % micros(interval) == 0
    if start is not None and t < start:
        assert nxt == start
    else:
        assert nxt - t <= interval
    assert schedule.next_after(nxt) == nxt + interval


@settings(max_examples=200, deadline=None)
@given(
    interval=intervals,
    start=st.none() | moments,
    span=st.none() | st.integers(1, 10**12).map(lambda us: timedelta(microseconds=us)),
    max_runs=st.none() | st.integers(1, 10**6),
    jitter=st.none() | intervals,
)
def test_every_to_dict_round_trip(
    interval: timedelta,
    start: datetime | None,
    span: timedelta | None,
    max_runs: int | None,
    jitter: timedelta | None,
) -> None:
    """every() with any options survives to_dict -> JSON -> schedule_from_dict."""
    end = None if span is None else (start or datetime(2000, 1, 1, tzinfo=UTC)) + span
    schedule = every(interval, start=start, end=end, max_runs=max_runs, jitter=jitter)
    assert schedule_from_dict(json.loads(json.dumps(schedule.to_dict()))) == schedule


@settings(max_examples=200, deadline=None)
@given(key=st.text(), jitter=intervals)
def test_jitter_offset_in_range(key: str, jitter: timedelta) -> None:
    """jitter_offset(key) lies in [0, jitter) and is the same on every call."""
    schedule = every("1m", jitter=jitter)
    offset = schedule.jitter_offset(key)
    assert timedelta(0) <= offset < jitter
    assert every("1h", jitter=jitter).jitter_offset(key) == offset
