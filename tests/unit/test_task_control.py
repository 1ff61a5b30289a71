"""Task control on a fake clock and the memory store: retry_on / no_retry_on, a job's own
misfire_grace, and the scheduler's default time zone."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime, timedelta, timezone

import pytest
from ticks import plan_tick, started

from soloist import ConfigError, Scheduler, cron, every
from soloist.errors import LeaseLostError
from soloist.models import State
from soloist.runtime import Runtime
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 1, 10, 12, 0, 0, tzinfo=timezone.utc)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore("memory://", clock=clock)


def make_app(clock: FakeClock, store: MemoryStore, **options: object) -> Scheduler:
    return Scheduler(store, instance_id="a", clock=clock, lease_ttl="9s", **options)  # type: ignore[arg-type]


async def run_once(runtime: Runtime) -> None:
    """Claim what is due and wait until every started handler is recorded."""
    await runtime.executor.tick()
    tasks = [r.task for r in runtime.executor.active.values() if r.task is not None]
    if tasks:
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)


# -- retry_on / no_retry_on ------------------------------------------------------------------


async def test_no_retry_on_makes_the_run_dead_at_once_with_its_error(
    clock: FakeClock, store: MemoryStore
) -> None:
    """An exception in no_retry_on is not retried although retries remain: dead at
    attempt 1, its error and the reason recorded; another exception is retried."""
    app = make_app(clock, store)

    @app.task(retries=3, no_retry_on=(KeyError,))
    def lookup(ctx, key: str) -> None:  # type: ignore[no-untyped-def]
        raise (KeyError if key == "missing" else ConnectionError)(key)

    runtime = await started(app)
    fatal = await app.aenqueue(lookup, payload={"key": "missing"})
    flaky = await app.aenqueue(lookup, payload={"key": "net"})
    await run_once(runtime)
    dead, failed = await store.occurrence_get(fatal), await store.occurrence_get(flaky)
    assert dead is not None and failed is not None
    assert (dead.state, dead.attempt, dead.error_code) == (State.DEAD, 1, "handler_error")
    assert "KeyError" in (dead.error_message or "")
    assert "not retried: KeyError is in no_retry_on" in (dead.error_message or "")
    assert (failed.state, failed.attempt) == (State.FAILED, 1)


async def test_retry_on_retries_only_the_listed_exceptions_and_their_subclasses(
    clock: FakeClock, store: MemoryStore
) -> None:
    """With retry_on, a listed exception (or a subclass) is retried and any other one is
    dead at once."""
    app = make_app(clock, store)

    @app.task(retries=2, retry_on=(OSError,), backoff="fixed", backoff_base="1s")
    async def fetch(ctx, kind: str) -> None:  # type: ignore[no-untyped-def]
        raise {"conn": ConnectionResetError, "value": ValueError}[kind](kind)

    runtime = await started(app)
    retried = await app.aenqueue(fetch, payload={"kind": "conn"})
    refused = await app.aenqueue(fetch, payload={"kind": "value"})
    await run_once(runtime)
    clock.advance(2)
    await run_once(runtime)
    again, dead = await store.occurrence_get(retried), await store.occurrence_get(refused)
    assert again is not None and (again.state, again.attempt) == (State.FAILED, 2)
    assert dead is not None and (dead.state, dead.attempt) == (State.DEAD, 1)
    assert "ValueError is not in retry_on" in (dead.error_message or "")


async def test_soloist_timeouts_keep_retrying_whatever_retry_on_says(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A run cut by timeout= is retried while attempts remain, even when retry_on does not
    list TimeoutError; a TimeoutError the handler raises itself follows retry_on."""
    app = make_app(clock, store)

    @app.task(retries=1, retry_on=(ConnectionError,), timeout=0.02)
    async def slow(ctx, own: bool) -> None:  # type: ignore[no-untyped-def]
        if own:
            raise TimeoutError("the remote API timed out")
        await asyncio.sleep(5)

    runtime = await started(app)
    cut = await app.aenqueue(slow, payload={"own": False})
    own = await app.aenqueue(slow, payload={"own": True})
    await run_once(runtime)
    by_soloist, by_handler = await store.occurrence_get(cut), await store.occurrence_get(own)
    assert by_soloist is not None and (by_soloist.state, by_soloist.error_code) == (
        State.FAILED,
        "timeout",
    )
    assert by_handler is not None and by_handler.state is State.DEAD
    assert "TimeoutError is not in retry_on" in (by_handler.error_message or "")


