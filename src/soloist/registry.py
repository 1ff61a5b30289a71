"""Definitions made in code: tasks (handlers) and jobs (a task plus a schedule and policies).

Everything here is validated when it is defined, so a mistake fails at import time with the
bad value in the message, not at 2 a.m. when the job is due.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from soloist.durations import parse_duration
from soloist.errors import ConfigError, DuplicateJobError, UnknownTaskError
from soloist.models import DEFAULT_MAX_CRASHES, CatchUp, JobRecord, JSONDict, Overlap
from soloist.retry import RetryPolicy
from soloist.schedules import Schedule, schedule_from_dict

Handler = Callable[..., Any]
ScopeProvider = Callable[[datetime], Iterable[str] | Awaitable[Iterable[str]]]


@dataclass(frozen=True)
class TaskDef:
    """A named handler with its retry, timeout and crash policy."""

    name: str
    fn: Handler
    retry: RetryPolicy
    timeout: timedelta | None
    #: Lease expiries (crashes) an occurrence survives; they spend no retry.
    max_crashes: int = DEFAULT_MAX_CRASHES

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    @functools.cached_property
    def signature(self) -> inspect.Signature | None:
        """The handler's signature (None if Python cannot tell), computed once: enqueue
        checks each payload against it."""
        try:
            return inspect.signature(self.fn)
        except (TypeError, ValueError):
            return None


@dataclass(frozen=True)
class JobPolicy:
    """How a recurring job behaves around downtime and overlapping runs."""

    catch_up: CatchUp = CatchUp.LATEST
    catch_up_window: timedelta | None = None
    overlap: Overlap = Overlap.SKIP
    #: How late an instant may be planned and still be on time, for this job (None: the
    #: scheduler's ``misfire_grace``); older ones are missed and the catch-up policy
    #: decides.
    misfire_grace: timedelta | None = None

    @classmethod
    def build(
        cls,
        catch_up: object,
        catch_up_window: object,
        overlap: object = None,
        misfire_grace: object = None,
    ) -> JobPolicy:
        """Check the policies. ``overlap=None`` is the default: ``skip``, except with
        ``catch_up="all"``, whose kept instants must all run: ``queue``. The contradiction
        ``catch_up="all"`` with ``overlap="skip"`` is refused. ``misfire_grace=None``: the
        scheduler's."""
        kept = _enum(CatchUp, catch_up, "catch_up")
        if overlap is None:
            chosen = Overlap.QUEUE if kept is CatchUp.ALL else Overlap.SKIP
        else:
            chosen = _enum(Overlap, overlap, "overlap")
        if kept is CatchUp.ALL and chosen is Overlap.SKIP:
            raise ConfigError(
                "invalid overlap 'skip' with catch_up='all': the missed instants it keeps "
                "would skip one another; use overlap='queue' (the default with "
                "catch_up='all': they run one after the other, in order) or 'allow'"
            )
        return cls(
            catch_up=kept,
            catch_up_window=(
                None
                if catch_up_window is None
                else parse_duration(catch_up_window, what="catch_up_window")
            ),
            overlap=chosen,
            misfire_grace=(
                None
                if misfire_grace is None
                else parse_duration(misfire_grace, what="misfire_grace", allow_zero=True)
            ),
        )

    def to_dict(self) -> JSONDict:
        window = self.catch_up_window
        stored: JSONDict = {
            "catch_up": self.catch_up.value,
            "catch_up_window_s": window.total_seconds() if window is not None else None,
            "overlap": self.overlap.value,
        }
        if self.misfire_grace is not None:  # absent: the scheduler's (records stay as before)
            stored["misfire_grace_s"] = self.misfire_grace.total_seconds()
        return stored

    @classmethod
    def from_dict(cls, data: JSONDict) -> JobPolicy:
        catch_up = data.get("catch_up", CatchUp.LATEST.value)
        overlap = data.get("overlap")
        if catch_up == CatchUp.ALL.value and overlap == Overlap.SKIP.value:
            overlap = None  # stored before the combination was refused: run them all
        return cls.build(
            catch_up, data.get("catch_up_window_s"), overlap, data.get("misfire_grace_s")
        )


