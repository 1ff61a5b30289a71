"""Conversions between soloist's values and the PostgreSQL store's rows and parameters.

Times are ``timestamptz`` and cross as aware datetimes (connections run in UTC; values are
normalised to UTC anyway). JSON values cross as ``json.dumps`` text cast to ``json`` in the
SQL, and come back decoded by psycopg: never pickle.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from soloist.clock import UTC
from soloist.models import (
    SLOTS,
    Attempt,
    DueBatch,
    DueStream,
    InstanceInfo,
    JobRecord,
    Kind,
    LeaderLease,
    NewOccurrence,
    Occurrence,
    Outcome,
    Overlap,
    PartitionLease,
    PlanAdvance,
    PlanCursor,
    State,
    stream_slot,
)
from soloist.stores._values import (
    new_ids,
    object_json,
    payload_json,
    payloads_json,
    result_json,
)

__all__ = [
    "attempt",
    "complete_params",
    "cursor",
    "due_batch",
    "insert_now_params",
    "insert_params",
    "inserted",
    "instance",
    "instance_params",
    "items_params",
    "job",
    "jobs_params",
    "leader_lease",
    "occurrence",
    "partition_lease",
    "slot_mask",
    "steps_params",
    "utc",
]

# Encodes lists of strings (ids, dedupe keys): made once, as json.dumps would build one per call.
_encode = json.JSONEncoder().encode


def utc(moment: datetime) -> datetime:
    """A datetime read from the database, in UTC (usually already is: no work)."""
    return moment if moment.tzinfo is UTC else moment.astimezone(UTC)


def _opt(moment: datetime | None) -> datetime | None:
    return None if moment is None else utc(moment)


def dump_object(value: object, what: str) -> str:
    """A JSON object as text, or PayloadError naming what is wrong with it."""
    return object_json(value, what)


def occurrence(row: Sequence[Any]) -> Occurrence:
    """An occurrence from a row in ``queries.OCCURRENCE_COLUMNS`` order (extra columns
    after those are ignored). The payload may come as JSON text (the claim sends it so: an
    empty payload then costs no decoding). Every claimed row passes here: positional
    arguments and dict lookups of the enums keep it about twice as fast as keywords and
    enum calls."""
    payload = row[12]
    if type(payload) is str:
        payload = {} if payload == "{}" else json.loads(payload)
    return Occurrence(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        utc(row[5]),
        utc(row[6]),
        _KIND[row[7]],
        _STATE[row[8]],
        row[9],
        row[10],
        _OVERLAP[row[11]],
        payload,
        row[13],
        _opt(row[14]),
        row[15],
        utc(row[16]),
        _opt(row[17]),
        _opt(row[18]),
        row[19],
        row[20],
        row[21],
        row[22],
        row[23],
        row[24],
    )


_KIND = {kind.value: kind for kind in Kind}
_STATE = {state.value: state for state in State}
_OVERLAP = {overlap.value: overlap for overlap in Overlap}


def inserted(
    item: NewOccurrence, params: dict[str, Any], created_at: datetime, due_at: datetime
) -> Occurrence:
    """The row ``Queries.insert_now`` just wrote for ``item`` with ``params``
    (:func:`insert_now_params`), from what the database answered: created_at, and due_at,
    which is also the plan time. Every other column is the item's or a new row's default,
    so nothing is read back; the payload is decoded from the JSON text sent, as a read of
    the row would give it."""
    due = utc(due_at)
    text = params["payload"]
    return Occurrence(
        params["id"],
        item.dedupe_key,
        item.job,
        item.task,
        item.scope,
        due,
        due,
        _KIND[params["kind"]],
        State.SCHEDULED,
        0,
        params["max_attempts"],
        _OVERLAP[params["overlap"]],
        {} if text == "{}" else json.loads(text),
        None,
        None,
        0,
        utc(created_at),
        None,
        None,
        None,
        None,
        None,
        0,
        params["max_crashes"],
        False,
    )


def insert_now_params(item: NewOccurrence, delay: timedelta) -> dict[str, Any]:
    """Parameters of ``Queries.insert_now`` for ``item`` due after ``delay`` (validated; a
    new id), but ``now`` and ``channel``, which the store adds."""
    (occ_id,) = new_ids(1)
    return {
        "id": occ_id,
        "dedupe_key": item.dedupe_key,
        "job": item.job,
        "task": item.task,
        "scope": item.scope,
        "delay": delay,
        "kind": Kind(item.kind).value,
        "max_attempts": int(item.max_attempts),
        "overlap": Overlap(item.overlap).value,
        "payload": payload_json(item),
        "max_crashes": int(item.max_crashes),
    }


def insert_params(item: NewOccurrence) -> dict[str, Any]:
    """Parameters of ``Queries.insert`` for ``item`` (validated; a new id)."""
    return {
        "id": uuid.uuid4().hex,
        "dedupe_key": item.dedupe_key,
        "job": item.job,
        "task": item.task,
        "scope": item.scope,
        "plan_time": item.plan_time,
        "due_at": item.due_at,
        "kind": Kind(item.kind).value,
        "max_attempts": item.max_attempts,
        "overlap": Overlap(item.overlap).value,
        "payload": payload_json(item),
        "max_crashes": int(item.max_crashes),
    }


def items_params(items: Sequence[NewOccurrence]) -> dict[str, Any]:
    """The parameters of many new occurrences (``Queries.plan_*``, ``insert_many``), ordered
    by dedupe key so that concurrent writers of overlapping keys lock them in one order (no
    deadlock). This is the hot path of bulk inserts, so each value is checked once, column
    by column, and sent in its cheapest form:

    * ids, keys and payloads as the text of one JSON array each (one C-speed encoding on
      either side, where a binary text array costs psycopg a Python call per element);
    * every other column as an array, of one element when all rows share the value (a
      batch of ``enqueue_many``, the rows of one plan): the SQL repeats that element."""
    return _items_columns(sorted(items, key=_dedupe_key))


def _items_columns(rows: Sequence[NewOccurrence]) -> dict[str, Any]:
    """The columns of :func:`items_params` for ``rows`` in the order given."""
    return {
        "ids": _encode(new_ids(len(rows))),
        "keys": _encode([item.dedupe_key for item in rows]),
        "jobs": _shared([item.job for item in rows]),
        "tasks": _shared([item.task for item in rows]),
        "scopes": _shared([item.scope for item in rows]),
        "plan_times": _shared([item.plan_time for item in rows]),
        "dues": _shared([item.due_at for item in rows]),
        "kinds": [_KINDS.get(k) or Kind(k).value for k in _shared([i.kind for i in rows])],
        "max_attempts": _shared([item.max_attempts for item in rows]),
        "overlaps": [
            _OVERLAPS.get(o) or Overlap(o).value for o in _shared([i.overlap for i in rows])
        ],
        "payloads": payloads_json(rows),
        "max_crashes": _shared([int(item.max_crashes) for item in rows]),
    }


def steps_params(steps: Sequence[PlanAdvance], positions: Sequence[int]) -> dict[str, Any]:
    """The parameters of ``Planning.advance`` for the steps at ``positions`` of ``steps``
    (distinct streams): one array per step field, each step's slot, the fence split in two
    arrays (NULLs without one), and the items of all of them (:func:`items_params`, in
    dedupe key order) with ``item_steps``, the position of each item's step."""
    chosen = [(n, steps[n]) for n in positions]
    tagged = sorted(
        ((item, n) for n, step in chosen for item in step.items),
        key=lambda pair: pair[0].dedupe_key,
    )
    fences = [step.fence for _, step in chosen]
    return {
        **_items_columns([item for item, _ in tagged]),
        "item_steps": [n for _, n in tagged],
        "steps": [n for n, _ in chosen],
        "step_jobs": [step.job for _, step in chosen],
        "step_scopes": [step.scope for _, step in chosen],
        "expected": [step.expected_last for _, step in chosen],
        "new_last": [step.new_last for _, step in chosen],
        "added": [step.added_count for _, step in chosen],
        "next": [step.next_plan_time for _, step in chosen],
        "slots": [stream_slot(step.job, step.scope) for _, step in chosen],
        "fence_partitions": [f.partition if f is not None else None for f in fences],
        "fence_epochs": [f.epoch if f is not None else None for f in fences],
    }


