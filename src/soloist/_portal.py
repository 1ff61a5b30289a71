"""A private event loop for sync calls made while no scheduler loop runs, run by the
threads that call it.

A Django view or a script calls ``app.enqueue(...)``: there is no running soloist loop to
hand the call to. Running each call on a fresh ``asyncio.run`` loop would open, migrate and
close the store every time (a new connection pool per request on PostgreSQL). The portal
keeps one loop instead, so the store it opens stays open and warm, and calls from many
threads at once run concurrently on it.

No thread of its own runs that loop: a call runs it in the calling thread. Handing each
call to a loop thread and waiting for its answer costs two thread wake-ups, about 80 µs
per call on a small machine (as much as the store's own round trip), which a sync
``enqueue`` pays every time. So whichever calling thread finds the loop free *drives* it:
it starts its coroutine and runs the loop until that coroutine is done. A call that comes
while another thread drives hands its coroutine to the loop (thread-safely) and waits; the
driver runs it along with its own. A driver whose own call is done stops and passes the
loop on to one waiting call whose coroutine is not done, which drives from then on; so no
call waits for the loop to be free, and no driver serves others for longer than its own
call. Between calls the loop does not run: the connections it holds sit idle, as they
would in a pool, and what was scheduled on it (a pool's upkeep) runs with the next call.

After ``os.fork`` (a pre-forking server) the child gets a portal of its own: the parent's
loop and its connections are not the child's. The loop polls with ``poll()``, not epoll:
an epoll instance is shared with a forked child, and the child closing its copy of the
loop (when it drops that portal) would unregister the parent's wake-up pipe from it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import selectors
import threading
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: Seconds between a waiting call's looks at a free loop, should the pass of the loop to it
#: be missed (a driver stopped by an error it could not hand on).
_RECHECK = 0.1
#: Seconds :meth:`Portal.close` waits for a call under way to end.
_CLOSE_WAIT = 10.0
#: A selector that keeps no state in the kernel (``poll()``), where there is one.
_Selector = getattr(selectors, "PollSelector", selectors.SelectSelector)


class _Call(Generic[T]):
    """One sync call on the portal: its coroutine, the loop future of its outcome, and
    the event its thread waits on (set when the outcome is in, or the loop is passed to
    it)."""

    __slots__ = ("coro", "done", "wake")

    def __init__(self, coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> None:
        self.coro = coro
        self.done: asyncio.Future[T] = loop.create_future()
        self.wake = threading.Event()


class Portal:
    """One event loop for the sync calls of a process, driven by the threads that call."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.SelectorEventLoop(_Selector())
        self._driving = threading.Lock()  # held by the thread that runs the loop
        self._state = threading.Lock()  # guards _waiting and _closed
        self._waiting: list[_Call[Any]] = []  # calls whose thread waits for the loop
        self._closed = False

    @property
    def usable(self) -> bool:
        """False in a forked child or after :meth:`close`."""
        return self.pid == os.getpid() and not self._closed

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the portal's loop and return its result (from any thread in
        which no event loop runs). A cancelled call raises
        ``concurrent.futures.CancelledError``, as a call handed to a loop thread would."""
        if self._closed:
            coro.close()
            raise RuntimeError("this portal is closed")
        call = _Call(coro, self.loop)
        if self._driving.acquire(blocking=False):
            # The loop is free: no hand-off, no thread to wake.
            self._drive(call, start=True)
            return _outcome(call)
        with self._state:
            self._waiting.append(call)
        self.loop.call_soon_threadsafe(self._start, call)
        while not call.done.done():
            if self._driving.acquire(blocking=False):
                self._drive(call)  # passed to this call, or found free
                break
            if self.loop.is_closed():
                raise RuntimeError("this portal was closed before the call ran")
            call.wake.wait(_RECHECK)
            call.wake.clear()
        return _outcome(call)

    def _start(self, call: _Call[T]) -> None:
        """Start ``call``'s coroutine on the loop (run by the driver)."""
        task = self.loop.create_task(call.coro)
        task.add_done_callback(lambda _: self._finish(call, task))

    def _finish(self, call: _Call[T], task: asyncio.Task[T]) -> None:
        if task.cancelled():
            call.done.cancel()
        elif (error := task.exception()) is not None:
            call.done.set_exception(error)
        else:
            call.done.set_result(task.result())
        with self._state:
            if call in self._waiting:
                self._waiting.remove(call)
        call.wake.set()

    def _drive(self, call: _Call[T], *, start: bool = False) -> None:
        """Run the loop until ``call`` is done (``_driving`` held by this thread; with
        ``start``, start the call first), then free the loop and pass it on to a waiting
        call, if any. An interruption of this thread (KeyboardInterrupt, SystemExit) ends
        the drive and is raised; the calls on the loop go on with the next driver."""
        loop = self.loop
        try:
            if start:
                self._start(call)
            # A stop left over from an interrupted drive only ends one turn early.
            call.done.add_done_callback(lambda _: loop.stop())
            while not call.done.done():
                loop.run_forever()
        finally:
            self._driving.release()
            with self._state:
                heir = self._waiting[0] if self._waiting else None
            if heir is not None:
                heir.wake.set()

    def close(self) -> None:
        """Close the loop (its store closed first, by the owner), after a call under way
        ends (up to :data:`_CLOSE_WAIT` seconds; else the loop is left open). Safe twice.
        From a thread in which an event loop runs, close from another thread."""
        with self._state:
            if self._closed:
                return
            self._closed = True
        if self.pid != os.getpid():
            return  # a forked child: the loop is the parent's
        if not self._driving.acquire(timeout=_CLOSE_WAIT):
            return
        try:
            if not self.loop.is_closed():
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.close()
        finally:
            self._driving.release()
        with self._state:
            stranded, self._waiting = self._waiting, []
        for call in stranded:
            call.wake.set()  # their calls cannot run: they see the closed loop


def _outcome(call: _Call[T]) -> T:
    if call.done.cancelled():
        raise concurrent.futures.CancelledError
    return call.done.result()
