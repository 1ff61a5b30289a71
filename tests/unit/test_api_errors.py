"""Bad input to the public API raises a soloist error naming the bad value, and stores nothing.

In process, on ``Scheduler("memory://")``: no servers, no runtime. Operations are tried
through the sync API and through its async twins; after each rejected call the history and
the dynamic schedules must still be empty. ``test_accepted_calls_are_stored`` shows that
those emptiness checks do see stored data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

import soloist
from soloist import (
    ConfigError,
    DuplicateJobError,
    PayloadError,
    ScheduleError,
    Scheduler,
    SoloistError,
    UnknownJobError,
    UnknownTaskError,
    at,
    cron,
    every,
)

AWARE = "2030-01-01T09:00:00+01:00"


def hello(ctx: Any, to: str) -> str:
    return f"hello {to}"


def tick(ctx: Any) -> None:
    return None


def undecorated(ctx: Any) -> None:
    return None


@pytest.fixture
def app() -> Iterator[Scheduler]:
    scheduler = Scheduler("memory://")
    scheduler.task(hello)
    scheduler.job(every("1s"))(tick)
    yield scheduler


@dataclass(frozen=True)
class AnyOf:
    """Several spellings of one offending value, any of which the message may use."""

    spellings: tuple[str, ...]


def assert_names(exc: BaseException, value: object) -> None:
    """The error message contains the offending value (as given, or its repr)."""
    message = str(exc)
    spellings = value.spellings if isinstance(value, AnyOf) else (str(value), repr(value))
    assert any(s in message for s in spellings), f"none of {spellings} in {message!r}"


def assert_nothing_stored(app: Scheduler) -> None:
    assert app.history() == []
    assert app.schedules.list() == []


# -- schedules --------------------------------------------------------------------------------

BAD_SCHEDULES: dict[str, tuple[Callable[[], object], object]] = {
    "cron-bad-minute": (lambda: cron("61 * * * *"), "61 * * * *"),
    "cron-3-fields": (lambda: cron("* * *"), "* * *"),
    "cron-never-fires": (lambda: cron("0 0 30 2 *"), "0 0 30 2 *"),
    "cron-reboot": (lambda: cron("@reboot"), "@reboot"),
    "cron-bad-tz": (lambda: cron("0 2 * * *", tz="Mars/Olympus"), "Mars/Olympus"),
    "cron-bad-start": (lambda: cron("0 2 * * *", start="someday"), "someday"),
    "cron-naive-end": (lambda: cron("0 2 * * *", end="2030-01-01T00:00:00"), "2030-01-01T00:00"),
    "cron-bad-max-runs": (lambda: cron("0 2 * * *", max_runs=0), "max_runs 0"),
    "every-parsecs": (lambda: every("5 parsecs"), "5 parsecs"),
    "every-zero": (lambda: every("0s"), "0s"),
    "every-negative": (lambda: every("-5m"), "-5m"),
    "every-zero-timedelta": (lambda: every(timedelta(0)), timedelta(0)),
    "every-bad-jitter": (lambda: every("1m", jitter="lots"), "lots"),
    "at-naive-datetime": (lambda: at(datetime(2030, 1, 1, 9)), datetime(2030, 1, 1, 9)),
    "at-naive-string": (lambda: at("2030-01-01T09:00:00"), "2030-01-01T09:00:00"),
    "at-bad-rfc3339": (lambda: at("2030-02-30T09:00:00+01:00"), "2030-02-30T09:00:00+01:00"),
    "at-not-a-time": (lambda: at("tomorrow"), "tomorrow"),
    "at-past-year-9999-in-utc": (
        lambda: at("9999-12-31T23:59:59-12:00"),
        "9999-12-31T23:59:59-12:00",
    ),
    "cron-start-before-year-1-in-utc": (
        lambda: cron("0 2 * * *", start="0001-01-01T00:00:00+12:00"),
        "0001-01-01T00:00:00+12:00",
    ),
}


@pytest.mark.parametrize("make,value", BAD_SCHEDULES.values(), ids=BAD_SCHEDULES.keys())
def test_bad_schedule_raises_schedule_error_naming_the_value(
    make: Callable[[], object], value: object
) -> None:
    """cron/every/at reject a bad expression, zone, duration or time, naming it."""
    with pytest.raises(ScheduleError) as caught:
        make()
    assert_names(caught.value, value)


# -- definitions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BadDefinition:
    define: Callable[[Scheduler], Callable[[Callable[..., Any]], Any]]
    value: object
    error: type[SoloistError] = ConfigError


BAD_DEFINITIONS = {
    "job-not-a-schedule": BadDefinition(lambda a: a.job("0 2 * * *"), "0 2 * * *"),
    "job-relative-at": BadDefinition(lambda a: a.job(at("10s")), "10s"),
    "job-relative-at-timedelta": BadDefinition(
        lambda a: a.job(at(timedelta(seconds=10))),
        AnyOf(("10s", "0:00:10", repr(timedelta(seconds=10)))),
    ),
    "job-bad-overlap": BadDefinition(
        lambda a: a.job(every("1s"), overlap="sometimes"), "sometimes"
    ),
    "job-bad-catch-up": BadDefinition(lambda a: a.job(every("1s"), catch_up="most"), "most"),
    "job-bad-catch-up-window": BadDefinition(
        lambda a: a.job(every("1s"), catch_up="all", catch_up_window="ages"), "ages"
    ),
    "job-bad-retries": BadDefinition(lambda a: a.job(every("1s"), retries=-1), "retries -1"),
    "job-bad-backoff": BadDefinition(lambda a: a.job(every("1s"), backoff="linear"), "linear"),
    "job-bad-timeout": BadDefinition(lambda a: a.job(every("1s"), timeout="forever"), "forever"),
    "job-bad-scopes": BadDefinition(lambda a: a.job(every("1s"), scopes="tenants"), "tenants"),
    "job-duplicate-name": BadDefinition(
        lambda a: a.job(every("1s"), name="tick"), "tick", DuplicateJobError
    ),
    "job-named-like-a-task": BadDefinition(
        lambda a: a.job(every("1s"), name="hello"), "hello", DuplicateJobError
    ),
    "task-duplicate-name": BadDefinition(
        lambda a: a.task(name="hello"), "hello", DuplicateJobError
    ),
    "task-named-like-a-job": BadDefinition(
        lambda a: a.task(name="tick"), "tick", DuplicateJobError
    ),
    "task-retries-not-int": BadDefinition(lambda a: a.task(retries="3"), "'3'"),
    "task-bad-backoff": BadDefinition(lambda a: a.task(backoff="linear"), "linear"),
    "task-bad-backoff-base": BadDefinition(lambda a: a.task(backoff_base="soon"), "soon"),
    "task-bad-backoff-cap": BadDefinition(lambda a: a.task(backoff_cap="0s"), "0s"),
    "task-empty-name": BadDefinition(lambda a: a.task(name=""), "''"),
}


@pytest.mark.parametrize("bad", BAD_DEFINITIONS.values(), ids=BAD_DEFINITIONS.keys())
def test_bad_definition_raises_naming_the_value_and_registers_nothing(
    app: Scheduler, bad: BadDefinition
) -> None:
    """@app.job/@app.task reject a bad option or name at definition; the app is unchanged."""

    def rejected(ctx: Any) -> None:
        return None

    with pytest.raises(bad.error) as caught:
        bad.define(app)(rejected)
    assert_names(caught.value, bad.value)
    with pytest.raises(UnknownTaskError):  # the rejected handler was not registered
        app.enqueue("rejected")
    assert app.registry.tasks["hello"].fn is hello  # nor did it replace a defined one
    assert app.registry.tasks["tick"].fn is tick
    assert_nothing_stored(app)


# -- operations -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BadCall:
    operation: str  # e.g. "enqueue", "schedules.add": the sync name; its twin adds "a"
    args: tuple[Any, ...]
    value: object
    error: type[SoloistError] = ConfigError
    kwargs: dict[str, Any] = field(default_factory=dict)


OBJ = object()
SCHED = cron("0 9 * * 1-5")


def schedule_add(value: object, error: type[SoloistError] = ConfigError, **changes: Any) -> BadCall:
    kwargs: dict[str, Any] = {"task": "hello", "schedule": SCHED, "payload": {"to": "a@b.c"}}
    kwargs.update(changes)
    return BadCall("schedules.add", ("report-42",), value, error, kwargs)


BAD_CALLS = {
    "enqueue-unknown-task": BadCall(
        "enqueue", ("no_such_task",), "no_such_task", UnknownTaskError, {"payload": {"to": "x"}}
    ),
    "enqueue-undecorated-function": BadCall(
        "enqueue", (undecorated,), "undecorated", UnknownTaskError
    ),
    "enqueue-set-payload": BadCall(
        "enqueue", ("hello",), {3}, PayloadError, {"payload": {"to": {3}}}
    ),
    "enqueue-object-payload": BadCall(
        "enqueue", ("hello",), OBJ, PayloadError, {"payload": {"to": OBJ}}
    ),
    "enqueue-nan-payload": BadCall(
        "enqueue", ("hello",), "nan", PayloadError, {"payload": {"to": float("nan")}}
    ),
    "enqueue-missing-argument": BadCall(
        "enqueue", ("hello",), "too", PayloadError, {"payload": {"too": "x"}}
    ),
    "enqueue-unexpected-argument": BadCall(
        "enqueue", ("hello",), "cc", PayloadError, {"payload": {"to": "x", "cc": "y"}}
    ),
    "enqueue-delay-and-at": BadCall(
        "enqueue",
        ("hello",),
        "9 minutes",
        ConfigError,
        {"payload": {"to": "x"}, "delay": "9 minutes", "at": AWARE},
    ),
    "enqueue-at-and-delay": BadCall(
        "enqueue",
        ("hello",),
        AWARE,
        ConfigError,
        {"payload": {"to": "x"}, "delay": "9m", "at": AWARE},
    ),
    "enqueue-bad-delay": BadCall(
        "enqueue",
        ("hello",),
        "5 parsecs",
        ConfigError,
        {"payload": {"to": "x"}, "delay": "5 parsecs"},
    ),
    "enqueue-bad-at": BadCall(
        "enqueue",
        ("hello",),
        "2030-02-30T09:00:00Z",
        ConfigError,
        {"payload": {"to": "x"}, "at": "2030-02-30T09:00:00Z"},
    ),
    "enqueue-naive-at": BadCall(
        "enqueue",
        ("hello",),
        datetime(2030, 1, 1, 9),
        ConfigError,
        {"payload": {"to": "x"}, "at": datetime(2030, 1, 1, 9)},
    ),
    "enqueue-at-number": BadCall(
        "enqueue", ("hello",), "12345", ConfigError, {"payload": {"to": "x"}, "at": 12345}
    ),
    "enqueue-delay-past-timedelta": BadCall(
        "enqueue",
        ("hello",),
        "99999999999d",
        ConfigError,
        {"payload": {"to": "x"}, "delay": "99999999999d"},
    ),
    "enqueue-infinite-delay": BadCall(
        "enqueue", ("hello",), "inf", ConfigError, {"payload": {"to": "x"}, "delay": float("inf")}
    ),
    "enqueue-at-past-year-9999-in-utc": BadCall(
        "enqueue",
        ("hello",),
        "9999-12-31T23:59:59-12:00",
        ConfigError,
        {"payload": {"to": "x"}, "at": "9999-12-31T23:59:59-12:00"},
    ),
    "enqueue-payload-a-list": BadCall(
        "enqueue", ("hello",), "['a@b.c']", PayloadError, {"payload": ["a@b.c"]}
    ),
    "enqueue-payload-a-json-string": BadCall(
        "enqueue", ("hello",), """'{"to": "a@b.c"}'""", PayloadError, {"payload": '{"to": "a@b.c"}'}
    ),
    "enqueue-empty-key": BadCall(
        "enqueue", ("hello",), "''", ConfigError, {"payload": {"to": "x"}, "key": ""}
    ),
    "pause-unknown-job": BadCall("pause", ("no_such_job",), "no_such_job", UnknownJobError),
    "resume-unknown-job": BadCall("resume", ("no_such_job",), "no_such_job", UnknownJobError),
    "trigger-unknown-job": BadCall("trigger", ("no_such_job",), "no_such_job", UnknownJobError),
    "history-bad-state": BadCall("history", (), "finished", ConfigError, {"state": "finished"}),
    "history-bad-limit": BadCall("history", (), "limit 0", ConfigError, {"limit": 0}),
    "schedule-unknown-task": schedule_add("no_such_task", UnknownTaskError, task="no_such_task"),
    "schedule-not-a-schedule": schedule_add("0 9 * * *", schedule="0 9 * * *"),
    "schedule-set-payload": schedule_add({3}, PayloadError, payload={"to": {3}}),
    "schedule-payload-does-not-fit": schedule_add("cc", PayloadError, payload={"cc": "x"}),
    "schedule-payload-not-a-dict": schedule_add("a@b.c", PayloadError, payload=["a@b.c"]),
    "schedule-bad-metadata": schedule_add(OBJ, PayloadError, metadata={"k": OBJ}),
    "schedule-bad-end": schedule_add("someday", end="someday"),
    "schedule-bad-max-runs": schedule_add("max_runs 0", max_runs=0),
    "schedule-bad-overlap": schedule_add("maybe", overlap="maybe"),
    "schedule-bad-catch-up": schedule_add("most", catch_up="most"),
    "schedule-name-of-a-code-job": BadCall(
        "schedules.add",
        ("tick",),
        "tick",
        DuplicateJobError,
        {"task": "hello", "schedule": SCHED, "payload": {"to": "x"}},
    ),
    "schedule-empty-name": BadCall(
        "schedules.add",
        ("",),
        "''",
        ConfigError,
        {"task": "hello", "schedule": SCHED, "payload": {"to": "x"}},
    ),
}


def resolve(app: Scheduler, operation: str, asynchronous: bool) -> Callable[..., Any]:
    *owners, name = operation.split(".")
    target: Any = app
    for owner in owners:
        target = getattr(target, owner)
    return getattr(target, f"a{name}" if asynchronous else name)


def call_sync(app: Scheduler, bad: BadCall) -> BaseException:
    with pytest.raises(bad.error) as caught:
        resolve(app, bad.operation, False)(*bad.args, **bad.kwargs)
    assert_nothing_stored(app)
    return caught.value


def call_async(app: Scheduler, bad: BadCall) -> BaseException:
    """Run the async twin, then read the store back, on one loop and one store."""

    async def go() -> BaseException:
        try:
            with pytest.raises(bad.error) as caught:
                await resolve(app, bad.operation, True)(*bad.args, **bad.kwargs)
            assert await app.ahistory() == []
            assert await app.schedules.alist() == []
            return caught.value
        finally:
            await app.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("call", [call_sync, call_async], ids=["sync", "async"])
@pytest.mark.parametrize("bad", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_call_raises_naming_the_value_and_stores_nothing(
    app: Scheduler, bad: BadCall, call: Callable[[Scheduler, BadCall], BaseException]
) -> None:
    """Operations (sync and async) reject bad input naming it, and leave the store empty."""
    assert_names(call(app, bad), bad.value)


def test_duplicate_dynamic_schedule_name_is_rejected_and_keeps_the_first() -> None:
    """A second schedules.add under a taken name raises naming it; the first one stays."""
    app = Scheduler("memory://")
    app.task(hello)

    async def go() -> None:
        try:
            await app.schedules.aadd("report-42", task="hello", schedule=SCHED, payload={"to": "a"})
            with pytest.raises(DuplicateJobError, match="report-42"):
                await app.schedules.aadd(
                    "report-42", task="hello", schedule=every("1m"), payload={"to": "b"}
                )
            [kept] = await app.schedules.alist()
            assert kept.payload == {"to": "a"}
            assert await app.ahistory() == []
        finally:
            await app.aclose()

    asyncio.run(go())


def test_accepted_calls_are_stored() -> None:
    """Sync calls on one memory:// app share its store: history() shows what enqueue stored."""
    app = Scheduler("memory://")
    app.task(hello)
    occurrence_id = app.enqueue("hello", {"to": "a@b.c"})
    app.schedules.add("report-42", task="hello", schedule=SCHED, payload={"to": "a@b.c"})
    assert [o.id for o in app.history()] == [occurrence_id]
    assert [r.name for r in app.schedules.list()] == ["report-42"]


