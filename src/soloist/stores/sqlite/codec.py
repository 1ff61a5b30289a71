"""Conversions between soloist's values and SQLite rows.

Datetimes are stored as INTEGER microseconds since the epoch (exact, sortable, no timezone
text to parse); JSON values as ``json.dumps`` text, never pickle.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from soloist.clock import from_epoch_us, to_epoch_us
from soloist.models import (
    Attempt,
    InstanceInfo,
    JobRecord,
    Kind,
    LeaderLease,
    NewOccurrence,
    Occurrence,
    Overlap,
    PartitionLease,
    PlanAdvance,
    PlanCursor,
    State,
    stream_slot,
)
from soloist.stores._values import object_json, payload_json


def opt_time(value: int | None) -> datetime | None:
    return from_epoch_us(value) if value is not None else None


def opt_us(value: datetime | None) -> int | None:
    return to_epoch_us(value) if value is not None else None


def dump_object(value: object, what: str) -> str:
    """A JSON object as text, or PayloadError naming what is wrong with it."""
    return object_json(value, what)


def insert_params(occurrence_id: str, item: NewOccurrence) -> tuple[object, ...]:
    """Parameters of :data:`INSERT_OCCURRENCE` for a new, scheduled row, but the last:
    created_at, which the transaction adds once it holds the write lock."""
    return (
        occurrence_id,
        item.dedupe_key,
        item.job,
        item.task,
        item.scope,
        to_epoch_us(item.plan_time),
        to_epoch_us(item.due_at),
        Kind(item.kind).value,
        State.SCHEDULED.value,
        item.max_attempts,
        Overlap(item.overlap).value,
        payload_json(item),
        int(item.max_crashes),
    )


INSERT_OCCURRENCE = """
INSERT INTO occurrences (id, dedupe_key, job, task, scope, plan_time, due_at, kind, state,
                         attempt, max_attempts, overlap, payload, max_crashes, fencing_token,
                         created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, 0, ?)
ON CONFLICT (dedupe_key) DO NOTHING
"""


def occurrence(row: sqlite3.Row) -> Occurrence:
    return Occurrence(
        id=row["id"],
        dedupe_key=row["dedupe_key"],
        job=row["job"],
        task=row["task"],
        scope=row["scope"],
        plan_time=from_epoch_us(row["plan_time"]),
        due_at=from_epoch_us(row["due_at"]),
        kind=Kind(row["kind"]),
        state=State(row["state"]),
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        overlap=Overlap(row["overlap"]),
        payload=json.loads(row["payload"]),
        instance_id=row["instance_id"],
        lease_expires_at=opt_time(row["lease_expires_at"]),
        fencing_token=row["fencing_token"],
        created_at=from_epoch_us(row["created_at"]),
        started_at=opt_time(row["started_at"]),
        finished_at=opt_time(row["finished_at"]),
        error_code=row["error_code"],
        error_message=row["error_message"],
        result=json.loads(row["result"]) if row["result"] is not None else None,
        crashes=row["crashes"],
        max_crashes=row["max_crashes"],
        cancel_requested=bool(row["cancel_requested"]),
    )


class PlanStep(NamedTuple):
    """A :class:`~soloist.models.PlanAdvance` as ``planning.plan_advance_many`` takes it:
    times in epoch microseconds, the stream's slot, the fence as (partition, epoch), and
    the items as :func:`insert_params`."""

    job: str
    scope: str
    expected_last: int | None
    new_last: int | None
    added_count: int
    next_plan_time: int | None
    slot: int
    fence: tuple[int, int] | None
    items: Sequence[tuple[object, ...]]


def plan_step(step: PlanAdvance, ids: Sequence[str]) -> PlanStep:
    """``step`` as a :class:`PlanStep`, its items given the occurrence ids ``ids``."""
    fence = step.fence
    return PlanStep(
        step.job,
        step.scope,
        opt_us(step.expected_last),
        opt_us(step.new_last),
        step.added_count,
        opt_us(step.next_plan_time),
        stream_slot(step.job, step.scope),
        (fence.partition, fence.epoch) if fence is not None else None,
        [insert_params(i, item) for i, item in zip(ids, step.items, strict=True)],
    )


def plan_cursor(row: sqlite3.Row) -> PlanCursor:
    return PlanCursor(
        job=row["job"],
        scope=row["scope"],
        last_plan_time=opt_time(row["last_plan_time"]),
        planned_count=row["planned_count"],
        next_plan_time=opt_time(row["next_plan_time"]),
    )


def attempt(row: sqlite3.Row) -> Attempt:
    return Attempt(
        occurrence_id=row["occurrence_id"],
        attempt=row["attempt"],
        fencing_token=row["fencing_token"],
        instance_id=row["instance_id"],
        started_at=opt_time(row["started_at"]),
        finished_at=from_epoch_us(row["finished_at"]),
        outcome=row["outcome"],
        error_code=row["error_code"],
        error_message=row["error_message"],
    )


def job_params(record: JobRecord) -> tuple[object, ...]:
    """Parameters of ``ops.job_upsert``/``job_add`` but the last, the transaction's now
    (created_at when the record has none: the ``COALESCE`` of the statement)."""
    what = f"of job {record.name!r}"
    return (
        record.name,
        record.task,
        dump_object(record.schedule, f"schedule {what}"),
        int(record.dynamic),
        int(record.paused),
        dump_object(record.payload, f"payload {what}"),
        dump_object(record.metadata, f"metadata {what}"),
        to_epoch_us(record.created_at) if record.created_at is not None else None,
    )


def job(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        name=row["name"],
        task=row["task"],
        schedule=json.loads(row["schedule"]),
        dynamic=bool(row["dynamic"]),
        paused=bool(row["paused"]),
        payload=json.loads(row["payload"]),
        metadata=json.loads(row["metadata"]),
        created_at=from_epoch_us(row["created_at"]),
    )


def leader_lease(row: sqlite3.Row) -> LeaderLease:
    return LeaderLease(
        name=row["name"],
        leader_id=row["leader_id"],
        epoch=row["epoch"],
        elected_at=from_epoch_us(row["elected_at"]),
        expires_at=from_epoch_us(row["expires_at"]),
    )


def partition_lease(row: sqlite3.Row) -> PartitionLease:
    return PartitionLease(
        partition=row["partition"],
        holder=row["holder"],
        epoch=row["epoch"],
        expires_at=from_epoch_us(row["expires_at"]),
    )


def instance_params(info: InstanceInfo) -> tuple[object, ...]:
    """Parameters of ``coordination.instance_heartbeat`` but the times of the heartbeat."""
    return (
        info.instance_id,
        info.mode,
        info.hostname,
        int(info.pid),
        to_epoch_us(info.started_at),
        dump_object(info.metadata, f"metadata of instance {info.instance_id!r}"),
    )


def instance(row: sqlite3.Row) -> InstanceInfo:
    return InstanceInfo(
        instance_id=row["instance_id"],
        mode=row["mode"],
        hostname=row["hostname"],
        pid=row["pid"],
        started_at=from_epoch_us(row["started_at"]),
        last_seen=from_epoch_us(row["last_seen"]),
        expires_at=from_epoch_us(row["expires_at"]),
        metadata=json.loads(row["metadata"]),
    )