async def test_a_handlers_own_asyncio_timeout_follows_retry_on_under_a_task_timeout(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A task with timeout= whose handler's own asyncio.wait_for / asyncio.timeout expires
    (a TimeoutError from a CancelledError, as soloist's own looks) is the handler's error:
    retry_on refuses it and the record shows it, not "timed out after" the task's timeout;
    a sync handler cut by timeout= is still soloist's timeout, retried."""
    app = make_app(clock, store)

    @app.task(retries=1, retry_on=(ConnectionError,), timeout=30)
    async def call_api(ctx) -> None:  # type: ignore[no-untyped-def]
        await asyncio.wait_for(asyncio.sleep(5), 0.01)

    @app.task(retries=1, retry_on=(ConnectionError,), timeout=0.05)
    def blocking(ctx) -> None:  # type: ignore[no-untyped-def]
        time.sleep(0.3)

    runtime = await started(app)
    own = await app.aenqueue(call_api)
    cut = await app.aenqueue(blocking)
    await run_once(runtime)
    by_handler, by_soloist = await store.occurrence_get(own), await store.occurrence_get(cut)
    assert by_handler is not None and (by_handler.state, by_handler.error_code) == (
        State.DEAD,
        "timeout",
    )
    assert "TimeoutError is not in retry_on" in (by_handler.error_message or "")
    assert "timed out after 0:00:30" not in (by_handler.error_message or "")
    assert by_soloist is not None and (by_soloist.state, by_soloist.error_message) == (
        State.FAILED,
        "timed out after 0:00:00.050000",
    )


async def test_a_lost_lease_is_not_refused_by_no_retry_on(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A run that lost its lease writes nothing (the occurrence is reaped and runs again,
    as after a crash), even when no_retry_on lists every exception."""
    app = make_app(clock, store)

    @app.task(retries=1, no_retry_on=(BaseException,))
    def cut_off(ctx) -> None:  # type: ignore[no-untyped-def]
        raise LeaseLostError("the store said another runner holds it")

    runtime = await started(app)
    occ_id = await app.aenqueue(cut_off)
    await run_once(runtime)
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and (occ.state, occ.error_code) == (State.RUNNING, None)


async def test_no_retry_on_applies_to_jobs_and_base_exceptions(
    clock: FakeClock, store: MemoryStore
) -> None:
    """A recurring job's handler raising a BaseException listed in no_retry_on is dead at
    once (handler_panic)."""
    app = make_app(clock, store)
    app.job(every("1m"), name="quit", retries=5, no_retry_on=(SystemExit,))(
        lambda ctx: (_ for _ in ()).throw(SystemExit(2))
    )
    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(60)
    await plan_tick(runtime)
    await run_once(runtime)
    [occ] = await store.occurrence_list(job="quit")
    assert (occ.state, occ.attempt, occ.error_code) == (State.DEAD, 1, "handler_panic")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"retry_on": (ValueError, "KeyError")}, "invalid retry_on"),
        ({"retry_on": ValueError()}, "invalid retry_on"),
        ({"no_retry_on": (int,)}, "invalid no_retry_on"),
        ({"no_retry_on": "ValueError"}, "invalid no_retry_on 'ValueError'"),
        ({"retry_on": (OSError, KeyError), "no_retry_on": (KeyError,)}, "KeyError is in both"),
    ],
)
def test_bad_retry_filters_are_refused_at_definition(
    options: dict[str, object], named: str
) -> None:
    """retry_on / no_retry_on take exception classes, never the same class in both; a
    mistake raises ConfigError naming it when the task or job is defined."""
    app = Scheduler("memory://")
    with pytest.raises(ConfigError, match=named):
        app.task(name="t", **options)(lambda ctx: None)  # type: ignore[call-overload]
    with pytest.raises(ConfigError, match=named):
        app.job(every("1m"), name="j", **options)(lambda ctx: None)  # type: ignore[arg-type]


def test_a_single_exception_class_is_accepted() -> None:
    """retry_on=OSError (one class, not a tuple) means (OSError,)."""
    app = Scheduler("memory://")
    app.task(name="t", retries=1, retry_on=OSError)(lambda ctx: None)
    policy = app.registry.tasks["t"].retry
    assert policy.retry_on == (OSError,)
    assert policy.refuses(ConnectionError()) is None
    assert policy.refuses(ValueError()) == "ValueError is not in retry_on"


# -- a job's own misfire_grace -----------------------------------------------------------------


async def test_a_jobs_misfire_grace_wins_over_the_schedulers(
    clock: FakeClock, store: MemoryStore
) -> None:
    """After 5 minutes down, catch_up='skip' drops the missed instants of a job on the
    scheduler's grace, but keeps them all for a job whose own grace is 10 minutes, and for
    a dynamic schedule that stored the same grace."""
    app = make_app(clock, store)
    app.job(every("1m"), name="strict", catch_up="skip")(lambda ctx: None)
    app.job(every("1m"), name="lenient", catch_up="skip", misfire_grace="10m")(lambda ctx: None)
    app.task(name="report")(lambda ctx: None)
    record = await app.schedules.aadd(
        "dyn", task="report", schedule=every("1m"), catch_up="skip", misfire_grace="10m"
    )
    assert record.schedule["misfire_grace_s"] == 600
    runtime = await started(app)
    await plan_tick(runtime)
    clock.advance(timedelta(minutes=5, seconds=30))
    await plan_tick(runtime)
    assert await store.occurrence_list(job="strict") == []
    expected = [T0 + timedelta(minutes=m) for m in range(1, 6)]
    for job in ("lenient", "dyn"):
        plans = sorted(o.plan_time for o in await store.occurrence_list(job=job))
        assert plans == expected, job


def test_bad_misfire_grace_names_it() -> None:
    """A bad per-job misfire_grace raises ConfigError naming it."""
    app = Scheduler("memory://")
    with pytest.raises(ConfigError, match="invalid misfire_grace 'soon'"):
        app.job(every("1m"), misfire_grace="soon")(lambda ctx: None)


# -- the default time zone ----------------------------------------------------------------------


async def test_cron_without_tz_runs_in_the_schedulers_time_zone(
    store: MemoryStore, clock: FakeClock
) -> None:
    """Scheduler(timezone=...) zones every cron that names none (jobs and dynamic
    schedules, as stored); a cron with its own tz keeps it; every() is unaffected."""
    app = make_app(clock, store, timezone="Europe/Paris")
    app.job(cron("0 9 * * *"), name="paris")(lambda ctx: None)
    app.job(cron("0 9 * * *", tz="Asia/Tokyo"), name="tokyo")(lambda ctx: None)
    app.task(name="report")(lambda ctx: None)
    record = await app.schedules.aadd("dyn", task="report", schedule=cron("0 9 * * *"))
    jobs = app.registry.jobs
    assert jobs["paris"].schedule.to_dict()["tz"] == "Europe/Paris"
    assert jobs["tokyo"].schedule.to_dict()["tz"] == "Asia/Tokyo"
    assert record.schedule["schedule"]["tz"] == "Europe/Paris"
    # 09:00 in Paris in January is 08:00 UTC.
    assert jobs["paris"].schedule.next_after(T0) == datetime(2026, 1, 11, 8, tzinfo=timezone.utc)


def test_default_time_zone_comes_from_soloist_timezone(monkeypatch: pytest.MonkeyPatch) -> None:
    """SOLOIST_TIMEZONE sets the default zone; without it, or any argument, it is UTC."""
    monkeypatch.delenv("SOLOIST_TIMEZONE", raising=False)
    assert Scheduler("memory://").config.timezone == "UTC"
    monkeypatch.setenv("SOLOIST_TIMEZONE", "America/New_York")
    app = Scheduler("memory://")
    app.job(cron("@daily"), name="d")(lambda ctx: None)
    assert app.registry.jobs["d"].schedule.to_dict()["tz"] == "America/New_York"


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "+01:00", 1])
def test_an_unknown_default_time_zone_is_refused(zone: object) -> None:
    """An unknown zone raises ConfigError naming it and giving an IANA example."""
    with pytest.raises(ConfigError, match=re.escape(f"invalid timezone {zone!r}") + ".*IANA"):
        Scheduler("memory://", timezone=zone)  # type: ignore[arg-type]
