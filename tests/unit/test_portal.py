"""Sync calls made while no scheduler loop runs (a Django view, a script) share one open
store on the portal, a private loop that the calling threads run in turn."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_wake_routing import signalling_app

import soloist._portal
import soloist.bridge
from soloist import JobContext, Scheduler
from soloist._portal import Portal
from soloist.errors import SoloistError, StoreError
from soloist.stores import open_store
from soloist.stores.base import Store


def make_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Scheduler, list[Store]]:
    opened: list[Store] = []

    def counting_open(url: str, **kw: object) -> Store:
        store = open_store(url, **kw)  # type: ignore[arg-type]
        opened.append(store)
        return store

    monkeypatch.setattr(soloist.bridge, "open_store", counting_open)
    app = Scheduler(f"sqlite:///{tmp_path / 'x.db'}")

    @app.task
    def greet(ctx: JobContext, name: str) -> str:
        return name

    return app, opened


def test_sync_enqueues_from_many_threads_share_one_open_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """80 sync enqueues from 8 threads all land, and the store is opened once, not once
    per call."""
    app, opened = make_app(tmp_path, monkeypatch)
    try:
        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(lambda n: app.enqueue("greet", {"name": f"n{n}"}), range(80)))
        assert len(set(ids)) == 80
        assert len(app.history("greet", limit=1000)) == 80
        assert len(opened) == 1
    finally:
        portal = app._bridge.portal
        app.close()
    assert portal is not None and not portal.usable, "close() left the portal thread running"


def test_close_is_safe_twice_and_sync_calls_work_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``close()`` closes the portal's store; calling it again is harmless, and a later sync
    call opens a new portal and store."""
    app, opened = make_app(tmp_path, monkeypatch)
    app.enqueue("greet", {"name": "a"})
    app.close()
    app.close()
    app.enqueue("greet", {"name": "b"})
    try:
        assert len(app.history("greet")) == 2
        assert len(opened) == 2
    finally:
        app.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_gets_a_portal_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pre-forking server: the parent used sync calls before the fork; the child's sync
    calls still work (the parent's portal thread does not exist in the child)."""
    app, _ = make_app(tmp_path, monkeypatch)
    app.enqueue("greet", {"name": "parent"})
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        code = 1
        try:
            app.enqueue("greet", {"name": "child"})
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    try:
        assert os.waitstatus_to_exitcode(status) == 0
        assert {o.payload["name"] for o in app.history("greet")} == {"parent", "child"}
    finally:
        app.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_dropping_its_copy_leaves_the_parents_portal_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child makes a sync call (a portal of its own) and collects its garbage, which
    closes its copy of the parent's loop: the parent's next sync call still runs (with an
    epoll loop, the child's close unregistered the parent's wake-up pipe from the epoll
    instance they share, and the parent's call waited for good)."""
    app, _ = make_app(tmp_path, monkeypatch)
    app.enqueue("greet", {"name": "parent"})
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            app.enqueue("greet", {"name": "child"})
            gc.collect()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    ran = threading.Event()

    def again() -> None:
        app.enqueue("greet", {"name": "parent again"})
        ran.set()

    threading.Thread(target=again, daemon=True).start()  # a hang fails, not holds, the test
    if not ran.wait(10):
        app._bridge.portal = None  # stuck: not to be closed at exit either
        pytest.fail("the parent's sync call after the child's exit never ended")
    app.close()


# -- the portal itself: the calling threads run its loop in turn --------------------------
async def thread_of_caller() -> int:
    return threading.get_ident()


def test_a_call_on_a_free_portal_runs_in_the_calling_thread() -> None:
    """No hop to another thread: with nobody else calling, the coroutine runs in the
    caller's own thread, and the portal starts no thread."""
    portal = Portal()
    before = threading.active_count()
    try:
        for _ in range(3):
            assert portal.call(thread_of_caller()) == threading.get_ident()
        assert threading.active_count() == before
    finally:
        portal.close()


def test_calls_from_many_threads_run_at_once() -> None:
    """Eight threads each wait 0.3 s on the portal at the same time: they all finish in
    about 0.3 s, not 2.4 s (whoever runs the loop runs the others' calls too)."""
    portal = Portal()

    async def pause(n: int) -> int:
        await asyncio.sleep(0.3)
        return n

    try:
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda n: portal.call(pause(n)), range(8)))
        assert results == list(range(8))
        assert time.monotonic() - started < 1.5
    finally:
        portal.close()


def test_a_short_call_is_not_held_by_a_long_one_that_came_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread whose short call runs the loop returns when its call is done, although a
    long call from another thread came meanwhile: the loop passes to that call's thread
    at once (not at its next look for a free loop, put off here), which finishes it."""
    monkeypatch.setattr(soloist._portal, "_RECHECK", 60.0)
    portal = Portal()
    long_sent = threading.Event()

    async def short() -> float:
        await asyncio.get_running_loop().run_in_executor(None, long_sent.wait, 5)
        await asyncio.sleep(0.05)  # the long call is on the loop by now
        return time.monotonic()

    async def long() -> float:
        await asyncio.sleep(1.0)
        return time.monotonic()

    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(portal.call, short())
            time.sleep(0.1)  # the first thread runs the loop
            second = pool.submit(portal.call, long())
            long_sent.set()
            short_done = first.result(timeout=5)
            assert not second.done(), "the short call waited for the long one"
            long_done = second.result(timeout=5)
        assert long_done - short_done > 0.5
    finally:
        portal.close()


def test_an_error_reaches_its_caller_and_the_portal_goes_on() -> None:
    """A call's exception is raised in its caller; the next calls run as usual."""
    portal = Portal()

    async def fail() -> None:
        raise ValueError("bad value 42")

    try:
        with pytest.raises(ValueError, match="bad value 42"):
            portal.call(fail())
        assert portal.call(thread_of_caller()) == threading.get_ident()
    finally:
        portal.close()
    assert not portal.usable


