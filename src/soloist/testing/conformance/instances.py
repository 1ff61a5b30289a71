"""Conformance: instances announcing themselves with heartbeats, listed while alive."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from soloist.errors import PayloadError
from soloist.models import InstanceInfo
from soloist.stores.base import Store
from soloist.testing.clock import FakeClock
from soloist.testing.conformance.base import T0, at

#: The heartbeat time to live used by these tests.
BEAT = timedelta(seconds=30)
#: What callers pass as last_seen/expires_at: the store must overwrite both.
IGNORED = datetime(2000, 1, 1, tzinfo=T0.tzinfo)


def instance_info(
    instance_id: str = "i1",
    *,
    mode: str = "distributed",
    hostname: str = "host-a",
    pid: int = 101,
    started_at: datetime = T0,
    metadata: dict[str, Any] | None = None,
) -> InstanceInfo:
    """An InstanceInfo with test defaults (last_seen/expires_at set to a time to ignore)."""
    return InstanceInfo(
        instance_id=instance_id,
        mode=mode,
        hostname=hostname,
        pid=pid,
        started_at=started_at,
        last_seen=IGNORED,
        expires_at=IGNORED,
        metadata=metadata if metadata is not None else {},
    )


class InstanceConformance:
    async def test_heartbeat_registers_an_instance(self, store: Store) -> None:
        """A first heartbeat stores the fields as given, last_seen = now, expires = now + ttl."""
        info = instance_info(metadata={"version": "1.2", "jobs": 3})
        await store.instance_heartbeat(info, BEAT, now=at(1))
        expected = replace(info, last_seen=at(1), expires_at=at(1) + BEAT)
        assert await store.instance_list(now=at(1)) == [expected]

    async def test_heartbeat_updates_all_but_started_at(self, store: Store, store2: Store) -> None:
        """A later heartbeat keeps the first started_at and updates every other field."""
        await store.instance_heartbeat(instance_info(), BEAT, now=at(1))
        newer = instance_info(
            mode="leader", hostname="host-b", pid=202, started_at=at(5), metadata={"v": 2}
        )
        await store2.instance_heartbeat(newer, BEAT, now=at(10))
        expected = replace(newer, started_at=T0, last_seen=at(10), expires_at=at(10) + BEAT)
        assert await store.instance_list(now=at(10)) == [expected]

    async def test_list_hides_expired_instances_and_sorts_by_id(self, store: Store) -> None:
        """instance_list returns instances with expires_at > now, by instance_id."""
        for instance_id, ttl in (("b", 10), ("a", 30), ("c", 20), ("B", 40)):
            await store.instance_heartbeat(instance_info(instance_id), timedelta(seconds=ttl), T0)
        assert [i.instance_id for i in await store.instance_list(now=T0)] == ["B", "a", "b", "c"]
        assert [i.instance_id for i in await store.instance_list(now=at(10))] == ["B", "a", "c"]
        assert [i.instance_id for i in await store.instance_list(now=at(35))] == ["B"]
        assert await store.instance_list(now=at(40)) == []

    async def test_a_lapsed_instance_comes_back_with_its_next_heartbeat(self, store: Store) -> None:
        """A heartbeat after expiry lists the instance again, keeping its started_at."""
        await store.instance_heartbeat(instance_info(), BEAT, now=T0)
        assert await store.instance_list(now=at(60)) == []
        await store.instance_heartbeat(instance_info(started_at=at(60)), BEAT, now=at(60))
        (back,) = await store.instance_list(now=at(60))
        assert (back.started_at, back.last_seen) == (T0, at(60))

    async def test_instances_default_to_the_store_clock(
        self, store: Store, clock: FakeClock
    ) -> None:
        """Without now=, heartbeat and list read the store's clock."""
        clock.advance(3)
        await store.instance_heartbeat(instance_info(), BEAT)
        (info,) = await store.instance_list()
        assert (info.last_seen, info.expires_at) == (at(3), at(3) + BEAT)
        clock.advance(BEAT)
        assert await store.instance_list() == []

    async def test_remove_forgets_an_instance(self, store: Store) -> None:
        """instance_remove drops it at once; removing an unknown id is harmless."""
        await store.instance_heartbeat(instance_info("a"), BEAT, now=T0)
        await store.instance_heartbeat(instance_info("b"), BEAT, now=T0)
        await store.instance_remove("a")
        await store.instance_remove("unknown")
        assert [i.instance_id for i in await store.instance_list(now=T0)] == ["b"]
        await store.instance_heartbeat(instance_info("a", started_at=at(1)), BEAT, now=at(1))
        listed = {i.instance_id: i.started_at for i in await store.instance_list(now=at(1))}
        assert listed == {"a": at(1), "b": T0}  # a new life: a new started_at

    async def test_metadata_round_trips_as_json(self, store: Store) -> None:
        """Metadata reads back as its JSON; a returned dict is a copy."""
        metadata: dict[str, Any] = {"t": (1, 2), "s": "héllo ✓", "nested": {"x": [None, 0.5]}}
        await store.instance_heartbeat(instance_info(metadata=metadata), BEAT, now=T0)
        (info,) = await store.instance_list(now=T0)
        assert info.metadata == {**metadata, "t": [1, 2]}
        info.metadata["s"] = "changed"
        (again,) = await store.instance_list(now=T0)
        assert again.metadata["s"] == "héllo ✓"

    async def test_bad_heartbeats_are_rejected(self, store: Store) -> None:
        """Non-JSON metadata, a naive started_at or a ttl that is not positive store nothing."""
        with pytest.raises(PayloadError):
            bad = instance_info(metadata={"x": object()})
            await store.instance_heartbeat(bad, BEAT, now=T0)
        with pytest.raises(ValueError, match="aware"):
            naive = instance_info(started_at=datetime(2026, 1, 1))
            await store.instance_heartbeat(naive, BEAT, now=T0)
        with pytest.raises(ValueError, match="ttl"):
            await store.instance_heartbeat(instance_info(), timedelta(0), now=T0)
        assert await store.instance_list(now=T0) == []
