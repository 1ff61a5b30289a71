"""Plain values shared by the runtime and the stores: occurrences, states, policies."""

from __future__ import annotations

import enum
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

JSONDict = dict[str, Any]


class State(str, enum.Enum):
    """Life cycle of an occurrence.

    ``scheduled -> running -> succeeded | failed (retry pending) | dead``; ``skipped`` records
    an occurrence that the overlap policy ``skip`` did not start.
    """

    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    SKIPPED = "skipped"

    @property
    def is_terminal(self) -> bool:
        return self in (State.SUCCEEDED, State.DEAD, State.SKIPPED)


#: States an executor may claim (``failed`` means a retry is pending).
CLAIMABLE_STATES = (State.SCHEDULED, State.FAILED)


class ErrorCode(str, enum.Enum):
    """Why an attempt did not succeed (SPEC 4.7)."""

    HANDLER_ERROR = "handler_error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    LEASE_LOST = "lease_lost"
    HANDLER_PANIC = "handler_panic"
    LEASE_EXPIRED = "lease_expired"
    #: The occurrence's lease expired more than ``max_crashes`` times: its runner keeps
    #: dying (a handler that kills its process, OOM), so it is not run again.
    CRASH_LOOP = "crash_loop"
    OVERLAP = "overlap"


#: How many lease expiries (runner killed, frozen, cut off from the store) an occurrence
#: survives by default: each one runs it again without spending a retry; one more makes it
#: ``dead`` with ``crash_loop``. A crash is not a failure of the handler (SPEC 4.3).
DEFAULT_MAX_CRASHES = 3


class Overlap(str, enum.Enum):
    """What happens when an occurrence is due while the previous one of its job+scope runs."""

    SKIP = "skip"
    ALLOW = "allow"
    QUEUE = "queue"


class CatchUp(str, enum.Enum):
    """Which missed occurrences run after downtime."""

    SKIP = "skip"
    LATEST = "latest"
    ALL = "all"


class Kind(str, enum.Enum):
    """Where an occurrence came from."""

    SCHEDULE = "schedule"
    TASK = "task"
    TRIGGER = "trigger"


@dataclass(frozen=True)
class NewOccurrence:
    """An occurrence to insert. ``dedupe_key`` is unique in the store: inserting a second
    occurrence with the same key is a no-op (this is what makes planning idempotent)."""

    dedupe_key: str
    job: str
    task: str
    scope: str
    plan_time: datetime
    due_at: datetime
    kind: Kind
    max_attempts: int = 1
    overlap: Overlap = Overlap.ALLOW
    payload: JSONDict = field(default_factory=dict)
    max_crashes: int = DEFAULT_MAX_CRASHES


@dataclass(frozen=True)
class Occurrence:
    """One planned run of a job, as stored."""

    id: str
    dedupe_key: str
    job: str
    task: str
    scope: str
    plan_time: datetime
    due_at: datetime
    kind: Kind
    state: State
    attempt: int
    max_attempts: int
    overlap: Overlap
    payload: JSONDict
    instance_id: str | None
    lease_expires_at: datetime | None
    fencing_token: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error_code: str | None
    error_message: str | None
    result: Any = None
    #: Lease expiries so far (runs that never reported an outcome); they spend no attempt.
    crashes: int = 0
    max_crashes: int = DEFAULT_MAX_CRASHES
    #: Someone asked to cancel it (:meth:`~soloist.stores.base.Store.occurrence_cancel`):
    #: a running occurrence's runner is told at its next lease renewal, and it never
    #: becomes claimable again.
    cancel_requested: bool = False

    @property
    def duration(self) -> timedelta | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    def to_json(self) -> JSONDict:
        """The audit record of this occurrence as JSON-ready values (``soloist history``)."""

        def iso(value: datetime | None) -> str | None:
            return value.isoformat() if value is not None else None

        duration = self.duration
        return {
            "id": self.id,
            "job": self.job,
            "task": self.task,
            "scope": self.scope,
            "kind": self.kind.value,
            "plan_time": iso(self.plan_time),
            "due_at": iso(self.due_at),
            "state": self.state.value,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "crashes": self.crashes,
            "max_crashes": self.max_crashes,
            "instance_id": self.instance_id,
            "fencing_token": self.fencing_token,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "duration_s": duration.total_seconds() if duration is not None else None,
            "error_code": self.error_code,
            "error_message": self.error_message,
            "result": self.result,
            "cancel_requested": self.cancel_requested,
        }


