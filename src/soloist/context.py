"""What a handler receives as its first argument."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from soloist.errors import LeaseLostError, OccurrenceCancelledError
from soloist.logs import log_event
from soloist.models import JSONDict, Occurrence
from soloist.tracing import TRACE_KEY


class _FieldsAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Adds the occurrence's fields to each record and keeps the call's own ``extra``
    (the stdlib adapter replaces it, before Python 3.13)."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs["extra"] = {**(self.extra or {}), **(kwargs.get("extra") or {})}
        return msg, kwargs


@dataclass
class JobContext:
    """One attempt of one occurrence, as its handler sees it.

    ``fencing_token`` increases each time the occurrence is claimed: pass it to systems you
    write to, and have them reject a token lower than the last one they saw, so that a
    runner that lost its lease (a long GC pause, a frozen VM) cannot overwrite newer work.

    ``logger`` adds the occurrence's fields (job, scope, plan_time, attempt, execution_id,
    instance_id) to every record; it is built on first use, since most runs of a small
    task never log.
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
    _base_logger: logging.Logger = field(repr=False)
    _renew: Callable[[], Coroutine[Any, Any, bool]] = field(repr=False)
    _loop: asyncio.AbstractEventLoop = field(repr=False)
    lease_lost: bool = False
    _logger: logging.LoggerAdapter[logging.Logger] | None = field(default=None, repr=False)
    _extra: dict[str, Any] | None = field(default=None, repr=False)
    #: Set by the runtime when the occurrence's cancellation was requested (see
    #: :attr:`cancelled`).
    _cancelled: bool = field(default=False, repr=False)
    #: The W3C trace context (``traceparent``, ``tracestate``) the occurrence was enqueued
    #: under (see :mod:`soloist.tracing`), or None; never part of ``payload``.
    trace_context: dict[str, str] | None = field(default=None, repr=False)

    @classmethod
    def for_occurrence(
        cls,
        occ: Occurrence,
        instance_id: str,
        logger: logging.Logger,
        renew: Callable[[], Coroutine[Any, Any, bool]],
        loop: asyncio.AbstractEventLoop,
    ) -> JobContext:
        payload, trace = occ.payload, None
        if TRACE_KEY in payload:  # the enqueue's trace context: not the handler's argument
            payload = dict(payload)
            trace = payload.pop(TRACE_KEY)
        ctx = cls(
            occ.id,
            occ.job,
            occ.task,
            occ.scope,
            occ.plan_time,
            occ.attempt,
            occ.fencing_token,
            instance_id,
            payload,
            logger,
            renew,
            loop,
        )
        if isinstance(trace, dict):
            ctx.trace_context = {str(k): str(v) for k, v in trace.items()}
        return ctx

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger adding this occurrence's structured fields to each record."""
        if self._logger is None:
            self._logger = _FieldsAdapter(self._base_logger, self._fields())
        return self._logger

    def _fields(self) -> dict[str, Any]:
        """The occurrence's structured fields (built once)."""
        if self._extra is None:
            self._extra = {
                "job": self.job,
                "scope": self.scope,
                "plan_time": self.plan_time.isoformat(),
                "attempt": self.attempt,
                "execution_id": self.occurrence_id,
                "instance_id": self.instance_id,
            }
        return self._extra

    def _event(self, level: int, msg: str, args: tuple[Any, ...], extra: dict[str, Any]) -> None:
        """Log one of the runtime's per-run lines (claimed, succeeded) with the
        occurrence's fields, as ``logger.log`` would, minus the work that a line logged
        twice per run cannot afford: the adapter and the caller's frame lookup (the record
        names this module, line 0). The caller has checked that ``level`` is enabled."""
        log_event(self._base_logger, level, msg, args, {**self._fields(), **extra})

    @property
    def cancelled(self) -> bool:
        """Whether someone asked to cancel this occurrence (``app.cancel``, ``soloist
        cancel``, the dashboard). The runner learns it at its next lease renewal (within
        one heartbeat). An async handler is cancelled then; a sync handler cannot be
        interrupted, so it should look at this (or call :meth:`heartbeat`, which raises
        :class:`~soloist.errors.OccurrenceCancelledError`) and stop. Once true, the run is
        recorded cancelled and not retried, however the handler ends."""
        return self._cancelled

    def heartbeat(self) -> None:
        """Renew the lease now, from a sync handler (leases are also renewed in the
        background). Raises LeaseLostError if another runner has taken the occurrence,
        OccurrenceCancelledError if its cancellation was requested."""
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
        """Renew the lease now, from an async handler; raises LeaseLostError if lost,
        OccurrenceCancelledError if its cancellation was requested."""
        if not await self._renew():
            self.lease_lost = True
        self._check()

    def _check(self) -> None:
        if self.lease_lost:
            raise LeaseLostError(
                f"lease of occurrence {self.occurrence_id} ({self.job} at "
                f"{self.plan_time.isoformat()}) was lost; its result will be fenced out"
            )
        if self._cancelled:
            raise OccurrenceCancelledError(
                f"occurrence {self.occurrence_id} ({self.job} at "
                f"{self.plan_time.isoformat()}) was cancelled on request"
            )
