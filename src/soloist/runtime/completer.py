"""Batched completions: the outcomes of many runs written in one store call, and never
dropped by a transient store error.

A run hands its outcome to :meth:`Completer.complete` and waits for the answer, whether
its write applied (False: the fence rejected it, the lease had been lost). This is a group
commit, with no timer to tune:

* when no write is in flight, the first outcome starts one at once (after one turn of the
  event loop, so that the runs finishing in that same turn join it): an idle instance
  records an outcome with no added latency;
* outcomes that arrive while a write is in flight wait for it and all go in the next
  one (at most ``max_batch`` per call): under load the batch grows to whatever finished
  during one round trip, and the number of store calls falls accordingly;
* while ``hold()`` says that more outcomes are about to come (short ``def`` handlers still
  running in the worker threads, whose outcomes reach the loop one thread at a time, not
  in the same turn), the write waits :data:`HOLD` more for them: one write instead of
  several, for about a millisecond of latency on the outcome (the slot is already free).

Each outcome is still fenced on its own by the store: one stale runner in a batch does
not stop the others from being recorded.

**Store errors.** A finished outcome is worth keeping: the handler's work is done. When a
batch's write fails (a terminated connection, a pool timeout, a Redis reconnect, SQLite
busy, or no answer within the call's deadline), each of its outcomes is retried *on its
own*, so that one outcome the store refuses cannot fail the others, with backoff, until its
run's lease deadline (which the heartbeater keeps extending while the store answers). A
write is fenced and therefore safe to repeat; a retry that the fence refuses reads the
occurrence's audit log, and counts as applied if it holds exactly this outcome under this
runner's token (the first write did commit; only its answer was lost). Past
the deadline the outcome is given up: the lease expires, another instance reaps the
occurrence and runs it again, as after a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from soloist.models import Outcome
from soloist.runtime.service import ServiceBundle, cancel_requested
from soloist.stores.base import Store

#: Most outcomes per store call: bounds the statement size and one call's latency.
MAX_BATCH = 2000
#: First pause before retrying a failed write; doubles up to ``MAX_RETRY_PAUSE``.
FIRST_RETRY_PAUSE = 0.05
MAX_RETRY_PAUSE = 1.0
#: The shortest deadline a store call gets (below it, the call is not worth starting).
MIN_CALL_TIMEOUT = 0.05
#: A write unanswered for this long (s) counts as stalled (see :meth:`Completer.stalled`).
STALLED = 0.25
#: How long (s) a write waits for the outcomes that ``hold()`` says are about to come.
HOLD = 0.001


@dataclass
class _Pending:
    outcome: Outcome
    future: asyncio.Future[bool]
    #: The monotonic time until which this outcome may still be written (its lease).
    deadline: Callable[[], float]


class OutcomeNotRecorded(Exception):
    """An outcome could not be written before its run's lease deadline; carries the last
    store error (as ``__cause__``)."""


class Completer:
    """Writes outcomes for one instance in batches; see the module docstring."""

    def __init__(
        self,
        bundle: ServiceBundle,
        store: Store,
        *,
        call_timeout: float,
        max_batch: int = MAX_BATCH,
        hold: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        #: Whether more outcomes are about to come: a write then waits HOLD for them.
        self.hold = hold
        self.instance_id = bundle.instance_id
        #: Deadlines are on the instance's clock (a FakeClock in tests).
        self.monotonic = bundle.clock.monotonic
        #: Longest wait for one store call (a hung connection must not hold outcomes).
        self.call_timeout = call_timeout
        self.max_batch = max_batch
        self._pending: list[_Pending] = []
        self._writer: asyncio.Task[None] | None = None
        self._retries: set[asyncio.Task[None]] = set()
        #: Monotonic time the write in flight was sent, None when none is.
        self._writing_since: float | None = None
        #: Store calls made, outcomes written, and writes retried, for tests and metrics.
        self.writes = 0
        self.written = 0
        self.retried = 0

    def stalled(self) -> bool:
        """Writes are not going through: an outcome is being retried after a failed write,
        or the write in flight has gone unanswered for :data:`STALLED` (the executor then
        holds fewer finished runs, and claims nothing ahead)."""
        since = self._writing_since
        return bool(self._retries) or (since is not None and self.monotonic() - since > STALLED)

    @property
    def idle(self) -> bool:
        """No outcome is waiting or being written."""
        return self._writer is None and not self._pending and not self._retries

    async def complete(self, outcome: Outcome, deadline: Callable[[], float] | None = None) -> bool:
        """Record ``outcome`` (fenced); True if it applied. ``deadline`` gives the monotonic
        time until which store errors are retried (default: one call timeout from now).
        Raises :class:`OutcomeNotRecorded` once that deadline has passed.

        The outcome is queued before this coroutine first suspends, so a caller that checks
        a flag and then awaits this leaves no gap in which :meth:`drain` could miss it.
        Cancelling the caller does not withdraw the outcome: it is written anyway."""
        loop = asyncio.get_running_loop()
        if deadline is None:
            fixed = self.monotonic() + self.call_timeout
            deadline = lambda: fixed  # noqa: E731 - a constant deadline
        future: asyncio.Future[bool] = loop.create_future()
        self._pending.append(_Pending(outcome, future, deadline))
        if self._writer is None:
            self._writer = loop.create_task(self._write_all(), name="soloist-completer")
        return await future

    async def drain(self) -> None:
        """Wait until every outcome queued so far has been written (or given up)."""
        while self._writer is not None or self._retries:
            await asyncio.wait([t for t in (self._writer, *self._retries) if t is not None])

    async def _write_all(self) -> None:
        batch: list[_Pending] = []
        try:
            while self._pending:
                await asyncio.sleep(0)  # runs finishing in this loop turn join the batch
                if self.hold is not None and self.hold():
                    await asyncio.sleep(HOLD)
                batch = self._pending[: self.max_batch]
                del self._pending[: len(batch)]
                self._writing_since = self.monotonic()
                try:
                    await self._write(batch)
                finally:
                    self._writing_since = None
                batch = []
        finally:
            # Only reached with work left if this task was cancelled (the loop is closing):
            # nobody must wait forever for an answer that will not come.
            for item in [*batch, *self._pending]:
                item.future.cancel()
            self._pending.clear()
            self._writer = None

    async def _write(self, batch: Sequence[_Pending]) -> None:
        self.writes += 1
        try:
            applied = await asyncio.wait_for(
                self.store.occurrence_complete(self.instance_id, [i.outcome for i in batch]),
                # The write is fenced: a late one is harmless, so it gets a full call even
                # when a lease deadline is near (that only decides whether to try again).
                self.call_timeout,
            )
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError) and cancel_requested():
                raise  # the loop is closing
            loop = asyncio.get_running_loop()
            for item in batch:  # each on its own from now on
                task = loop.create_task(self._retry(item, exc), name="soloist-completer-retry")
                self._retries.add(task)
                task.add_done_callback(self._retries.discard)
            return
        self.written += len(batch)
        for item in batch:
            if not item.future.done():
                item.future.set_result(item.outcome.id in applied)

    async def _retry(self, item: _Pending, error: BaseException) -> None:
        pause = FIRST_RETRY_PAUSE
        while not item.future.done():
            if self.monotonic() + pause >= item.deadline():
                # One last look: the failed write may have committed after all.
                with contextlib.suppress(Exception):
                    if await asyncio.wait_for(self._committed(item.outcome), self.call_timeout):
                        self.written += 1
                        if not item.future.done():
                            item.future.set_result(True)
                        return
                self._fail(item, error)
                return
            await asyncio.sleep(pause)
            pause = min(MAX_RETRY_PAUSE, pause * 2)
            self.retried += 1
            try:
                applied = await asyncio.wait_for(self._write_again(item), self.call_timeout)
            except (Exception, asyncio.CancelledError) as exc:
                if isinstance(exc, asyncio.CancelledError) and cancel_requested():
                    raise
                error = exc
                continue
            self.written += 1
            if not item.future.done():
                item.future.set_result(applied)

    async def _write_again(self, item: _Pending) -> bool:
        """Write one outcome again; if the fence refuses it, whether the earlier write had
        in fact committed (the row holds this very outcome under this runner's token)."""
        outcome = item.outcome
        applied = await self.store.occurrence_complete(self.instance_id, [outcome])
        return outcome.id in applied or await self._committed(outcome)

    async def _committed(self, outcome: Outcome) -> bool:
        """Whether this runner's write of ``outcome`` is in the store already."""
        # The audit record is written in the same atomic step as the outcome, and only by
        # the write that ended this attempt (a reap writes ``crashed`` or ``crash_loop``).
        return any(
            record.fencing_token == outcome.fencing_token
            and record.instance_id == self.instance_id
            and record.outcome == outcome.state.value
            and record.error_code == outcome.error_code
            for record in await self.store.occurrence_attempts(outcome.id)
        )

    @staticmethod
    def _fail(item: _Pending, error: BaseException) -> None:
        if item.future.done():
            return
        failure = OutcomeNotRecorded(f"{type(error).__name__}: {error}")
        failure.__cause__ = error
        item.future.set_exception(failure)
        # The caller may have been cancelled meanwhile: retrieve it here so that asyncio
        # does not log it as never retrieved.
        with contextlib.suppress(BaseException):
            item.future.exception()
