"""A thread pool whose threads never hold up interpreter exit, for sync handlers.

``ThreadPoolExecutor`` joins its workers when the interpreter exits, so a sync handler
still running after the grace period would keep a stopping instance alive (until its
orchestrator kills it) while another instance already runs the released occurrence. These
workers are daemon threads: when the instance is done, the process exits.

:meth:`DaemonThreadPool.run` hands results back to the event loop in bursts: the first
call to finish wakes the loop (one ``call_soon_threadsafe``), and the calls that finish
before the loop gets round to it ride along. ``loop.run_in_executor`` would wake the loop
once per call, which costs more than a short handler itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")

#: A call and where its outcome goes: a concurrent future (``submit``), or an asyncio
#: future of a loop (``run``).
_Item = tuple[Callable[[], Any], "Future[Any] | asyncio.Future[Any]"]
#: An outcome waiting for the loop: the future, whether the call returned, its value.
_Done = tuple["asyncio.Future[Any]", bool, Any]


class DaemonThreadPool(Executor):
    """At most ``workers`` daemon threads, started on demand, running submitted calls."""

    def __init__(self, workers: int, name: str) -> None:
        self._workers = workers
        self._name = name
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: list[_Done] = []
        self._done_lock = threading.Lock()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        self._put((lambda: fn(*args, **kwargs), future))
        return future

    def run(self, call: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``call`` in a worker thread; its outcome as a future of the running loop
        (one loop per pool). Cancelling the future does not stop a call already running."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("a DaemonThreadPool serves one event loop")
        future: asyncio.Future[T] = loop.create_future()
        self._put((call, future))
        return future

    def _put(self, item: _Item) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot run a handler: the worker pool is shut down")
            self._queue.put(item)
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._workers:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            call, future = item
            if isinstance(future, Future):
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(call())
                    except BaseException as exc:  # a handler's SystemExit is its result too
                        future.set_exception(exc)
            elif not future.cancelled():
                try:
                    self._hand_back((future, True, call()))
                except BaseException as exc:
                    self._hand_back((future, False, exc))
            self._idle.release()

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
                    item[1].cancel()
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                thread.join()
