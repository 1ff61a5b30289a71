"""What a handler receives as its first argument."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from soloist.errors import LeaseLostError
from soloist.models import JSONDict, Occurrence


class _FieldsAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Adds the occurrence's fields to each record and keeps the call's own ``extra``
    (the stdlib adapter replaces it, before Python 3.13)."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


@dataclass
class JobContext:
    """One attempt of one occurrence, as its handler sees it.

    ``fencing_token`` increases each time the occurrence is claimed: pass it to systems you
    write to, and have them reject a token lower than the last one they saw, so that a
    runner that lost its lease (a long GC pause, a frozen VM) cannot overwrite newer work.
    """

    occurrence_id: str
    job: str
    task: str
    scope: str
    plan_time: datetime
    attempt: int
    fencing_token: int
    instance_id: str
    payload: JSONDict
    logger: logging.LoggerAdapter[logging.Logger]
    _renew: Callable[[], Coroutine[Any, Any, bool]] = field(repr=False)
    _loop: asyncio.AbstractEventLoop = field(repr=False)
    lease_lost: bool = False

    @classmethod
    def for_occurrence(
        cls,
        occ: Occurrence,
        instance_id: str,
        logger: logging.Logger,
        renew: Callable[[], Coroutine[Any, Any, bool]],
        loop: asyncio.AbstractEventLoop,
    ) -> JobContext:
        extra = {
            "job": occ.job,
            "scope": occ.scope,
            "plan_time": occ.plan_time.isoformat(),
            "attempt": occ.attempt,
            "execution_id": occ.id,
            "instance_id": instance_id,
        }
        return cls(
            occurrence_id=occ.id,
            job=occ.job,
            task=occ.task,
            scope=occ.scope,
            plan_time=occ.plan_time,
            attempt=occ.attempt,
            fencing_token=occ.fencing_token,
            instance_id=instance_id,
            payload=occ.payload,
            logger=_FieldsAdapter(logger, extra),
            _renew=renew,
            _loop=loop,
        )

    def heartbeat(self) -> None:
        """Renew the lease now, from a sync handler (leases are also renewed in the
        background). Raises LeaseLostError if another runner has taken the occurrence."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError("in an async handler, use 'await ctx.aheartbeat()'")
        future = asyncio.run_coroutine_threadsafe(self._renew(), self._loop)
        if not future.result():
            self.lease_lost = True
        self._check()

    async def aheartbeat(self) -> None:
        """Renew the lease now, from an async handler; raises LeaseLostError if lost."""
        if not await self._renew():
            self.lease_lost = True
        self._check()

    def _check(self) -> None:
        if self.lease_lost:
            raise LeaseLostError(
                f"lease of occurrence {self.occurrence_id} ({self.job} at "
                f"{self.plan_time.isoformat()}) was lost; its result will be fenced out"
            )
