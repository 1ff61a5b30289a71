"""Values of the etcd store: records as compact JSON (times as integers of microseconds
since the epoch, enums as their values), and the fixed-width numbers that make keys sort
by time."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from soloist.clock import UTC
from soloist.models import (
    Attempt,
    InstanceInfo,
    JobRecord,
    Kind,
    Occurrence,
    Overlap,
    PlanCursor,
    State,
)
from soloist.payload import validate_payload

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
#: Added to times in keys so that every datetime (year 1 included) is a non-negative number.
_OFFSET = -((datetime(1, 1, 1, tzinfo=UTC) - EPOCH) // _US)
_encode = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode

#: The fields of an occurrence, in the order of its stored JSON array.
_OCC = (
    "id", "dedupe_key", "job", "task", "scope", "plan_time", "due_at", "kind", "state",
    "attempt", "max_attempts", "overlap", "payload", "instance_id", "lease_expires_at",
    "fencing_token", "created_at", "started_at", "finished_at", "error_code",
    "error_message", "result", "crashes", "max_crashes", "cancel_requested",
)  # fmt: skip
_OCC_TIMES = frozenset(["plan_time", "due_at", "lease_expires_at", "created_at"])
_OCC_TIMES |= {"started_at", "finished_at"}


def to_us(moment: datetime) -> int:
    return (moment - EPOCH) // _US


def from_us(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def opt_us(moment: datetime | None) -> int | None:
    return to_us(moment) if moment is not None else None


def opt_time(value: int | None) -> datetime | None:
    return from_us(value) if value is not None else None


def sort_key(moment: datetime) -> bytes:
    """``moment`` as 20 digits: keys holding it sort by time."""
    return b"%020d" % (to_us(moment) + _OFFSET)


def from_sort_key(text: bytes) -> datetime:
    return from_us(int(text) - _OFFSET)


def dumps(value: Any) -> bytes:
    return _encode(value).encode()


def occurrence_bytes(occ: Occurrence) -> bytes:
    row: list[Any] = []
    for name in _OCC:
        value = getattr(occ, name)
        if name in _OCC_TIMES:
            value = opt_us(value)
        elif name in ("kind", "state", "overlap"):
            value = value.value
        row.append(value)
    return dumps(row)


def occurrence(data: bytes) -> Occurrence:
    stored = json.loads(data)
    if len(stored) == len(_OCC) - 1:
        stored.append(False)  # written before cancellation: not requested
    values = dict(zip(_OCC, stored, strict=True))
    for name in _OCC_TIMES:
        values[name] = opt_time(values[name])
    values["kind"] = Kind(values["kind"])
    values["state"] = State(values["state"])
    values["overlap"] = Overlap(values["overlap"])
    return Occurrence(**values)


def attempt_bytes(record: Attempt) -> bytes:
    return dumps(
        [
            record.attempt,
            record.fencing_token,
            record.instance_id,
            opt_us(record.started_at),
            to_us(record.finished_at),
            record.outcome,
            record.error_code,
            record.error_message,
        ]
    )


def attempt(occurrence_id: str, data: bytes) -> Attempt:
    number, token, instance, started, finished, outcome, code, message = json.loads(data)
    return Attempt(
        occurrence_id=occurrence_id,
        attempt=number,
        fencing_token=token,
        instance_id=instance,
        started_at=opt_time(started),
        finished_at=from_us(finished),
        outcome=outcome,
        error_code=code,
        error_message=message,
    )


def job_bytes(record: JobRecord) -> bytes:
    return dumps(
        {
            "task": record.task,
            "schedule": record.schedule,
            "dynamic": record.dynamic,
            "paused": record.paused,
            "payload": record.payload,
            "metadata": record.metadata,
            "created": opt_us(record.created_at),
        }
    )


def job(name: str, data: bytes) -> JobRecord:
    values = json.loads(data)
    return JobRecord(
        name=name,
        task=values["task"],
        schedule=values["schedule"],
        dynamic=values["dynamic"],
        paused=values["paused"],
        payload=values["payload"],
        metadata=values["metadata"],
        created_at=opt_time(values["created"]),
    )


def cursor_bytes(cursor: PlanCursor) -> bytes:
    return dumps(
        [opt_us(cursor.last_plan_time), cursor.planned_count, opt_us(cursor.next_plan_time)]
    )


def cursor(job: str, scope: str, data: bytes) -> PlanCursor:
    last, count, next_at = json.loads(data)
    return PlanCursor(job, scope, opt_time(last), count, opt_time(next_at))


def instance_bytes(info: InstanceInfo) -> bytes:
    return dumps(
        [
            info.mode,
            info.hostname,
            info.pid,
            to_us(info.started_at),
            to_us(info.last_seen),
            to_us(info.expires_at),
            validate_payload(info.metadata, what=f"metadata of instance {info.instance_id!r}"),
        ]
    )


def instance(instance_id: str, data: bytes) -> InstanceInfo:
    mode, hostname, pid, started, seen, expires, metadata = json.loads(data)
    return InstanceInfo(
        instance_id=instance_id,
        mode=mode,
        hostname=hostname,
        pid=pid,
        started_at=from_us(started),
        last_seen=from_us(seen),
        expires_at=from_us(expires),
        metadata=metadata,
    )
