"""What a write made in this process wakes in its runtime: new occurrences wake the
executor, only when they are due before its next look anyway, and never the planner (no
schedule changed); a schedule change wakes both."""

from __future__ import annotations

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
    schedule change, the ``due_in`` of new occurrences."""
    runtime = app._runtime
    assert runtime is not None
    asked: list[object] = []
    runtime.wake = lambda: asked.append("plans")  # type: ignore[method-assign]
    runtime.wake_work = asked.append  # type: ignore[method-assign]
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
    for due_in in (timedelta(0), timedelta(seconds=2.999), timedelta(seconds=-5)):
        Runtime.wake_work(runtime, due_in)  # type: ignore[arg-type]
    assert woken == ["executor"] * 3
    for due_in in (timedelta(seconds=3), timedelta(hours=1)):
        Runtime.wake_work(runtime, due_in)  # type: ignore[arg-type]
    assert woken == ["executor"] * 3