@dataclass(frozen=True)
class Attempt:
    """The audit record of one attempt (one claim) of an occurrence, written in the same
    atomic step as the write that ended it: ``outcome`` is ``succeeded``, ``failed`` (a
    retry follows), ``dead``, ``released`` (handed back on shutdown; not counted) or
    ``crashed`` (the lease expired and the occurrence runs again; not counted)."""

    occurrence_id: str
    attempt: int
    fencing_token: int
    instance_id: str | None
    started_at: datetime | None
    finished_at: datetime
    outcome: str
    error_code: str | None
    error_message: str | None

    def to_json(self) -> JSONDict:
        return {
            "attempt": self.attempt,
            "fencing_token": self.fencing_token,
            "instance_id": self.instance_id,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat(),
            "outcome": self.outcome,
            "error_code": self.error_code,
            "error_message": self.error_message,
        }


#: The error message of an occurrence cancelled before its next attempt started.
CANCELLED_MESSAGE = "cancelled on request before it ran"


class Renewed(set[str]):
    """What :meth:`~soloist.stores.base.Store.lease_renew` returns: the ids renewed (it
    is a set of them), and ``cancel_requested``, those of them whose cancellation was
    requested (the runner stops them and records them cancelled). The renewal reports
    the flag, so a runner learns of a cancel with no call of its own."""

    def __init__(self, renewed: Iterable[str] = (), cancel_requested: Iterable[str] = ()) -> None:
        super().__init__(renewed)
        self.cancel_requested: frozenset[str] = frozenset(cancel_requested) & self


class Cancelled(str, enum.Enum):
    """What a cancel did (:class:`CancelResult`)."""

    #: It was scheduled (or waiting for a retry): now ``dead`` (``cancelled``); it never runs.
    CANCELLED = "cancelled"
    #: It is running: its runner is asked to stop it (see docs/explanation/guarantees.md).
    REQUESTED = "requested"
    #: It was running and its cancellation had already been requested.
    ALREADY_REQUESTED = "already_requested"


@dataclass(frozen=True)
class CancelResult:
    """The answer of ``app.cancel(occurrence_id)``: what happened, and the occurrence as it
    is after the call."""

    outcome: Cancelled
    occurrence: Occurrence

    def to_json(self) -> JSONDict:
        return {"outcome": self.outcome.value, "occurrence": self.occurrence.to_json()}


#: Outcome of an attempt handed back by ``lease_release``.
RELEASED = "released"
#: Outcome of an attempt whose lease expired and that runs again (``occurrence_reap``).
CRASHED = "crashed"


@dataclass(frozen=True)
class Claimed:
    """A lease handle: the occurrence id and the fencing token this runner holds it with."""

    id: str
    fencing_token: int


@dataclass(frozen=True)
class Outcome:
    """The terminal (or retry) write of one attempt, fenced by ``fencing_token``.

    ``state`` is ``succeeded``, ``failed`` (then ``retry_at`` is when the retry is due) or
    ``dead``.
    """

    id: str
    fencing_token: int
    state: State
    error_code: str | None = None
    error_message: str | None = None
    result: Any = None
    retry_at: datetime | None = None


#: Streams hash into this many slots (:func:`stream_slot`); the P partitions of
#: partitioned planning are ranges of slots, so a stored slot never changes with P.
SLOTS = 4096


def stream_slot(job: str, scope: str) -> int:
    """The slot of the (job, scope) stream: CRC-32 of ``job``, a newline and ``scope``
    (UTF-8), modulo :data:`SLOTS`. Stable across processes, versions and stores."""
    return zlib.crc32(f"{job}\n{scope}".encode()) % SLOTS


def partition_slots(partition: int, count: int) -> tuple[int, int]:
    """The slots ``[lo, hi)`` of ``partition`` out of ``count`` partitions."""
    return partition * SLOTS // count, (partition + 1) * SLOTS // count


def slot_partition(slot: int, count: int) -> int:
    """The partition, out of ``count``, that holds ``slot`` (the inverse of
    :func:`partition_slots`)."""
    return ((slot + 1) * count - 1) // SLOTS


