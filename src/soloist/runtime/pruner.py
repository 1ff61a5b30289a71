"""History retention: the pruner deletes finished occurrences beyond the store's bounds.

A store's URL bounds its history (``history_max``: the newest finished occurrences kept,
``history_age``: how long they are kept; see :class:`~soloist.stores.urls.Retention`).
Every :data:`PRUNE_INTERVAL` the leader (one instance at a time: cheap, and deletes are
idempotent, so a second pruner during a change of leader does no harm) deletes what is
beyond them through :meth:`~soloist.stores.base.Store.history_prune`, at most
:data:`PRUNE_BATCH` rows per store call, with a pause of :data:`PRUNE_PAUSE` between
batches while a backlog lasts: each batch is one short statement on an index of finished
rows, so claims never wait long behind it (SQLite has one write lock; PostgreSQL locks
only the rows it deletes). The store keeps what planning, retries and status need: only
finished rows go, and on SQL stores each job's newest one stays.

Redis and etcd also trim with every write that finishes occurrences; the pruner adds the
age bound on a store where nothing finishes any more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from soloist.runtime.service import Service, ServiceBundle
from soloist.stores.base import Store
from soloist.stores.urls import Retention

__all__ = ["PRUNE_BATCH", "PRUNE_INTERVAL", "PRUNE_PAUSE", "Pruner"]

#: Seconds between two pruning passes. These three are read when a Pruner is made (tests
#: set them lower).
PRUNE_INTERVAL = 60.0
#: The most finished occurrences deleted by one store call.
PRUNE_BATCH = 1000
#: Seconds between two batches of one pass, so that claims get the store in between.
PRUNE_PAUSE = 0.1


class Pruner(Service):
    name = "pruner"

    def __init__(
        self,
        bundle: ServiceBundle,
        store: Store,
        active: Callable[[], bool],
        *,
        interval: float | None = None,
        batch: int | None = None,
        pause: float | None = None,
    ) -> None:
        """``active``: whether this instance prunes now (the leader does); the others
        default to the module's constants, read now."""
        super().__init__(bundle)
        self.store = store
        self.active = active
        self.interval = PRUNE_INTERVAL if interval is None else interval
        self.batch = PRUNE_BATCH if batch is None else batch
        self.pause = PRUNE_PAUSE if pause is None else pause
        #: Finished occurrences this instance deleted, and those of the current pass.
        self.pruned_total = 0
        self._pass = 0

    @property
    def retention(self) -> Retention | None:
        """The store's history bounds (None: it has none, as memory)."""
        found = getattr(self.store, "retention", None)
        return found if isinstance(found, Retention) and found.bounded else None

    def bounds(self, now: datetime) -> tuple[datetime | None, int | None]:
        """``before`` and ``keep`` for :meth:`Store.history_prune` at the store's ``now``."""
        retention = self.retention
        if retention is None:
            return None, None
        age = retention.history_age
        return (now - age if age is not None else None), (retention.history_max or None)

    async def tick(self) -> float:
        if self.retention is None or not self.active():
            return self.interval
        before, keep = self.bounds(await self.store.now())
        deleted = await self.store.history_prune(before, keep, self.batch)
        self.pruned_total += deleted
        self._pass += deleted
        if deleted >= self.batch:
            return self.pause  # a backlog: the next batch after a pause
        if self._pass:
            retention = self.retention
            # Routine trimming (less than a batch a minute) is not news; a backlog is.
            self.log(
                logging.INFO if self._pass >= self.batch else logging.DEBUG,
                "pruned %d finished occurrence(s) from the history (history_max=%s, "
                "history_age=%s)",
                self._pass,
                retention.history_max if retention else None,
                retention.history_age if retention else None,
                action="prune",
                pruned=self._pass,
            )
            self._pass = 0
        return self.interval
