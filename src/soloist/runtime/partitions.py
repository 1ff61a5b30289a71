"""Partitioned planning: live instances share the streams to plan, partition by partition.

Design (after go-etcd-cron's partition keys, with fencing added):

* Every (job, scope) stream hashes into one of 4096 slots
  (:func:`soloist.models.stream_slot`); the ``count`` partitions (``partitions=``, 64 by
  default) are ranges of slots. The count is the same for every instance of an app: an
  instance that sees a live instance announce another count (or none: an older version)
  refuses to plan, releases what it holds, and says why, until they agree.
* Each partition has a lease in the store (holder, **epoch**, expiry on the store's
  clock). The epoch rises at each change of holder and fences the plans written under it
  (:class:`soloist.models.PlanFence`): a holder that lost its partition cannot write.
* Which instance should hold which partition is computed by every instance alike from the
  live instances (``instance_list``, the ones in ``distributed`` mode): rendezvous
  hashing bounded to ``ceil(count / live)`` partitions each, so each holds about
  count / live, and an instance joining or leaving moves few partitions. An instance takes
  the partitions it should hold when they are free, and releases the others at once, so
  a rebalance takes one poll (at most 0.5 s) on each side.
* Leases last ``ttl`` (the lease TTL) and are renewed every ttl / 4; an instance trusts
  its partitions only until ``start of the last successful sync + 3/4 ttl`` on its own
  monotonic clock, as the leader does. A killed holder's partitions expire, it drops out
  of the live instances after the same TTL, and the others take its partitions at their
  next poll: within about ``ttl`` + 0.5 s.
* Execution stays shared: partitions decide only who plans.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable
from datetime import timedelta

from soloist.models import (
    InstanceInfo,
    PartitionLease,
    PlanFence,
    partition_slots,
    slot_partition,
)
from soloist.reports import spans
from soloist.runtime.planner import Announced
from soloist.runtime.service import LeaseTiming, Service, ServiceBundle
from soloist.stores.base import Store

__all__ = ["DEFAULT_PARTITIONS", "Partitions", "assign"]

#: Partitions per app unless ``partitions=`` / ``SOLOIST_PARTITIONS`` says otherwise.
DEFAULT_PARTITIONS = 64
#: The instances of this mode share planning by partitions.
PARTITIONED_MODE = "distributed"


def _rank(partition: int, instance_id: str) -> bytes:
    return hashlib.blake2b(f"{partition}/{instance_id}".encode(), digest_size=8).digest()


def assign(instances: list[str], count: int) -> dict[str, list[int]]:
    """Which partitions each instance should hold: for each partition in turn, the
    instance that ranks it highest (rendezvous hashing) among those still under
    ``ceil(count / len(instances))``. The same inputs give the same answer everywhere."""
    if not instances:
        return {}
    cap = math.ceil(count / len(instances))
    out: dict[str, list[int]] = {i: [] for i in instances}
    for partition in range(count):
        ranked = sorted(instances, key=lambda i: _rank(partition, i), reverse=True)
        owner = next(i for i in ranked if len(out[i]) < cap)
        out[owner].append(partition)
    return out


class Partitions(Service):
    name = "partitions"

    def __init__(
        self,
        bundle: ServiceBundle,
        store: Store,
        *,
        count: int,
        ttl: timedelta,
        on_gained: Callable[[], None] | None = None,
        on_agreed: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(bundle)
        self.store = store
        self.count = count
        self.ttl = ttl
        timing = LeaseTiming.of(ttl)
        self.renew_interval = timing.renew
        self.trust_window = timing.trust
        self.poll_interval = timing.poll
        self.on_gained = on_gained
        #: Called when instances agree on the count again after a disagreement (an older
        #: version has gone: what it wrote is entered into the index again).
        self.on_agreed = on_agreed
        #: What the live instances define, as the last poll saw it.
        self.seen: Announced | None = None
        #: Why the instances plan shared, not by partitions (they define different jobs or
        #: tasks), or None.
        self.shared: str | None = None
        #: The partitions this instance holds, as the last sync left them.
        self.held: dict[int, PartitionLease] = {}
        self.trusted_until = 0.0
        #: Why this instance does not plan (instances disagree on the count), or None.
        self.refusal: str | None = None
        self.want: list[int] = []
        self._synced_at: float | None = None

    # -- what the planner asks -----------------------------------------------------------------
    def _trusted(self) -> dict[int, PartitionLease]:
        if self.refusal is not None or self.clock.monotonic() >= self.trusted_until:
            return {}
        return self.held

    def held_slots(self) -> list[tuple[int, int]] | None:
        """The slot ranges of the partitions held and trusted now, merged; None while the
        instances plan shared (they define different jobs or tasks)."""
        if self.shared is not None and self.refusal is None:
            return None
        ranges: list[tuple[int, int]] = []
        for partition in sorted(self._trusted()):
            lo, hi = partition_slots(partition, self.count)
            if ranges and ranges[-1][1] == lo:
                ranges[-1] = (ranges[-1][0], hi)
            elif lo < hi:
                ranges.append((lo, hi))
        return ranges

    def announced(self) -> Announced | None:
        return self.seen

    def resync(self) -> None:
        """Plan writes were refused: distrust the partitions until the next sync, now."""
        self.trusted_until = 0.0
        self._synced_at = None
        self.wake()

    def fence(self, slot: int) -> PlanFence | None:
        """The fence of the trusted partition that has ``slot``, or None."""
        partition = slot_partition(slot, self.count)
        lease = self._trusted().get(partition)
        return PlanFence(partition, lease.epoch) if lease is not None else None

    # -- the loop ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Take this instance's partitions once before the loop starts, so that the
        planner, started next, plans at once."""
        if not self.running:
            try:
                await self.tick()
            except Exception as exc:  # the loop retries; the planner waits for partitions
                self.log(logging.WARNING, "first partition sync failed: %s", exc, action="error")
        await super().start()

    async def tick(self) -> float:
        live = await self.store.instance_list()
        peers = {i.instance_id: i for i in live if i.mode == PARTITIONED_MODE}
        self._see(peers)
        others = {
            iid: info.metadata.get("partitions")
            for iid, info in peers.items()
            if iid != self.instance_id and info.metadata.get("partitions") != self.count
        }
        if others:
            await self._refuse(others)
            return self.poll_interval
        if self.refusal is not None:
            self.log(
                logging.WARNING,
                "instances agree on %d partitions again: planning",
                self.count,
                action="partitions_agree",
            )
            self.refusal = None
            if self.on_agreed is not None:
                self.on_agreed()
        # Instances that stopped planning (shutting down) get no partitions.
        planners = {iid for iid, info in peers.items() if info.metadata.get("plans", True)}
        if await self._shared(peers, planners):
            return self.poll_interval
        want = assign(sorted(planners | {self.instance_id}), self.count)[self.instance_id]
        due = self._synced_at is None or (
            self.clock.monotonic() - self._synced_at >= self.renew_interval
        )
        if due or want != self.want or set(want) - set(self.held):
            self.want = want
            await self._sync(want)
        return self.poll_interval

    def _see(self, peers: dict[str, InstanceInfo]) -> None:
        """Remember what the live instances define (the planner asks)."""
        if not peers:
            return
        self.seen = Announced(
            frozenset(str(j) for info in peers.values() for j in info.metadata.get("jobs", ())),
            frozenset(
                str(t) for info in peers.values() for t in info.metadata.get("task_names", ())
            ),
            max(info.last_seen for info in peers.values()),
        )

    async def _shared(self, peers: dict[str, InstanceInfo], planners: set[str]) -> bool:
        """Whether the planning instances define different jobs or tasks (a rolling deploy
        that adds or renames one, or two apps sharing a store): then a partition's holder
        could not plan every stream of it, so each instance plans, unfenced, every stream
        it defines (as the unique keys allow), until they agree again. Releases the
        partitions on the way in."""
        kinds = {
            (tuple(info.metadata.get("jobs", ())), tuple(info.metadata.get("task_names", ())))
            for iid, info in peers.items()
            if iid in planners
        }
        if len(kinds) <= 1:
            if self.shared is not None:
                self.log(
                    logging.WARNING,
                    "instances define the same jobs again: planning by partitions",
                    action="partitions_shared_end",
                )
                self.shared = None
            return False
        shared = (
            "planning shared, not by partitions: the live instances "
            f"({', '.join(sorted(planners))}) define different jobs or tasks; each plans what "
            "it defines until they agree"
        )
        if shared != self.shared:
            self.log(logging.WARNING, "%s", shared, action="partitions_shared")
        self.shared = shared
        await self._give_up()
        return True

    async def _sync(self, want: list[int]) -> None:
        started = self.clock.monotonic()
        leases = await self.store.partition_sync(self.instance_id, want, self.ttl)
        mine = {lease.partition: lease for lease in leases if lease.holder == self.instance_id}
        gained = sorted(set(mine) - set(self.held))
        lost = sorted(set(self.held) - set(mine))
        self.held = mine
        self.trusted_until = started + self.trust_window
        self._synced_at = started
        if gained or lost:
            self.log(
                logging.INFO,
                "partitions: holds %d of %d (gained %s, gave up %s)",
                len(mine),
                self.count,
                spans(gained),
                spans(lost),
                action="partitions",
            )
        if gained and self.on_gained is not None:
            self.on_gained()

    async def _refuse(self, others: dict[str, object]) -> None:
        described = ", ".join(f"{iid} has {count!r}" for iid, count in sorted(others.items()))
        refusal = (
            f"not planning: this instance has {self.count} partitions and other live "
            f"instances do not ({described}); give every instance the same "
            "partitions= (SOLOIST_PARTITIONS)"
        )
        if refusal != self.refusal:
            self.log(logging.WARNING, "%s", refusal, action="partitions_disagree")
        self.refusal = refusal
        await self._give_up()

    async def _give_up(self) -> None:
        """Hold no partition (refusing, or planning shared)."""
        self.want = []
        if self.held or self._synced_at is None:
            await self._sync([])

    async def release(self) -> None:
        """Give every partition up at once (graceful stop), so others take them over at
        their next poll. Safe twice; a failure only leaves the leases to expire."""
        await self.stop()
        if not self.held:
            return
        try:
            await self.store.partition_sync(self.instance_id, [], self.ttl)
        except Exception as exc:
            self.log(logging.WARNING, "could not release partitions: %s", exc, action="release")
        self.held = {}

    def report(self) -> dict[str, object]:
        """This instance's part of ``GET /status``."""
        return {
            "count": self.count,
            "held": sorted(self._trusted()),
            "refusal": self.refusal,
            "shared": self.shared,
        }
