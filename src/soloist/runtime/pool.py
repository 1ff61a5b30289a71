"""A thread pool whose threads never hold up interpreter exit, for sync handlers.

``ThreadPoolExecutor`` joins its workers when the interpreter exits, so a sync handler
still running after the grace period would keep a stopping instance alive (until its
orchestrator kills it) while another instance already runs the released occurrence. These
workers are daemon threads: when the instance is done, the process exits.

:meth:`DaemonThreadPool.run` hands results back to the event loop in bursts: the first
call to finish wakes the loop (one ``call_soon_threadsafe``), and the calls that finish
before the loop gets round to it ride along. ``loop.run_in_executor`` would wake the loop
once per call, which costs more than a short handler itself.

**Leaked threads.** Python cannot stop a thread. When the future of a call that already
runs is cancelled (a ``timeout``), its thread keeps running the handler until it returns:
the thread is *leaked*. If it still counted as one of the ``workers``, later runs would
queue behind it and could time out without ever starting. So the pool starts a replacement
thread for each leaked one, up to ``max_leaked`` of them (default: ``workers``), logs a
WARNING naming the handler, and counts them (:attr:`leaked`, :attr:`leaked_total`). Past
the bound it replaces no more: :attr:`saturated` is true (readiness fails) and new runs
wait for a thread, as they would in a plain pool. When a leaked call finally returns, its
thread stops counting as leaked and exits, or goes back to work if the pool is short.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from soloist.clock import Clock, SystemClock

T = TypeVar("T")

log = logging.getLogger("soloist")


class _Call:
    """A call and where its outcome goes: a concurrent future (``submit``), or an asyncio
    future of a loop (``run``); ``started``: the monotonic time a thread began it."""

    __slots__ = ("fn", "future", "leaked", "name", "started")

    def __init__(
        self, fn: Callable[[], Any], future: Future[Any] | asyncio.Future[Any], name: str
    ) -> None:
        self.fn = fn
        self.future = future
        self.name = name
        self.started: float | None = None
        self.leaked = False


#: An outcome waiting for the loop: the future, whether the call returned, its value.
_Done = tuple["asyncio.Future[Any]", bool, Any]


class DaemonThreadPool(Executor):
    """``workers`` daemon threads (started on demand) running submitted calls, plus one
    replacement per leaked thread, up to ``max_leaked`` (default: ``workers``; 0: never
    replace). ``clock`` (default: the system's) times how long a leaked call ran."""

    def __init__(
        self,
        workers: int,
        name: str,
        *,
        max_leaked: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._workers = workers
        self._name = name
        self._monotonic = (clock or SystemClock()).monotonic
        #: How many leaked threads are replaced at most (settable before use).
        self.max_leaked = workers if max_leaked is None else max_leaked
        #: Calls whose future was cancelled while they ran, ever (a counter).
        self.leaked_total = 0
        self._leaked = 0
        self._started = 0
        self._queue: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        #: Threads waiting for a call that no queued call has been promised to yet (with
        #: ``_lock``; a plain count: a Python Semaphore cost more than a short handler).
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: list[_Done] = []
        self._done_lock = threading.Lock()
        #: Calls given to :meth:`run` whose future is still pending: neither resolved nor
        #: cancelled (read and written on the loop only).
        self._in_flight = 0

    # -- what the pool reports ------------------------------------------------------------------
    @property
    def workers(self) -> int:
        return self._workers

    @property
    def leaked(self) -> int:
        """Threads still running a call whose future was cancelled (a timed-out handler)."""
        return self._leaked

    @property
    def saturated(self) -> bool:
        """True while leaked threads reach the bound: another leak is not replaced, and
        sync runs may wait for a free thread."""
        return self._leaked > 0 and self._leaked >= self.max_leaked

    @property
    def in_flight(self) -> int:
        """Calls given to :meth:`run` whose outcome is still awaited: queued, running, or
        returned and about to be handed back; not once cancelled (a timeout), even while a
        leaked thread still runs the call."""
        return self._in_flight

    @property
    def threads(self) -> int:
        """Threads alive in the pool, leaked ones included."""
        return len(self._threads)

    def _capacity(self) -> int:
        return self._workers + min(self._leaked, self.max_leaked)

    # -- calls ------------------------------------------------------------------------------
    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        self._put(_Call(lambda: fn(*args, **kwargs), future, _describe(fn)))
        return future

    def run(self, call: Callable[[], T], name: str | None = None) -> asyncio.Future[T]:
        """Run ``call`` in a worker thread; its outcome as a future of the running loop
        (one loop per pool). Cancelling the future does not stop a call already running:
        its thread is leaked (see the module docstring); ``name`` (default: the callable's
        name) says which handler in the log."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("a DaemonThreadPool serves one event loop")
        future: _PoolFuture[T] = _PoolFuture(loop=loop)
        item = _Call(call, future, name or _describe(call))
        # Told of a cancel by the future itself: a done-callback would cost a loop callback
        # for every call, and only a cancelled one needs it.
        future.on_cancel = functools.partial(self._on_cancel, item, future)
        self._put(item)
        self._in_flight += 1
        return future

    def _put(self, item: _Call) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot run a handler: the worker pool is shut down")
            if self._idle > 0:
                self._idle -= 1  # a waiting thread takes it
            elif len(self._threads) < self._capacity():
                self._start_thread()  # raising (a thread limit), it queues nothing
            self._queue.put(item)

    def _start_thread(self) -> None:
        """Start one more worker (with ``_lock`` held)."""
        thread = threading.Thread(
            target=self._work, name=f"{self._name}-{self._started}", daemon=True
        )
        thread.start()  # (it waits for the queue; _lock keeps it out of _threads until then)
        self._started += 1
        self._threads.append(thread)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future = item.future
            if isinstance(future, Future):
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(item.fn())
                    except BaseException as exc:  # a handler's SystemExit is its result too
                        future.set_exception(exc)
            elif self._begin(item):  # else cancelled while queued: skipped, not leaked
                try:
                    done: _Done = (future, True, item.fn())
                except BaseException as exc:
                    done = (future, False, exc)
                stays = self._end(item)
                self._hand_back(done)
                if not stays:
                    return  # a leaked thread the pool no longer needs
            with self._lock:
                self._idle += 1

    def _begin(self, item: _Call) -> bool:
        """Mark ``item`` running, unless its future was cancelled while it was queued."""
        with self._lock:
            if item.future.cancelled():
                return False
            item.started = self._monotonic()
            return True

    def _end(self, item: _Call) -> bool:
        """``item`` returned: if its thread was leaked, it is no longer; whether the thread
        stays in the pool (False: the pool is full without it, so it exits)."""
        with self._lock:
            assert item.started is not None
            ran = self._monotonic() - item.started
            item.started = None
            if not item.leaked:
                return True
            self._leaked -= 1
            stays = len(self._threads) <= self._capacity()
            if not stays:
                self._threads.remove(threading.current_thread())
            leaked = self._leaked
        log.info(
            "sync handler %s returned after %.1fs, after its run had been cancelled; its "
            "outcome is ignored and its thread is free again (%d thread(s) still leaked)",
            item.name,
            ran,
            leaked,
            extra={"action": "leaked_thread_returned", "job": item.name},
        )
        return stays

    def _on_cancel(self, item: _Call, future: asyncio.Future[Any]) -> None:
        """On the loop, when ``item``'s future is cancelled: if its call runs, the thread is
        leaked; replace it while under the bound."""
        if not future.cancelled():
            return
        self._in_flight -= 1  # whatever the call does now, its outcome is not awaited
        with self._lock:
            if item.started is None or item.leaked:
                return  # never started (it will be skipped), or already returned
            item.leaked = True
            self._leaked += 1
            self.leaked_total += 1
            replaced = self._leaked <= self.max_leaked
            if replaced and not self._closed and len(self._threads) < self._capacity():
                self._start_thread()
            leaked, bound = self._leaked, self.max_leaked
        if replaced:
            effect = "started a replacement thread"
        else:
            effect = (
                "not replaced: leaked threads reach the bound (max_leaked_threads), so "
                "sync runs may wait for a free thread and /readyz fails until one returns"
            )
        log.warning(
            "sync handler %s is still running after its run was cancelled (timeout); "
            "Python cannot stop its thread, which stays busy until the handler returns; "
            "%s (%d leaked thread(s), bound %d)",
            item.name,
            effect,
            leaked,
            bound,
            extra={"action": "leaked_thread", "job": item.name},
        )

    def _hand_back(self, done: _Done) -> None:
        with self._done_lock:
            self._done.append(done)
            first = len(self._done) == 1
        if first and self._loop is not None:
            # A closed loop raises RuntimeError: nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._resolve)

    def _resolve(self) -> None:
        with self._done_lock:
            done, self._done = self._done, []
        for future, returned, value in done:
            if future.done():
                continue  # cancelled meanwhile (a timeout): the late outcome is ignored
            self._in_flight -= 1
            if returned:
                future.set_result(value)
            else:
                future.set_exception(value)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item.future.cancel()
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                thread.join()


class _PoolFuture(asyncio.Future[T]):
    """The future of a call run by the pool: calls ``on_cancel`` when it is cancelled."""

    on_cancel: Callable[[], None] | None = None

    def cancel(self, msg: Any = None) -> bool:
        cancelled = super().cancel(msg)
        if cancelled and self.on_cancel is not None:
            self.on_cancel()
        return cancelled


def _describe(call: Callable[..., Any]) -> str:
    """A readable name of ``call`` (the function inside a ``functools.partial``)."""
    fn = call.func if isinstance(call, functools.partial) else call
    return str(getattr(fn, "__qualname__", None) or repr(fn))