@dataclass(frozen=True)
class PlanCursor:
    """How far a (job, scope) stream has been planned: the last plan time materialised and
    how many occurrences were planned in all (for ``max_runs``), and the stream's entry in
    the planning index: ``next_plan_time``, the next instant it has to plan (None: nothing
    to plan until the stream is revived), and its ``slot`` (:func:`stream_slot`)."""

    job: str
    scope: str
    last_plan_time: datetime | None
    planned_count: int
    next_plan_time: datetime | None = None

    @property
    def slot(self) -> int:
        return stream_slot(self.job, self.scope)


@dataclass(frozen=True)
class PlanFence:
    """The partition lease a plan is written under: the write applies only while
    ``partition``'s lease still has ``epoch`` and has not expired on the store's clock."""

    partition: int
    epoch: int


@dataclass(frozen=True)
class PlanAdvance:
    """One step of a (job, scope) stream's planning, applied atomically by
    :meth:`~soloist.stores.base.Store.plan_advance_many`: if the cursor's last plan time is
    still ``expected_last`` (None: the stream was never planned), move it to ``new_last``
    (None only when ``expected_last`` is None: the stream stays unplanned), add
    ``added_count`` to its planned count, set its index entry to ``next_plan_time``, and
    insert ``items``; with a ``fence``, only while that partition lease holds."""

    job: str
    scope: str
    expected_last: datetime | None
    new_last: datetime | None
    added_count: int
    items: Sequence[NewOccurrence] = ()
    next_plan_time: datetime | None = None
    fence: PlanFence | None = None


@dataclass(frozen=True)
class DueStream:
    """A stream the planning index says is due, with its job's record (None when the job
    has no record: a code-defined job not registered yet, or one deleted)."""

    cursor: PlanCursor
    job: JobRecord | None


@dataclass(frozen=True)
class DueBatch:
    """What :meth:`~soloist.stores.base.Store.plan_due` found: the due streams, and
    ``next_at``, the earliest ``next_plan_time`` after the asked bound among the streams
    asked about (None: none), for the planner's next wake-up."""

    streams: list[DueStream]
    next_at: datetime | None


@dataclass(frozen=True)
class PartitionLease:
    """Who holds planning partition ``partition``: the holder, its epoch (the fence of the
    plans written under it: it rises at each change of holder and never repeats), and until
    when the lease holds on the store's clock."""

    partition: int
    holder: str
    epoch: int
    expires_at: datetime


@dataclass(frozen=True)
class JobRecord:
    """A job as the store knows it: its schedule (as JSON), pause flag and origin.

    Jobs defined in code are upserted on start (``dynamic`` false); dynamic schedules added
    with ``app.schedules.add`` carry their task, payload and metadata (``dynamic`` true).
    """

    name: str
    task: str
    schedule: JSONDict
    dynamic: bool = False
    paused: bool = False
    payload: JSONDict = field(default_factory=dict)
    metadata: JSONDict = field(default_factory=dict)
    created_at: datetime | None = None


@dataclass(frozen=True)
class OccurrenceCounts:
    """What the store holds, counted (for metrics and the dashboard): occurrences by
    (job, state), history included within the store's retention, and ``due``: claimable
    occurrences (``scheduled`` or ``failed``) whose due_at has passed, the queue depth.

    ``others``: None when ``by_job_state`` counts every job; when the counts were asked
    for some jobs only (``occurrence_counts(jobs=...)``), ``by_job_state`` holds those
    jobs' pairs and ``others`` the occurrences of every other job by state (states with
    none are absent), so that the answer stays small whatever the number of jobs."""

    by_job_state: dict[tuple[str, State], int]
    due: int
    others: dict[State, int] | None = None


@dataclass(frozen=True)
class LeaderLease:
    """Who leads election ``name``: the holder, its epoch (the fencing token of leadership:
    it increases by one every time the leadership changes hands, and never goes back), and
    until when the lease holds on the store's clock."""

    name: str
    leader_id: str
    epoch: int
    elected_at: datetime
    expires_at: datetime


@dataclass(frozen=True)
class InstanceInfo:
    """A live instance, as it announces itself in the store with each heartbeat."""

    instance_id: str
    mode: str
    hostname: str
    pid: int
    started_at: datetime
    last_seen: datetime
    expires_at: datetime
    metadata: JSONDict = field(default_factory=dict)

    def to_json(self) -> JSONDict:
        return {
            "instance_id": self.instance_id,
            "mode": self.mode,
            "hostname": self.hostname,
            "pid": self.pid,
            "started_at": self.started_at.isoformat(),
            "last_seen": self.last_seen.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "metadata": self.metadata,
        }
