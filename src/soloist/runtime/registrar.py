"""The registrar announces this instance in the store (``soloist status`` lists live
instances) and, in ``local`` mode, warns when it sees other live instances: each of them
runs every job too."""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime, timedelta

from soloist.models import InstanceInfo
from soloist.runtime.service import Service, ServiceBundle
from soloist.stores.base import Store


class Registrar(Service):
    name = "registrar"

    def __init__(
        self,
        bundle: ServiceBundle,
        store: Store,
        *,
        mode: str,
        interval: timedelta,
        ttl: timedelta,
        metadata: dict[str, object],
    ) -> None:
        super().__init__(bundle)
        self.store = store
        self.mode = mode
        self.interval = interval.total_seconds()
        self.ttl = ttl
        self.metadata = metadata
        self.started_at: datetime | None = None
        self.others: set[str] = set()

    async def tick(self) -> float:
        now = await self.store.now()
        self.started_at = self.started_at or now
        await self.store.instance_heartbeat(
            InstanceInfo(
                instance_id=self.instance_id,
                mode=self.mode,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                started_at=self.started_at,
                last_seen=now,
                expires_at=now + self.ttl,
                metadata=dict(self.metadata),
            ),
            self.ttl,
        )
        if self.mode == "local":
            await self._warn_about_others()
        return self.interval

    async def _warn_about_others(self) -> None:
        others = {i.instance_id for i in await self.store.instance_list()} - {self.instance_id}
        if others and others != self.others:
            self.log(
                logging.WARNING,
                "mode 'local' runs every job in every instance, and %d other instance(s) "
                "use this store (%s): each job runs once per instance; use mode "
                "'distributed' or 'leader' to run it once",
                len(others),
                ", ".join(sorted(others)),
                action="local_mode_shared",
            )
        self.others = others

    async def announce(self) -> None:
        """Heartbeat now, with the current metadata; a failure is only logged (the loop
        sends it again)."""
        try:
            await self.tick()
        except Exception as exc:
            self.log(logging.WARNING, "could not announce: %s", exc, action="announce")

    async def deregister(self) -> None:
        """Stop announcing and leave the list of live instances. Safe twice."""
        await self.stop()
        try:
            await self.store.instance_remove(self.instance_id)
        except Exception as exc:
            self.log(logging.WARNING, "could not deregister: %s", exc, action="deregister")