def slot_mask(ranges: Sequence[tuple[int, int]]) -> bytes:
    """The slots of ``ranges`` (``[lo, hi)``) as a bit mask of :data:`SLOTS` bits, bit ``n``
    in byte ``n // 8`` at weight ``1 << (n % 8)``: PostgreSQL's ``get_bit(bytea, n)``."""
    mask = bytearray(SLOTS // 8)
    for lo, hi in ranges:
        for slot in range(lo, hi):
            mask[slot >> 3] |= 1 << (slot & 7)
    return bytes(mask)


def _shared(values: list[Any]) -> list[Any]:
    """``values``, or its first element alone when every element equals it."""
    if values and values.count(values[0]) == len(values):
        return values[:1]
    return values


def _dedupe_key(item: NewOccurrence) -> str:
    return item.dedupe_key


# Enum members and their values, to their values: a dict lookup where calling the enum
# (which also accepts the plain strings) costs ten times more. Enum members hash by name,
# hence both keys.
_KINDS: dict[object, str] = {k: k.value for k in Kind} | {k.value: k.value for k in Kind}
_OVERLAPS: dict[object, str] = {o: o.value for o in Overlap} | {o.value: o.value for o in Overlap}


def complete_params(outcomes: Sequence[Outcome]) -> dict[str, list[Any]]:
    """The parameter arrays of ``Queries.complete``; PayloadError before anything is
    written if a result does not encode."""
    params: dict[str, list[Any]] = {
        key: [] for key in ("ids", "tokens", "states", "retry_at", "codes", "messages", "results")
    }
    for outcome in outcomes:
        params["ids"].append(outcome.id)
        params["tokens"].append(outcome.fencing_token)
        params["states"].append(outcome.state.value)
        params["retry_at"].append(outcome.retry_at)
        params["codes"].append(outcome.error_code)
        params["messages"].append(outcome.error_message)
        params["results"].append(result_json(outcome.result))
    return params


def jobs_params(records: Sequence[JobRecord]) -> dict[str, list[Any]]:
    """The parameter arrays of ``Queries.job_upsert``/``job_add``; a missing created_at
    is filled in by the store's clock in the SQL. A name given twice keeps the last."""
    latest = {record.name: record for record in records}
    params: dict[str, list[Any]] = {
        key: []
        for key in ("names", "tasks", "schedules", "dynamic", "paused", "payloads", "metadata")
    }
    params["created"] = []
    for record in latest.values():
        what = f"of job {record.name!r}"
        params["names"].append(record.name)
        params["tasks"].append(record.task)
        params["schedules"].append(dump_object(record.schedule, f"schedule {what}"))
        params["dynamic"].append(bool(record.dynamic))
        params["paused"].append(bool(record.paused))
        params["payloads"].append(dump_object(record.payload, f"payload {what}"))
        params["metadata"].append(dump_object(record.metadata, f"metadata {what}"))
        params["created"].append(record.created_at)
    return params


def job(row: Sequence[Any]) -> JobRecord:
    """A job from a row in ``name, task, schedule, dynamic, paused, payload, metadata,
    created_at`` order."""
    return JobRecord(
        name=row[0],
        task=row[1],
        schedule=row[2],
        dynamic=row[3],
        paused=row[4],
        payload=row[5],
        metadata=row[6],
        created_at=utc(row[7]),
    )


def attempt(row: Sequence[Any]) -> Attempt:
    """An audit record from a row in ``queries.ATTEMPT_COLUMNS`` order."""
    return Attempt(
        occurrence_id=row[0],
        fencing_token=row[1],
        attempt=row[2],
        instance_id=row[3],
        started_at=_opt(row[4]),
        finished_at=utc(row[5]),
        outcome=row[6],
        error_code=row[7],
        error_message=row[8],
    )


def leader_lease(row: Sequence[Any]) -> LeaderLease:
    """A lease from a row in ``name, leader_id, epoch, elected_at, expires_at`` order."""
    return LeaderLease(
        name=row[0], leader_id=row[1], epoch=row[2], elected_at=utc(row[3]), expires_at=utc(row[4])
    )


def partition_lease(row: Sequence[Any]) -> PartitionLease:
    """A lease from a row in ``coordination.PARTITION_COLUMNS`` order."""
    return PartitionLease(partition=row[0], holder=row[1], epoch=row[2], expires_at=utc(row[3]))


def cursor(row: Sequence[Any]) -> PlanCursor:
    """A cursor from a row in ``planning.CURSOR_COLUMNS`` order (extra columns after those
    are ignored)."""
    return PlanCursor(row[0], row[1], _opt(row[2]), int(row[3]), _opt(row[4]))


def due_batch(rows: Sequence[Sequence[Any]]) -> DueBatch:
    """The answer of ``Planning.due``: rows of next_at, a cursor and its job's record (or
    NULLs), one row of NULLs but next_at when nothing is due."""
    next_at = _opt(rows[0][0]) if rows else None
    streams = [
        DueStream(cursor(row[1:6]), job(row[6:]) if row[6] is not None else None)
        for row in rows
        if row[1] is not None
    ]
    return DueBatch(streams, next_at)


def instance_params(info: InstanceInfo) -> dict[str, Any]:
    """Parameters of ``Coordination.instance_heartbeat`` but the time to live and now."""
    return {
        "instance": info.instance_id,
        "mode": info.mode,
        "hostname": info.hostname,
        "pid": int(info.pid),
        "started_at": info.started_at,
        "metadata": dump_object(info.metadata, f"metadata of instance {info.instance_id!r}"),
    }


def instance(row: Sequence[Any]) -> InstanceInfo:
    """An instance from a row in ``coordination.INSTANCE_COLUMNS`` order."""
    return InstanceInfo(
        instance_id=row[0],
        mode=row[1],
        hostname=row[2],
        pid=row[3],
        started_at=utc(row[4]),
        last_seen=utc(row[5]),
        expires_at=utc(row[6]),
        metadata=row[7],
    )