def test_accepted_calls_are_stored_through_async_twins() -> None:
    """aenqueue and schedules.aadd store what ahistory() and schedules.alist() show."""
    app = Scheduler("memory://")
    app.task(hello)

    async def go() -> None:
        try:
            occurrence_id = await app.aenqueue("hello", payload={"to": "a@b.c"})
            await app.schedules.aadd(
                "report-42", task="hello", schedule=SCHED, payload={"to": "a@b.c"}
            )
            assert [o.id for o in await app.ahistory()] == [occurrence_id]
            assert [r.name for r in await app.schedules.alist()] == ["report-42"]
        finally:
            await app.aclose()

    asyncio.run(go())


def test_bad_store_url_raises_naming_it_on_first_use() -> None:
    """An unsupported store URL raises a ConfigError naming the URL."""
    with pytest.raises(ConfigError) as caught:
        Scheduler("bogus://x").history()
    assert_names(caught.value, "bogus://x")


@pytest.mark.parametrize(
    "options,value",
    [
        ({"mode": "everywhere"}, "everywhere"),
        ({"lease_ttl": "5 parsecs"}, "5 parsecs"),
        ({"concurrency": 0}, "concurrency 0"),
        ({"grace_period": "a while"}, "a while"),
        ({"lease_ttl": "9" * 400}, "9999"),
        ({"poll_interval": "60000w"}, "60000w"),
    ],
    ids=["mode", "lease_ttl", "concurrency", "grace_period", "huge-ttl", "over-1000-years"],
)
def test_bad_scheduler_option_raises_naming_it(options: dict[str, Any], value: str) -> None:
    """Scheduler(...) rejects a bad mode, duration or count at construction, naming it."""
    with pytest.raises(ConfigError) as caught:
        Scheduler("memory://", **options)
    assert_names(caught.value, value)


