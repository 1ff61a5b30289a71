"""soloist: a distributed, fault-tolerant job scheduler for Python.

Each planned instant of a recurring job runs once across all instances, a queued task runs
once, and a crashed instance's work is picked up by another. See the README.
"""

from __future__ import annotations

from soloist.context import JobContext
from soloist.errors import (
    ConfigError,
    DuplicateJobError,
    LeaseLostError,
    NotFoundError,
    PayloadError,
    ScheduleError,
    SoloistError,
    StoreError,
    StoreUnavailableError,
    UnknownJobError,
    UnknownOccurrenceError,
    UnknownTaskError,
)
from soloist.models import Occurrence, State
from soloist.scheduler import Scheduler
from soloist.schedules import Schedule, at, cron, every

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DuplicateJobError",
    "JobContext",
    "LeaseLostError",
    "NotFoundError",
    "Occurrence",
    "PayloadError",
    "Schedule",
    "ScheduleError",
    "Scheduler",
    "SoloistError",
    "State",
    "StoreError",
    "StoreUnavailableError",
    "UnknownJobError",
    "UnknownOccurrenceError",
    "UnknownTaskError",
    "__version__",
    "at",
    "cron",
    "every",
]