def test_an_interrupt_reaches_its_call_and_the_next_call_runs() -> None:
    """A KeyboardInterrupt in the driving thread just after its call's result came is
    raised there (not swallowed), and the next call runs to its end (it does not stop
    early on the interrupted drive's leftovers)."""
    portal = Portal()

    def interrupt() -> None:
        raise KeyboardInterrupt

    async def interrupted_after_its_result() -> int:
        loop = asyncio.get_running_loop()
        # Two turns on: after the call's result is set, before the loop stops for it.
        loop.call_soon(loop.call_soon, interrupt)
        return 1

    async def slow() -> str:
        await asyncio.sleep(0.05)
        return "done"

    try:
        with pytest.raises(KeyboardInterrupt):
            portal.call(interrupted_after_its_result())
        assert portal.call(slow()) == "done"
    finally:
        portal.close()


def test_a_cancelled_call_raises_an_exception_an_except_exception_catches() -> None:
    """A call whose coroutine is cancelled raises concurrent.futures.CancelledError (an
    Exception, as from a call handed to a loop thread), not asyncio's BaseException."""
    portal = Portal()

    async def cancelled() -> None:
        raise asyncio.CancelledError

    try:
        with pytest.raises(concurrent.futures.CancelledError):
            portal.call(cancelled())
        assert issubclass(concurrent.futures.CancelledError, Exception)
    finally:
        portal.close()


def test_a_closed_portal_refuses_calls_and_frees_its_waiters() -> None:
    """After close(), a call raises at once; the loop is not left held."""
    portal = Portal()
    portal.close()
    portal.close()
    with pytest.raises(RuntimeError, match="closed"):
        portal.call(thread_of_caller())
    assert portal._driving.acquire(blocking=False), "the refused call left the loop held"


async def test_close_from_a_running_event_loop_closes_the_portal_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync close() made where an event loop runs (an async app's sync shutdown hook)
    closes the store that sync calls opened, from a thread of its own."""
    app, opened = make_app(tmp_path, monkeypatch)
    await asyncio.to_thread(app.enqueue, "greet", {"name": "a"})
    portal = app._bridge.portal
    assert portal is not None and len(opened) == 1
    app.close()
    assert not portal.usable and portal.loop.is_closed()
    with pytest.raises(StoreError, match="is closed"):
        await opened[0].occurrence_get("x")


# -- the bridge's choice of store for sync calls ------------------------------------------
async def test_an_in_memory_sqlite_store_is_never_opened_twice(tmp_path: Path) -> None:
    """With ``sqlite:///:memory:`` (a database per store object) a sync enqueue from a
    thread while the scheduler runs uses the scheduler's store, so its task runs (a
    portal store of its own would be another, empty database: the task would be lost)."""
    app, ran = signalling_app("sqlite:///:memory:", poll_interval="0.05s")
    await app.start()
    try:
        await asyncio.to_thread(app.enqueue, "greet")
        await asyncio.wait_for(ran.wait(), 10)
        assert app._bridge.portal is None
    finally:
        await app.stop()
        app.close()


def test_a_wake_up_for_a_loop_closed_meanwhile_is_dropped(tmp_path: Path) -> None:
    """The scheduler's loop stops and closes between the look and the hand-off: the
    wake-up is dropped (nothing is left to wake), the enqueue that asked for it does not
    fail after its row was written."""

    class ClosingLoop:
        def is_running(self) -> bool:
            return True

        def call_soon_threadsafe(self, fn: object) -> None:
            raise RuntimeError("Event loop is closed")

    app = Scheduler(f"sqlite:///{tmp_path / 'x.db'}")
    called: list[str] = []
    app._bridge.loop = ClosingLoop()  # type: ignore[assignment]
    app._bridge.on_scheduler_loop(lambda: called.append("woken"))
    assert called == []


def test_a_call_caught_on_a_portal_by_close_opens_no_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call still on the portal when close() took it away does not open a store there
    (nothing would close it, and the scheduler could not move to another store)."""
    app, opened = make_app(tmp_path, monkeypatch)
    app.enqueue("greet", {"name": "a"})
    portal = app._bridge.portal
    assert portal is not None
    app._bridge.portal = None  # what close() does first, while the call is on its way
    try:
        with pytest.raises(SoloistError, match="closed"):
            portal.call(app._bridge.store())
        assert app._bridge._store is None and len(opened) == 1
    finally:
        app._bridge.portal = portal
        app.close()


def test_close_and_reopen_register_one_exit_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each new portal after a close() does not add another exit hook (a test suite of
    many app lifespans kept every scheduler alive through them)."""
    hooks: list[object] = []
    monkeypatch.setattr(soloist.bridge.atexit, "register", hooks.append)
    app, _ = make_app(tmp_path, monkeypatch)
    for name in ("a", "b", "c"):
        app.enqueue("greet", {"name": name})
        app.close()
    assert len(hooks) == 1
