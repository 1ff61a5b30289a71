"""Every error soloist raises on purpose.

User mistakes raise at definition time with the offending value in the message; store
drivers' exceptions are translated at the store boundary into :class:`StoreError`.
"""

from __future__ import annotations


class SoloistError(Exception):
    """Base class of all soloist errors."""


class ConfigError(SoloistError, ValueError):
    """A value given to soloist is not valid (cron expression, duration, zone, option...)."""


class ScheduleError(ConfigError):
    """A schedule definition is not valid."""


class NotFoundError(SoloistError, LookupError):
    """What a call names does not exist: a task, a job or an occurrence (HTTP 404). Catch
    this to handle any of the three."""


class UnknownTaskError(NotFoundError):
    """A task name is not registered (or names a scheduled job's handler, which
    ``enqueue`` cannot queue)."""


class UnknownJobError(NotFoundError):
    """A job name is neither defined in code nor stored as a dynamic schedule."""


class UnknownOccurrenceError(NotFoundError):
    """An occurrence id is not in the store."""


class DuplicateJobError(ConfigError):
    """A job, task or dynamic schedule name is already taken."""


class PayloadError(ConfigError):
    """A payload is not a JSON object of JSON-serialisable values."""


class StateConflictError(SoloistError):
    """An operation does not apply to the current state of its target (e.g. retrying an
    occurrence that is not ``dead``)."""


class StoreError(SoloistError):
    """The store failed or could not be reached."""


class StoreUnavailableError(StoreError):
    """The store cannot be opened or reached (bad path, server down, ...)."""


class StoreDataLostError(StoreError):
    """The store no longer holds what this process saw in it: its identity (written when
    the store was set up) is missing or different, as after a Redis server restarted
    without persistence or a flush. Jobs, schedules, plan cursors and history written
    before are gone. ``expected``: the identity this process knew; ``found``: the one in
    the store now (None: missing). The runtime logs it, counts it and sets the store up
    again (see docs/explanation/redis.md)."""

    def __init__(self, message: str, *, expected: str, found: str | None) -> None:
        super().__init__(message)
        self.expected = expected
        self.found = found


class LeaseLostError(SoloistError):
    """This runner no longer holds the lease of its occurrence; its result is fenced out."""


class OccurrenceCancelledError(SoloistError):
    """The cancellation of this run's occurrence was requested (``app.cancel``): raised by
    ``ctx.heartbeat()`` and ``ctx.aheartbeat()`` so that a handler stops at its next
    heartbeat. The run is recorded cancelled, and not retried, whatever the handler does
    next."""
