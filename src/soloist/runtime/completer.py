"""Batched completions: the outcomes of many runs written in one store call.

A run hands its outcome to :meth:`Completer.complete` and waits for the answer, whether
its write applied (False: the fence rejected it, the lease had been lost). This is a group
commit, with no timer to tune:

* when no write is in flight, the first outcome starts one at once (after one turn of the
  event loop, so that the runs finishing in that same turn join it): an idle instance
  records an outcome with no added latency;
* outcomes that arrive while a write is in flight wait for it and all go in the next
  one (at most ``max_batch`` per call): under load the batch grows to whatever finished
  during one round trip, and the number of store calls falls accordingly.

Each outcome is still fenced on its own by the store: one stale runner in a batch does
not stop the others from being recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from soloist.models import Outcome
from soloist.stores.base import Store

#: Most outcomes per store call: bounds the statement size and one call's latency.
MAX_BATCH = 2000

_Pending = tuple[Outcome, "asyncio.Future[bool]"]


class Completer:
    """Writes outcomes for one instance in batches; see the module docstring."""

    def __init__(self, store: Store, instance_id: str, *, max_batch: int = MAX_BATCH) -> None:
        self.store = store
        self.instance_id = instance_id
        self.max_batch = max_batch
        self._pending: list[_Pending] = []
        self._writer: asyncio.Task[None] | None = None
        #: Store calls made and outcomes written, for tests and metrics.
        self.writes = 0
        self.written = 0

    @property
    def idle(self) -> bool:
        """No outcome is waiting or being written."""
        return self._writer is None and not self._pending

    async def complete(self, outcome: Outcome) -> bool:
        """Record ``outcome`` (fenced); True if it applied. Raises what the store raised.

        The outcome is queued before this coroutine first suspends, so a caller that checks
        a flag and then awaits this leaves no gap in which :meth:`drain` could miss it.
        Cancelling the caller does not withdraw the outcome: it is written anyway."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._pending.append((outcome, future))
        if self._writer is None:
            self._writer = loop.create_task(self._write_all(), name="soloist-completer")
        return await future

    async def drain(self) -> None:
        """Wait until every outcome queued so far has been written (or has failed)."""
        while self._writer is not None:
            await asyncio.wait([self._writer])

    async def _write_all(self) -> None:
        batch: list[_Pending] = []
        try:
            while self._pending:
                await asyncio.sleep(0)  # runs finishing in this loop turn join the batch
                batch = self._pending[: self.max_batch]
                del self._pending[: len(batch)]
                await self._write(batch)
                batch = []
        finally:
            # Only reached with work left if this task was cancelled (the loop is closing):
            # nobody must wait forever for an answer that will not come.
            for _, future in [*batch, *self._pending]:
                future.cancel()
            self._pending.clear()
            self._writer = None

    async def _write(self, batch: Sequence[_Pending]) -> None:
        self.writes += 1
        try:
            applied = await self.store.occurrence_complete(
                self.instance_id, [outcome for outcome, _ in batch]
            )
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
                    # The caller may have been cancelled meanwhile: retrieve it here so
                    # that asyncio does not log it as never retrieved.
                    future.exception()
            return
        self.written += len(batch)
        for outcome, future in batch:
            if not future.done():
                future.set_result(outcome.id in applied)
