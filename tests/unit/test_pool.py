"""The sync handlers' thread pool: a timed-out call keeps its thread (Python cannot stop
it), and the pool replaces that leaked thread, up to a bound, so later runs still start."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator

import pytest

from soloist.runtime.pool import DaemonThreadPool

#: How long a test waits for something that should happen at once.
PROMPTLY = 5.0


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end of each test, so no blocked call outlives it."""
    event = threading.Event()
    yield event
    event.set()


def blocker(release: threading.Event, started: threading.Event | None = None) -> Callable[[], str]:
    def hang() -> str:
        if started is not None:
            started.set()
        release.wait(30)
        return "late"

    return hang


async def time_out(pool: DaemonThreadPool, call: Callable[[], str], name: str) -> None:
    """Run ``call`` until it has started, then cancel it as ``timeout=`` does."""
    started = threading.Event()

    def wrapped() -> str:
        started.set()
        return call()

    future = pool.run(wrapped, name=name)
    assert await asyncio.to_thread(started.wait, PROMPTLY)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(future, 0.01)
    await asyncio.sleep(0)  # the done callback runs on the next loop turn


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + PROMPTLY
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def test_a_timed_out_call_does_not_hold_up_the_next_run(
    release: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    """One worker, its call times out but keeps running: the next call still runs at
    once on a replacement thread, and a WARNING names the leaked handler."""
    pool = DaemonThreadPool(1, "t", max_leaked=2)
    with caplog.at_level(logging.WARNING, logger="soloist"):
        await time_out(pool, blocker(release), "stuck_job")
    assert (pool.leaked, pool.leaked_total, pool.saturated) == (1, 1, False)
    assert await asyncio.wait_for(pool.run(lambda: "next"), PROMPTLY) == "next"
    warnings = [r for r in caplog.records if getattr(r, "action", "") == "leaked_thread"]
    assert len(warnings) == 1 and "stuck_job" in warnings[0].getMessage()
    assert warnings[0].levelno == logging.WARNING
    pool.shutdown(wait=False)


async def test_at_the_bound_the_pool_is_saturated_until_a_leaked_call_returns(
    release: threading.Event,
) -> None:
    """Leaks past the bound are not replaced: saturated, and new runs wait; when the
    leaked calls return, nothing is leaked, the pool shrinks back and runs again."""
    pool = DaemonThreadPool(1, "t", max_leaked=1)
    await time_out(pool, blocker(release), "a")
    assert pool.saturated and pool.leaked == 1  # the bound is reached (still replaced)
    await time_out(pool, blocker(release), "b")  # runs on the replacement, leaks too
    assert (pool.leaked, pool.leaked_total, pool.saturated) == (2, 2, True)
    waiting = pool.run(lambda: "queued")
    await asyncio.sleep(0.2)
    assert not waiting.done()  # every thread is busy with a leaked call: the run waits
    release.set()
    assert await asyncio.wait_for(waiting, PROMPTLY) == "queued"
    await until(lambda: pool.leaked == 0, "the leaked calls to return")
    assert not pool.saturated and pool.leaked_total == 2
    await until(lambda: pool.threads == 1, "the pool to shrink back to its size")
    assert await asyncio.wait_for(pool.run(lambda: "after"), PROMPTLY) == "after"
    pool.shutdown(wait=False)


async def test_a_call_cancelled_before_it_starts_is_not_leaked(
    release: threading.Event,
) -> None:
    """A call cancelled while queued never runs and leaks no thread."""
    pool = DaemonThreadPool(1, "t", max_leaked=0)
    started = threading.Event()
    busy = pool.run(blocker(release, started))
    assert await asyncio.to_thread(started.wait, PROMPTLY)
    ran = threading.Event()
    queued = pool.run(ran.set)
    queued.cancel()
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.wait_for(busy, PROMPTLY) == "late"
    assert await asyncio.wait_for(pool.run(lambda: 1), PROMPTLY) == 1
    assert not ran.is_set() and pool.leaked_total == 0 and not pool.saturated
    pool.shutdown(wait=False)


async def test_a_bound_of_zero_replaces_nothing(release: threading.Event) -> None:
    """max_leaked=0: the first leak saturates the pool and the next run waits for it."""
    pool = DaemonThreadPool(1, "t", max_leaked=0)
    await time_out(pool, blocker(release), "a")
    assert pool.saturated and pool.threads == 1
    waiting = pool.run(lambda: "queued")
    await asyncio.sleep(0.1)
    assert not waiting.done()
    release.set()
    assert await asyncio.wait_for(waiting, PROMPTLY) == "queued"
    assert pool.leaked == 0 and pool.threads == 1
    pool.shutdown(wait=False)


async def test_in_flight_counts_each_call_until_its_outcome_reaches_the_loop(
    release: threading.Event,
) -> None:
    """``in_flight`` (the completer waits a moment for outcomes while it is above zero):
    a call counts from ``run`` until its outcome is back on the loop, or until it is
    cancelled: while queued (it never runs), or while running (a timeout: its leaked
    thread may run on for good, but no outcome is awaited from it any more)."""
    pool = DaemonThreadPool(1, "t")
    assert pool.in_flight == 0
    done = [pool.run(lambda n=n: n) for n in range(5)]
    assert pool.in_flight == 5
    assert await asyncio.wait_for(asyncio.gather(*done), PROMPTLY) == [0, 1, 2, 3, 4]
    assert pool.in_flight == 0

    started = threading.Event()
    busy = pool.run(blocker(release, started))
    assert await asyncio.to_thread(started.wait, PROMPTLY)
    queued = pool.run(lambda: "never")
    assert pool.in_flight == 2
    queued.cancel()
    assert pool.in_flight == 1  # the queued call will be skipped
    release.set()
    assert await asyncio.wait_for(busy, PROMPTLY) == "late"
    assert pool.in_flight == 0

    hung = threading.Event()
    await time_out(pool, blocker(hung), "slow")
    assert pool.leaked == 1 and pool.in_flight == 0  # its thread still runs it, unawaited
    hung.set()
    await until(lambda: pool.leaked == 0, "the leaked call to return")
    assert pool.in_flight == 0
    pool.shutdown(wait=False)


async def test_a_thread_that_cannot_start_queues_nothing(
    release: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the pool needs another thread and the system refuses one (a thread limit),
    ``run`` raises and the call is not left in the queue: it must not run later, unseen,
    on another thread (the executor records the refusal and may run the occurrence
    again)."""
    pool = DaemonThreadPool(2, "t")
    started = threading.Event()
    busy = pool.run(blocker(release, started))
    assert await asyncio.to_thread(started.wait, PROMPTLY)

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    ran = threading.Event()
    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", refuse)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            pool.run(ran.set)
    assert pool.threads == 1 and pool.in_flight == 1
    release.set()
    assert await asyncio.wait_for(busy, PROMPTLY) == "late"
    assert await asyncio.wait_for(pool.run(lambda: 2), PROMPTLY) == 2
    await asyncio.sleep(0.05)
    assert not ran.is_set(), "the refused call ran anyway"
    assert pool.in_flight == 0
    pool.shutdown(wait=False)