@dataclass(frozen=True)
class JobDef:
    """A recurring job: which task runs, on which schedule, with which policies.

    Jobs defined in code carry ``scopes`` (a provider of scope keys) and run their own
    handler; dynamic schedules name a registered task and carry a stored payload.
    """

    name: str
    task: str
    schedule: Schedule
    policy: JobPolicy
    payload: JSONDict
    scopes: ScopeProvider | None = None
    dynamic: bool = False

    def stored_schedule(
        self, max_attempts: int, max_crashes: int = DEFAULT_MAX_CRASHES
    ) -> JSONDict:
        """The JSON stored in the job record: the schedule, the policies, and the attempts
        and crashes its task allows (so that a process without the code, such as the CLI,
        can trigger it)."""
        return {
            "schedule": self.schedule.to_dict(),
            "max_attempts": max_attempts,
            "max_crashes": max_crashes,
            **self.policy.to_dict(),
        }

    @classmethod
    def from_stored(cls, name: str, task: str, stored: JSONDict, payload: JSONDict) -> JobDef:
        """Rebuild a dynamic schedule from its job record."""
        return cls(
            name=name,
            task=task,
            schedule=schedule_from_dict(stored["schedule"]),
            policy=JobPolicy.from_dict(stored),
            payload=payload,
            dynamic=True,
        )


class Registry:
    """Tasks and jobs known to this process, by name."""

    def __init__(self) -> None:
        self.tasks: dict[str, TaskDef] = {}
        self.jobs: dict[str, JobDef] = {}

    def add_task(self, task: TaskDef) -> None:
        if task.name in self.tasks:
            raise DuplicateJobError(f"a task or job named {task.name!r} is already registered")
        self.tasks[task.name] = task

    def add_job(self, job: JobDef, task: TaskDef) -> None:
        if job.name in self.jobs or task.name in self.tasks:
            raise DuplicateJobError(f"a task or job named {job.name!r} is already registered")
        self.tasks[task.name] = task
        self.jobs[job.name] = job

    def job_records(self) -> list[JobRecord]:
        """The store records of the jobs defined in code."""
        return [
            JobRecord(
                name=job.name,
                task=job.task,
                schedule=job.stored_schedule(
                    self.tasks[job.task].retry.max_attempts, self.tasks[job.task].max_crashes
                ),
                payload=job.payload,
            )
            for job in self.jobs.values()
        ]

    def queue_tasks(self) -> list[str]:
        """Tasks that are not the handler of a recurring job (what ``enqueue`` queues)."""
        return [name for name in self.tasks if name not in self.jobs]

    def task(self, name: str) -> TaskDef:
        """The task ``name`` (an instance-local name resolves to its task)."""
        name = name.partition(LOCAL_SEPARATOR)[0]
        try:
            return self.tasks[name]
        except KeyError:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UnknownTaskError(
                f"unknown task {name!r}: expected one of the registered tasks ({known})"
            ) from None


#: Separates a name from the instance that owns it in ``local`` mode. A control character,
#: so it can never appear in a user's name (:func:`check_name` refuses them).
LOCAL_SEPARATOR = "\x1f"


def local_name(name: str, instance_id: str) -> str:
    """``name`` owned by ``instance_id``: in ``local`` mode each instance plans and claims
    its own occurrences of every job under such names."""
    return f"{name}{LOCAL_SEPARATOR}{instance_id}"


def check_name(name: object, what: str = "job name") -> str:
    """Names are non-empty strings without control characters (they appear in keys), and
    valid Unicode text (no lone surrogate: what invalid UTF-8 bytes on a command line
    become in Python, which no store can encode)."""
    if (
        not isinstance(name, str)
        or not name.strip()
        or any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF for c in name)
    ):
        raise ConfigError(
            f"invalid {what} {name!r}: expected a non-empty printable string (UTF-8 text)"
        )
    return name


def build_task(
    fn: Handler,
    name: str | None,
    retries: object,
    backoff: object,
    backoff_base: object,
    backoff_cap: object,
    timeout: object,
    max_crashes: object = DEFAULT_MAX_CRASHES,
    retry_on: object = None,
    no_retry_on: object = None,
) -> TaskDef:
    if not callable(fn):
        raise ConfigError(f"invalid handler {fn!r}: expected a function")
    task_name = check_name(name if name is not None else getattr(fn, "__name__", None), "name")
    if isinstance(max_crashes, bool) or not isinstance(max_crashes, int) or max_crashes < 0:
        raise ConfigError(f"invalid max_crashes {max_crashes!r}: expected an integer >= 0")
    return TaskDef(
        name=task_name,
        fn=fn,
        retry=RetryPolicy.build(
            retries,
            backoff,
            backoff_base,
            backoff_cap,
            retry_on=retry_on,
            no_retry_on=no_retry_on,
        ),
        timeout=None if timeout is None else parse_duration(timeout, what="timeout"),
        max_crashes=max_crashes,
    )


def _enum(kind: Any, value: object, what: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise ConfigError(f"invalid {what} {value!r}: expected one of {allowed}") from None
