"""Leader election with fencing epochs.

Design (after River's ``internal/leadership``):

* One lease per election name in the store: holder, **epoch**, expiry on the store's clock.
  The epoch rises by one at each change of holder and never repeats: it is the fencing
  token of leadership (``app.leader_epoch``).
* Every instance runs an :class:`Elector`. A follower tries to take the lease every
  ``follow_interval`` (at most 0.5 s), so a resigned lease passes on within a second and
  an expired one within that much of its expiry.
* The leader renews every ``ttl / 4``. It trusts its leadership only until
  ``start of the last successful renewal + 3/4 ttl`` on its *own monotonic clock*: the
  store's lease, extended at some instant after that start, lasts until at least
  ``start + ttl``, so the leader stops acting before anyone else can be elected, even if
  the store is unreachable and the renewal call hangs.
* On graceful stop the leader resigns (expires its lease at once), so a follower takes
  over at the next try.
* Exactly-once never rests on this: occurrences are still claimed atomically with fenced
  writes. Leadership decides who plans and runs jobs in ``leader`` mode, and is offered
  to users as a primitive (``on_elected`` / ``on_demoted``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from soloist.errors import StoreDataLostError
from soloist.models import LeaderLease
from soloist.runtime.service import LeaseTiming, Service, ServiceBundle
from soloist.stores.base import Store

#: Callbacks receive the epoch of the leadership gained or lost.
LeadershipCallback = Callable[[int], Any]


class Elector(Service):
    name = "elector"

    def __init__(
        self,
        bundle: ServiceBundle,
        store: Store,
        *,
        election: str,
        ttl: timedelta,
        on_elected: list[LeadershipCallback],
        on_demoted: list[LeadershipCallback],
    ) -> None:
        super().__init__(bundle)
        self.store = store
        self.election = election
        self.ttl = ttl
        timing = LeaseTiming.of(ttl)
        self.renew_interval = timing.renew
        self.trust_window = timing.trust
        self.follow_interval = timing.poll
        self.on_elected = on_elected
        self.on_demoted = on_demoted
        self.lease: LeaderLease | None = None
        self.leader_id: str | None = None
        self.epoch: int | None = None
        self.trusted_until = 0.0
        self.changes = 0

    @property
    def is_leader(self) -> bool:
        """True while this instance holds the lease *and* still trusts it."""
        return self.lease is not None and self.clock.monotonic() < self.trusted_until

    async def tick(self) -> float:
        if self.lease is not None:
            return await self._renew(self.lease)
        return await self._follow()

    async def _renew(self, lease: LeaderLease) -> float:
        started = self.clock.monotonic()
        remaining = self.trusted_until - started
        if remaining <= 0:
            await self._demote("could not renew within the trust window")
            return 0.0
        try:
            renewed = await asyncio.wait_for(
                self.store.leader_renew(self.election, self.instance_id, lease.epoch, self.ttl),
                remaining,
            )
        except asyncio.TimeoutError:
            await self._demote("the store did not answer within the trust window")
            return 0.0
        except StoreDataLostError:  # the lease went with the data; the loop reports it
            await self._demote("the store lost its data")
            raise
        except Exception as exc:
            self.metrics.store_error("leader_renew")
            self.log(
                logging.WARNING,
                "could not renew leadership (epoch %d): %s",
                lease.epoch,
                exc,
                action="leader_renew_error",
            )
            return min(self.renew_interval, max(0.05, self.trusted_until - self.clock.monotonic()))
        if renewed is None:
            await self._demote("the lease was taken or expired")
            return 0.0
        self.lease = renewed
        self.trusted_until = started + self.trust_window
        return self.renew_interval

    async def _follow(self) -> float:
        started = self.clock.monotonic()
        lease = await self.store.leader_attempt_elect(self.election, self.instance_id, self.ttl)
        if lease is not None:
            self.trusted_until = started + self.trust_window
            await self._elect(lease)
            return self.renew_interval
        current = await self.store.leader_get(self.election)
        if current is not None:
            if (current.leader_id, current.epoch) != (self.leader_id, self.epoch):
                self.log(
                    logging.DEBUG,
                    "following %s (epoch %d)",
                    current.leader_id,
                    current.epoch,
                    action="following",
                )
            self.leader_id, self.epoch = current.leader_id, current.epoch
        else:
            self.leader_id = None
        return self.follow_interval

    async def _elect(self, lease: LeaderLease) -> None:
        self.lease = lease
        self.leader_id, self.epoch = lease.leader_id, lease.epoch
        self.changes += 1
        self.metrics.leadership(True)
        self.log(
            logging.INFO,
            "became leader of %r (epoch %d)",
            self.election,
            lease.epoch,
            action="became_leader",
            epoch=lease.epoch,
        )
        await self._notify(self.on_elected, lease.epoch)

    async def _demote(self, why: str, level: int = logging.WARNING) -> None:
        lease, self.lease = self.lease, None
        self.trusted_until = 0.0
        if lease is None:
            return
        self.leader_id = None
        self.changes += 1
        self.metrics.leadership(False)
        self.log(
            level,
            "lost leadership of %r (epoch %d): %s",
            self.election,
            lease.epoch,
            why,
            action="lost_leadership",
            epoch=lease.epoch,
        )
        await self._notify(self.on_demoted, lease.epoch)

    async def demote(self, why: str) -> None:
        """Stop leading at once: the lease is known to be gone (the store lost its data)."""
        await self._demote(why)

    async def resign(self) -> None:
        """Stop the loop and give the lease up at once (graceful shutdown). Safe twice."""
        await self.stop()
        lease = self.lease
        if lease is None:
            return
        try:
            await self.store.leader_resign(self.election, self.instance_id, lease.epoch)
        except Exception as exc:
            self.log(logging.WARNING, "could not resign: %s", exc, action="resign_error")
        await self._demote("resigned (graceful stop)", logging.INFO)

    async def _notify(self, callbacks: list[LeadershipCallback], epoch: int) -> None:
        for callback in callbacks:
            try:
                result = callback(epoch)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                self.log(
                    logging.ERROR,
                    "leadership callback %r failed",
                    callback,
                    action="callback_error",
                    exc_info=True,
                )


__all__ = ["Elector", "LeadershipCallback"]
