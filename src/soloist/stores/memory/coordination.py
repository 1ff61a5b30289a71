"""Leader leases and instance heartbeats of the memory store, as plain state.

The methods are synchronous and take ``now``: the store calls them under its lock, which
makes each one atomic. Lease rows are never deleted, so epochs never repeat.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime, timedelta

from soloist.models import InstanceInfo, LeaderLease

#: How long after expiring an instance's row is forgotten by ``instance_list``.
INSTANCE_RETENTION = timedelta(hours=1)


class Elections:
    """One lease per election name; see ``Store.leader_*`` for the contract."""

    def __init__(self) -> None:
        self._leases: dict[str, LeaderLease] = {}

    def attempt_elect(
        self, name: str, instance_id: str, ttl: timedelta, now: datetime
    ) -> LeaderLease | None:
        lease = self._leases.get(name)
        if lease is not None and lease.expires_at > now:
            if lease.leader_id != instance_id:
                return None
            lease = replace(lease, expires_at=now + ttl)  # the holder extends its term
        else:
            epoch = lease.epoch + 1 if lease is not None else 1
            lease = LeaderLease(name, instance_id, epoch, now, now + ttl)
        self._leases[name] = lease
        return lease

    def _held(self, name: str, instance_id: str, epoch: int, now: datetime) -> LeaderLease | None:
        lease = self._leases.get(name)
        if lease is None or lease.expires_at <= now:
            return None
        if lease.leader_id != instance_id or lease.epoch != epoch:
            return None
        return lease

    def renew(
        self, name: str, instance_id: str, epoch: int, ttl: timedelta, now: datetime
    ) -> LeaderLease | None:
        lease = self._held(name, instance_id, epoch, now)
        if lease is None:
            return None
        lease = self._leases[name] = replace(lease, expires_at=now + ttl)
        return lease

    def resign(self, name: str, instance_id: str, epoch: int, now: datetime) -> bool:
        lease = self._held(name, instance_id, epoch, now)
        if lease is None:
            return False
        self._leases[name] = replace(lease, expires_at=now)
        return True

    def get(self, name: str, now: datetime) -> LeaderLease | None:
        lease = self._leases.get(name)
        return lease if lease is not None and lease.expires_at > now else None


class Instances:
    """The instances' heartbeats, by instance id."""

    def __init__(self) -> None:
        self._rows: dict[str, InstanceInfo] = {}

    def heartbeat(self, info: InstanceInfo, ttl: timedelta, now: datetime) -> None:
        old = self._rows.get(info.instance_id)
        started = old.started_at if old is not None else info.started_at
        self._rows[info.instance_id] = replace(
            info, started_at=started, last_seen=now, expires_at=now + ttl
        )

    def live(self, now: datetime) -> list[InstanceInfo]:
        forget = now - INSTANCE_RETENTION
        for instance_id in [i for i, row in self._rows.items() if row.expires_at <= forget]:
            del self._rows[instance_id]
        return [
            replace(row, metadata=copy.deepcopy(row.metadata))
            for instance_id, row in sorted(self._rows.items())
            if row.expires_at > now
        ]

    def remove(self, instance_id: str) -> None:
        self._rows.pop(instance_id, None)
