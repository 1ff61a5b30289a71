"""Occurrences and jobs as values: the row transitions every store in Python makes (the memory
store and the etcd store), and copies handed out."""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

from soloist.models import (
    CANCELLED_MESSAGE,
    CLAIMABLE_STATES,
    CRASHED,
    ErrorCode,
    JobRecord,
    NewOccurrence,
    Occurrence,
    Outcome,
    State,
)
from soloist.payload import validate_payload
from soloist.stores._values import result_json


def running(occ: Occurrence) -> bool:
    return occ.state == State.RUNNING


def out(occ: Occurrence) -> Occurrence:
    """A copy safe to hand out: the caller may mutate its payload and result."""
    return replace(occ, payload=copy.deepcopy(occ.payload), result=copy.deepcopy(occ.result))


def new_occurrence(item: NewOccurrence, now: datetime) -> Occurrence:
    """The stored form of ``item``: validated, scheduled, a new id, created at ``now``."""
    return Occurrence(
        id=uuid.uuid4().hex,
        dedupe_key=item.dedupe_key,
        job=item.job,
        task=item.task,
        scope=item.scope,
        plan_time=item.plan_time,
        due_at=item.due_at,
        kind=item.kind,
        state=State.SCHEDULED,
        attempt=0,
        max_attempts=item.max_attempts,
        overlap=item.overlap,
        payload=validate_payload(item.payload, what=f"payload of {item.dedupe_key!r}"),
        max_crashes=item.max_crashes,
        instance_id=None,
        lease_expires_at=None,
        fencing_token=0,
        created_at=now,
        started_at=None,
        finished_at=None,
        error_code=None,
        error_message=None,
    )


def reaped(occ: Occurrence, now: datetime) -> tuple[Occurrence, str]:
    """``occ`` (running, its lease expired at ``now``) after the reaper, and the outcome
    of its attempt record: a crash spends no attempt and runs it again (``crashed``) while
    its crash budget lasts, else it is ``dead`` with ``crash_loop`` (see Store.occurrence_reap).
    """
    crash = occ.crashes + 1
    runner = occ.instance_id or "?"
    if occ.cancel_requested:
        gone = replace(
            occ,
            state=State.DEAD,
            crashes=crash,
            lease_expires_at=None,
            finished_at=now,
            error_code=ErrorCode.CANCELLED.value,
            error_message=f"lease of {runner} expired after its cancellation was requested",
        )
        return gone, State.DEAD.value
    if occ.crashes < occ.max_crashes:
        again = replace(
            occ,
            state=State.SCHEDULED if occ.attempt <= 1 else State.FAILED,
            attempt=max(0, occ.attempt - 1),
            crashes=crash,
            lease_expires_at=None,
            finished_at=None,
            error_code=ErrorCode.LEASE_EXPIRED.value,
            error_message=f"lease of {runner} expired (crash {crash} of {occ.max_crashes} allowed)",
        )
        return again, CRASHED
    dead = replace(
        occ,
        state=State.DEAD,
        crashes=crash,
        lease_expires_at=None,
        finished_at=now,
        error_code=ErrorCode.CRASH_LOOP.value,
        error_message=f"lease of {runner} expired (crash {crash}, max_crashes="
        f"{occ.max_crashes}): its runner keeps dying",
    )
    return dead, State.DEAD.value


#: The error message of a running occurrence whose cancellation was requested and whose
#: runner gave its lease back (a shutdown) before the attempt finished.
RELEASED_CANCELLED = "cancelled on request; its runner stopped before the attempt finished"


def cancelled(occ: Occurrence, now: datetime) -> Occurrence | None:
    """``occ`` after :meth:`~soloist.stores.base.Store.occurrence_cancel` at ``now``, or
    None when the cancel changes nothing (finished, or already requested)."""
    if occ.state in CLAIMABLE_STATES:
        return replace(
            occ,
            state=State.DEAD,
            lease_expires_at=None,
            finished_at=now,
            error_code=ErrorCode.CANCELLED.value,
            error_message=CANCELLED_MESSAGE,
            cancel_requested=True,
        )
    if occ.state == State.RUNNING and not occ.cancel_requested:
        return replace(occ, cancel_requested=True)
    return None


def released(occ: Occurrence) -> Occurrence:
    """``occ`` (running, this runner's) handed back by ``lease_release``: claimable again
    with its attempt given back, or ``dead`` (``cancelled``) if its cancellation was
    requested (finished_at is then the caller's to set)."""
    if occ.cancel_requested:
        return replace(
            occ,
            state=State.DEAD,
            lease_expires_at=None,
            error_code=ErrorCode.CANCELLED.value,
            error_message=RELEASED_CANCELLED,
        )
    return replace(
        occ,
        state=State.SCHEDULED if occ.attempt <= 1 else State.FAILED,
        attempt=max(0, occ.attempt - 1),
        lease_expires_at=None,
        error_code=ErrorCode.CANCELLED.value,
        error_message=RELEASED_MESSAGE,
    )


#: The error message of an attempt handed back by ``lease_release``.
RELEASED_MESSAGE = "lease released before the attempt finished"


def completed_as(occ: Occurrence, outcome: Outcome) -> tuple[State, str | None]:
    """The state and error code ``outcome`` writes on ``occ``: a retry of an occurrence
    whose cancellation was requested is not made (``dead``, ``cancelled``)."""
    if occ.cancel_requested and outcome.state == State.FAILED:
        return State.DEAD, ErrorCode.CANCELLED.value
    return outcome.state, outcome.error_code


def skipped(occ: Occurrence, now: datetime) -> Occurrence:
    return replace(
        occ,
        state=State.SKIPPED,
        finished_at=now,
        error_code=ErrorCode.OVERLAP.value,
        error_message="skipped: a previous occurrence of this job and scope was running",
    )


def result(value: Any) -> Any:
    """``value`` JSON round-tripped, or PayloadError: results are stored as JSON."""
    text = result_json(value)
    return None if text is None else json.loads(text)


def retry_at(outcome: Outcome, now: datetime) -> datetime:
    return outcome.retry_at if outcome.retry_at is not None else now


def job(record: JobRecord, now: datetime) -> JobRecord:
    return replace(
        record,
        schedule=validate_payload(record.schedule, what=f"schedule of job {record.name!r}"),
        payload=validate_payload(record.payload, what=f"payload of job {record.name!r}"),
        metadata=validate_payload(record.metadata, what=f"metadata of job {record.name!r}"),
        created_at=record.created_at or now,
    )
