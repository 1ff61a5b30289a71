"""Cancellation in a running Scheduler (real SQLite store, real clock, in process): a
scheduled occurrence never runs; a running async handler is cancelled within about one
heartbeat; a sync handler sees ctx.cancelled (and ctx.heartbeat() raises); every one is
recorded dead with error code ``cancelled`` and is not retried; a cron job goes on."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_claim_ahead import settle
from ticks import plan_tick, started

from soloist import Scheduler, every
from soloist.errors import (
    OccurrenceCancelledError,
    StateConflictError,
    UnknownOccurrenceError,
)
from soloist.models import Cancelled, Occurrence, State
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)

HEARTBEAT = 0.2


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[Scheduler]:
    app = Scheduler(
        f"sqlite:///{tmp_path / 'soloist.db'}",
        instance_id="cancel-test",
        lease_ttl="1.5s",
        heartbeat=f"{HEARTBEAT}s",
        poll_interval="0.05s",
        grace_period="1s",
    )
    yield app
    await app.aclose()


async def _until(app: Scheduler, occurrence_id: str, *states: State) -> Occurrence:
    """The occurrence once it is in one of ``states`` (10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        occ, _ = await app.aattempts(occurrence_id)
        if occ.state in states or time.monotonic() > deadline:
            return occ
        await asyncio.sleep(0.02)


async def test_a_running_async_handler_is_cancelled_within_a_heartbeat(app: Scheduler) -> None:
    """The async handler gets CancelledError about one heartbeat after the request; the
    run is recorded dead (cancelled), not retried although it had retries left."""
    started = asyncio.Event()
    stopped: list[float] = []

    @app.task(retries=3)
    async def slow(ctx) -> None:  # type: ignore[no-untyped-def]
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.append(time.monotonic())
            raise

    await app.start()
    occurrence_id = await app.aenqueue(slow)
    await asyncio.wait_for(started.wait(), 5)
    asked = time.monotonic()
    answer = await app.acancel(occurrence_id)
    assert answer.outcome is Cancelled.REQUESTED and answer.occurrence.cancel_requested
    assert (await app.acancel(occurrence_id)).outcome is Cancelled.ALREADY_REQUESTED
    occ = await _until(app, occurrence_id, State.DEAD, State.FAILED, State.SUCCEEDED)
    # About one heartbeat (the renewal reports it); bounded loosely for a loaded machine,
    # well under the 30 s a cancel that waited for the handler to end would take.
    assert stopped and stopped[0] - asked < 5.0
    assert (occ.state, occ.error_code) == (State.DEAD, "cancelled")
    assert occ.attempt == 1 and occ.error_message == "cancelled on request"
    _, attempts = await app.aattempts(occurrence_id)
    assert [(a.outcome, a.error_code) for a in attempts] == [("dead", "cancelled")]
    # Counted apart from "dead" (alerts on dead runs do not fire for a cancel).
    families = {
        f.name: f for f in text_string_to_metric_families(app.metrics.exposition().decode())
    }
    runs = {
        s.labels["outcome"]: s.value
        for s in families["soloist_runs"].samples
        if s.labels.get("job") == "slow" and s.name == "soloist_runs_total"
    }
    assert runs["cancelled"] == 1 and runs["dead"] == 0
    await asyncio.sleep(3 * HEARTBEAT)  # no retry comes
    assert (await app.aattempts(occurrence_id))[0].state is State.DEAD
    with pytest.raises(StateConflictError, match="cancelled already"):
        await app.acancel(occurrence_id)


async def test_a_sync_handler_sees_ctx_cancelled_and_heartbeat_raises(app: Scheduler) -> None:
    """A sync handler is only asked: ctx.cancelled turns true at a renewal; one that
    returns then is recorded cancelled (its result kept); ctx.heartbeat() raises
    OccurrenceCancelledError; neither is retried."""
    running = threading.Event()
    seen: list[bool] = []

    @app.task(retries=2)
    def polite(ctx) -> str:  # type: ignore[no-untyped-def]
        running.set()
        deadline = time.monotonic() + 10
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(ctx.cancelled)
        return "stopped early"

    @app.task(retries=2)
    def beating(ctx) -> None:  # type: ignore[no-untyped-def]
        running.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ctx.heartbeat()  # raises once the cancellation is requested
            time.sleep(0.02)

    await app.start()
    for task, message in ((polite, "the handler returned"), (beating, "OccurrenceCancelled")):
        running.clear()
        occurrence_id = await app.aenqueue(task)
        assert await asyncio.to_thread(running.wait, 5)
        assert (await app.acancel(occurrence_id)).outcome is Cancelled.REQUESTED
        occ = await _until(app, occurrence_id, State.DEAD, State.FAILED, State.SUCCEEDED)
        assert (occ.state, occ.error_code, occ.attempt) == (State.DEAD, "cancelled", 1)
        assert occ.error_message is not None and message in occ.error_message
    assert seen == [True]
    assert OccurrenceCancelledError.__name__ in (occ.error_message or "")


async def test_a_scheduled_occurrence_never_runs(app: Scheduler) -> None:
    """A cancelled delayed task never runs, not even once due; unknown and finished ids
    are refused."""
    ran: list[str] = []

    @app.task
    def later(ctx) -> None:  # type: ignore[no-untyped-def]
        ran.append(ctx.occurrence_id)

    occurrence_id = await app.aenqueue(later, delay="0.2s")
    answer = await app.acancel(occurrence_id)
    assert answer.outcome is Cancelled.CANCELLED
    assert (answer.occurrence.state, answer.occurrence.error_code) == (State.DEAD, "cancelled")
    other = await app.aenqueue(later, delay="0.2s")
    await app.start()
    occ = await _until(app, other, State.SUCCEEDED)
    assert occ.state is State.SUCCEEDED and ran == [other]  # due with it, it ran alone
    assert (await app.aattempts(occurrence_id))[1] == []
    with pytest.raises(UnknownOccurrenceError, match="unknown occurrence 'nope'"):
        await app.acancel("nope")
    with pytest.raises(StateConflictError, match="has finished"):
        await app.acancel(occurrence_id)


async def test_a_claimed_row_whose_cancellation_was_requested_never_starts(
    app: Scheduler, tmp_path: Path
) -> None:
    """During a rolling deploy a runner of the release before cancellation, which ignores
    the flag, can make a flagged row claimable again (its failed attempt becomes a retry).
    A claim of such a row records it cancelled without running its handler."""
    ran: list[str] = []

    @app.task(retries=2)
    def job(ctx) -> None:  # type: ignore[no-untyped-def]
        ran.append(ctx.occurrence_id)

    flagged = await app.aenqueue(job, delay="1h")
    # What the older runner leaves behind: a retry pending, its cancellation requested.
    with sqlite3.connect(tmp_path / "soloist.db") as conn:
        conn.execute(
            "UPDATE occurrences SET state = 'failed', attempt = 1, due_at = 0, "
            "cancel_requested = 1 WHERE id = ?",
            (flagged,),
        )
    conn.close()
    other = await app.aenqueue(job)
    await app.start()
    occ = await _until(app, flagged, State.DEAD, State.SUCCEEDED)
    assert (occ.state, occ.error_code) == (State.DEAD, "cancelled")
    assert occ.error_message == "cancelled on request before it started"
    assert (await _until(app, other, State.SUCCEEDED)).state is State.SUCCEEDED
    assert ran == [other]


async def test_cancelling_an_instant_of_a_recurring_job_leaves_its_schedule() -> None:
    """One planned instant of an ``every`` job is cancelled before it is due: it never
    runs, and the job's next instants are planned and run as usual."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = Scheduler(store, instance_id="a", clock=clock, lease_ttl="9s")
    ran: list[datetime] = []

    @app.job(every("10s"), catch_up="all")
    async def tick(ctx) -> None:  # type: ignore[no-untyped-def]
        ran.append(ctx.plan_time)

    runtime = await started(app)
    cancelled: Occurrence | None = None
    for _ in range(40):
        await plan_tick(runtime)
        if cancelled is None:
            planned = [o for o in await app.ahistory("tick") if o.state is State.SCHEDULED]
            if planned:
                cancelled = min(planned, key=lambda o: o.plan_time)
                answer = await app.acancel(cancelled.id)
                assert answer.outcome is Cancelled.CANCELLED
        await runtime.executor.tick()
        await settle(runtime)
        if len(ran) >= 2:
            break
        clock.advance(1)
    assert cancelled is not None and len(ran) >= 2
    assert cancelled.plan_time not in ran and min(ran) > cancelled.plan_time
    occ = await store.occurrence_get(cancelled.id)
    assert occ is not None and (occ.state, occ.error_code) == (State.DEAD, "cancelled")
    assert await store.occurrence_attempts(cancelled.id) == []
    await runtime.stop()


def test_the_sync_twin_cancels(tmp_path: Path) -> None:
    """app.cancel() from sync code (a Django view) returns what happened."""
    app = Scheduler(f"sqlite:///{tmp_path / 'soloist.db'}", instance_id="sync-twin")

    @app.task
    def later(ctx) -> None:  # type: ignore[no-untyped-def]
        pass

    try:
        occurrence_id = app.enqueue(later, delay="1h")
        answer = app.cancel(occurrence_id)
        assert answer.outcome is Cancelled.CANCELLED
        assert answer.to_json()["occurrence"]["error_code"] == "cancelled"
    finally:
        app.close()


async def test_a_run_claimed_ahead_is_cancelled_without_running() -> None:
    """A run waiting in the line (claimed ahead: running in the store) whose cancellation
    is requested is recorded cancelled at the next renewal, and its handler never runs;
    the other waiting runs are untouched."""
    clock = FakeClock(T0)
    store = MemoryStore("memory://", clock=clock)
    app = Scheduler(store, instance_id="a", clock=clock, lease_ttl="9s", concurrency=2)
    gate = asyncio.Event()
    ran: list[str] = []

    @app.task
    async def quick(ctx) -> None:  # type: ignore[no-untyped-def]
        if not ran:
            clock.advance(0.001)  # the first run takes 1 ms: the average handler duration
        ran.append(ctx.occurrence_id)

    @app.task
    async def slow(ctx) -> None:  # type: ignore[no-untyped-def]
        await gate.wait()

    runtime = await started(app)
    executor = runtime.executor
    await app.aenqueue(quick)
    await executor.tick()
    await settle(runtime)  # a short run: claiming ahead is on
    for _ in range(2):
        await app.aenqueue(slow)  # both slots busy
    clock.advance(0.001)
    quick_ids = [await app.aenqueue(quick) for _ in range(3)]
    await executor.tick()
    assert {r.occ.id for r in executor.waiting} == set(quick_ids)
    victim = quick_ids[1]
    average = executor.duration  # of handlers that ran: the claims ahead are sized by it
    assert average is not None
    assert (await app.acancel(victim)).outcome is Cancelled.REQUESTED
    await runtime.heartbeater.tick()  # the renewal reports it
    assert {r.occ.id for r in executor.waiting} == {quick_ids[0], quick_ids[2]}
    for _ in range(100):  # its outcome is written (the slow runs still hold the slots)
        occ = await store.occurrence_get(victim)
        if occ is not None and occ.state is State.DEAD:
            break
        await asyncio.sleep(0.01)
    assert occ is not None and (occ.state, occ.error_code) == (State.DEAD, "cancelled")
    assert occ.error_message == "cancelled on request before it started"
    assert executor.duration == average  # a run that never started is no handler duration
    gate.set()
    for _ in range(20):
        await settle(runtime)
        await executor.tick()
    assert sorted(ran[1:]) == sorted([quick_ids[0], quick_ids[2]])
    await runtime.stop()