# -- public names -----------------------------------------------------------------------------


def test_public_names_are_pinned() -> None:
    """soloist.__all__ is exactly the documented public API, and each name exists."""
    assert sorted(soloist.__all__) == [
        "ConfigError",
        "DuplicateJobError",
        "JobContext",
        "LeaseLostError",
        "NotFoundError",
        "Occurrence",
        "PayloadError",
        "Schedule",
        "ScheduleError",
        "Scheduler",
        "SoloistError",
        "State",
        "StoreError",
        "StoreUnavailableError",
        "UnknownJobError",
        "UnknownOccurrenceError",
        "UnknownTaskError",
        "__version__",
        "at",
        "cron",
        "every",
    ]
    assert len(set(soloist.__all__)) == len(soloist.__all__)
    for name in soloist.__all__:
        assert hasattr(soloist, name), name


def test_unknown_tasks_jobs_and_occurrences_are_distinct_lookup_errors() -> None:
    """An unknown task, job and occurrence each have their own error, all three caught by
    NotFoundError (and LookupError); a job is not a task."""
    lookups = (soloist.UnknownTaskError, soloist.UnknownJobError, soloist.UnknownOccurrenceError)
    for error in lookups:
        assert issubclass(error, soloist.NotFoundError) and issubclass(error, LookupError)
    assert not issubclass(soloist.UnknownJobError, soloist.UnknownTaskError)
    assert not issubclass(soloist.UnknownOccurrenceError, soloist.UnknownTaskError)


def test_every_public_error_is_a_soloist_error() -> None:
    """Each exception class soloist exports derives from SoloistError (one except clause)."""
    errors = [
        getattr(soloist, name)
        for name in soloist.__all__
        if isinstance(getattr(soloist, name), type)
        and issubclass(getattr(soloist, name), BaseException)
    ]
    assert len(errors) == 12
    assert all(issubclass(error, SoloistError) for error in errors)
