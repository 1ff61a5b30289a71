"""What a write made in this process wakes in its runtime: new occurrences wake the
executor, only when they are due before its next look anyway, and never the planner (no
schedule changed); a schedule change wakes both."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from soloist import JobContext, Scheduler, every
from soloist.runtime import Runtime


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[Scheduler]:
    app = Scheduler(f"sqlite:///{tmp_path / 'soloist.db'}", poll_interval="2s")

    @app.task
    def greet(ctx: JobContext) -> None:
        return None

    @app.job(every("1h"))
    def hourly(ctx: JobContext) -> None:
        return None

    await app.start()
    yield app
    await app.stop()
    await app.aclose()


def watch(app: Scheduler) -> list[object]:
    """What the scheduler's calls ask of its runtime from now on: ``"plans"`` for a
    schedule change, the ``due_in`` of new occurrences (whether they wake the executor is
    the runtime's call: the last test)."""
    runtime = app._runtime
    assert runtime is not None
    asked: list[object] = []
    runtime.wake = lambda: asked.append("plans")  # type: ignore[method-assign]

    def wakes_for(due_in: timedelta) -> bool:
        asked.append(due_in)
        return False

    runtime.wakes_for = wakes_for  # type: ignore[method-assign]
    return asked


async def test_new_occurrences_ask_for_the_executor_with_their_due_time(
    app: Scheduler,
) -> None:
    """enqueue (delay, at), enqueue_many, trigger and retry say when their work is due;
    none of them asks the planner to look."""
    asked = watch(app)
    await app.aenqueue("greet")
    await app.aenqueue("greet", delay="90s")
    later = await app.aenqueue("greet", at="2999-01-01T00:00:00Z")
    await app.aenqueue_many("greet", [{}, {}], delay="10m")
    await app.atrigger("hourly")
    await app.acancel(later)  # dead, so that it can be retried (now)
    await app.aretry(later)
    assert "plans" not in asked
    assert asked[:2] == [timedelta(0), timedelta(seconds=90)]
    assert isinstance(asked[2], timedelta) and asked[2] > timedelta(days=300 * 365)
    assert asked[3:] == [timedelta(minutes=10), timedelta(0), timedelta(0)]


async def test_a_schedule_change_asks_for_the_planner(app: Scheduler) -> None:
    """Pausing and resuming a job ask the planner (and the executor) to look."""
    asked = watch(app)
    await app.apause("hourly")
    await app.aresume("hourly")
    assert asked == ["plans", "plans"]


def test_the_executor_is_woken_only_for_work_due_before_its_next_look() -> None:
    """Due within ``poll_interval`` (and a margin for a look's own time): the executor
    looks at once; due later: its next look (at most ``poll_interval`` away) sees it in
    time, so nothing is woken. Never the planner."""
    woken: list[str] = []
    runtime = SimpleNamespace(
        executor=SimpleNamespace(poll_interval=2.0, wake=lambda: woken.append("executor")),
        planner=SimpleNamespace(wake=lambda: woken.append("planner")),
    )
    soon = (timedelta(0), timedelta(seconds=2.999), timedelta(seconds=-5))
    later = (timedelta(seconds=3), timedelta(hours=1))
    assert [Runtime.wakes_for(runtime, d) for d in soon] == [True] * 3  # type: ignore[arg-type]
    assert [Runtime.wakes_for(runtime, d) for d in later] == [False] * 2  # type: ignore[arg-type]
    Runtime.wake_work(runtime)  # type: ignore[arg-type]
    assert woken == ["executor"]


def signalling_app(url: str, *, poll_interval: str) -> tuple[Scheduler, asyncio.Event]:
    """A scheduler on ``url`` whose ``def`` task ``greet`` sets the returned event in the
    running loop (call from that loop)."""
    app = Scheduler(url, poll_interval=poll_interval)
    ran = asyncio.Event()
    loop = asyncio.get_running_loop()

    @app.task
    def greet(ctx: JobContext) -> None:
        loop.call_soon_threadsafe(ran.set)

    return app, ran


async def test_a_sync_enqueue_from_another_thread_wakes_the_running_executor(
    tmp_path: Path,
) -> None:
    """A sync enqueue from a thread (a sync route of an async web app) while the
    scheduler runs in this loop: it runs on the portal, without a hop to this loop, and
    its wake-up crosses threads safely: the task runs at once, long before the
    executor's next look (poll_interval 30 s)."""
    app, ran = signalling_app(f"sqlite:///{tmp_path / 'soloist.db'}", poll_interval="30s")
    await app.start()
    try:
        await asyncio.sleep(0.5)  # past the executor's first looks: it waits 30 s now
        await asyncio.to_thread(app.enqueue, "greet")
        assert app._bridge.portal is not None, "the call hopped to the scheduler's loop"
        await asyncio.wait_for(ran.wait(), 10)
    finally:
        await app.stop()
        await app.aclose()
        app.close()


async def test_a_wake_up_from_another_thread_runs_on_the_scheduler_loop(
    tmp_path: Path,
) -> None:
    """The bridge runs a wake-up asked for from another thread on the scheduler's loop
    (an asyncio.Event is not thread-safe), and one asked for on that loop at once."""
    app = Scheduler(f"sqlite:///{tmp_path / 'soloist.db'}")
    await app.start()
    try:
        seen: list[int] = []
        done = asyncio.Event()

        def record() -> None:
            seen.append(threading.get_ident())
            done.set()

        await asyncio.to_thread(app._bridge.on_scheduler_loop, record)
        await asyncio.wait_for(done.wait(), 5)
        app._bridge.on_scheduler_loop(record)
        assert seen == [threading.get_ident()] * 2
    finally:
        await app.stop()
        await app.aclose()
