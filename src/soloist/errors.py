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


class UnknownTaskError(SoloistError, LookupError):
    """A task or job name is not registered."""


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


class LeaseLostError(SoloistError):
    """This runner no longer holds the lease of its occurrence; its result is fenced out."""
