"""Values between Python and the Redis scripts: times as integers of microseconds since the
epoch, optional strings as ``''`` (None) or ``'=' + text``, rows in the scripts' field order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from soloist.clock import UTC
from soloist.models import (
    DEFAULT_MAX_CRASHES,
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
from soloist.payload import validate_payload
from soloist.stores._values import new_ids, object_json, result_json

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
#: Added to plan times in sort keys so that every datetime gives a non-negative number.
_PLAN_OFFSET = -((datetime(1, 1, 1, tzinfo=UTC) - EPOCH) // _US)

#: The fields of an occurrence row as the scripts return them (``FIELDS`` in lib.lua).
FIELDS = [
    *("id", "key", "job", "task", "scope", "plan", "due", "kind", "state", "att", "max"),
    *("ovl", "payload", "inst", "lease", "tok", "created", "started", "finished", "ecode"),
    *("emsg", "result", "crashes", "maxc", "cancel"),
]

Row = Sequence[Any]


def to_us(moment: datetime) -> int:
    return (moment - EPOCH) // _US


def us_text(moment: datetime) -> str:
    """An aware UTC datetime as the text of its microseconds since the epoch."""
    return str(to_us(moment))


def from_us(text: str | int) -> datetime:
    return EPOCH + _US * int(text)


def _opt_time(text: str | None) -> datetime | None:
    return from_us(text) if text is not None else None


def opt(text: str | None) -> str:
    """An optional string for a script: ``''`` is None, anything else is ``'=' + text``."""
    return "" if text is None else "=" + text


def item_args(items: Sequence[NewOccurrence]) -> list[object]:
    """The 13 script arguments of each new occurrence (see insert.lua), validated first:
    a bad payload or a naive time raises before anything is sent."""
    args: list[object] = []
    for item, occ_id in zip(items, new_ids(len(items)), strict=True):
        plan = to_us(item.plan_time)
        args += [
            occ_id,
            item.dedupe_key,
            item.job,
            item.task,
            item.scope,
            str(plan),
            f"{plan + _PLAN_OFFSET:018d}",
            us_text(item.due_at),
            Kind(item.kind).value,
            int(item.max_attempts),
            Overlap(item.overlap).value,
            object_json(item.payload, f"payload of {item.dedupe_key!r}"),
            int(item.max_crashes),
        ]
    return args


#: Whole seconds from 0001-01-01 to the epoch: insert.lua's 'now' adds them to a due time
#: made in the script to write its plan sort key (:data:`_PLAN_OFFSET` in seconds).
PLAN_OFFSET_SECONDS = _PLAN_OFFSET // 1_000_000
assert PLAN_OFFSET_SECONDS * 1_000_000 == _PLAN_OFFSET


#: Where :func:`item_now_args` puts the new id and the payload text.
_NOW_ID, _NOW_PAYLOAD = 3, 14


def item_now_args(item: NewOccurrence, delay: timedelta) -> list[object]:
    """The script arguments of insert.lua's 'now': the delay's whole seconds and the
    microseconds left, the sort key offset, then the 13 values of ``item``
    (:func:`item_args`) with its plan time, sort key and due time left empty (the script
    sets them to its now plus the delay)."""
    (occ_id,) = new_ids(1)
    seconds, micros = divmod(delay // _US, 1_000_000)
    return [
        seconds,
        micros,
        PLAN_OFFSET_SECONDS,
        occ_id,
        item.dedupe_key,
        item.job,
        item.task,
        item.scope,
        "",
        "",
        "",
        Kind(item.kind).value,
        int(item.max_attempts),
        Overlap(item.overlap).value,
        object_json(item.payload, f"payload of {item.dedupe_key!r}"),
        int(item.max_crashes),
    ]


def outcome_args(outcomes: Sequence[Outcome]) -> list[object]:
    """The 7 script arguments of each outcome (see runner.lua); PayloadError if a result
    does not encode."""
    args: list[object] = []
    for o in outcomes:
        retry = us_text(o.retry_at) if o.retry_at is not None else ""
        args += [
            o.id,
            str(o.fencing_token),
            o.state.value,
            retry,
            opt(o.error_code),
            opt(o.error_message),
            opt(result_json(o.result)),
        ]
    return args


def occurrences(text: str) -> list[Occurrence]:
    """Occurrences from a JSON array of rows (``rows_json`` in lib.lua; false is None)."""
    return [occurrence([v if v is not False else None for v in row]) for row in json.loads(text)]


def occurrence(row: Row) -> Occurrence:
    """An occurrence from a row in :data:`FIELDS` order. A row written before crash counts
    existed has neither: 0 crashes and the default budget. Every claimed row passes here:
    positional arguments and dict lookups of the enums keep it about twice as fast as
    keywords and enum calls."""
    (
        occ_id, key, job, task, scope, plan, due, kind, state, att, max_att, overlap,
        payload, instance, lease, token, created, started, finished, code, message, result,
        crashes, max_crashes, cancel,
    ) = row  # fmt: skip
    return Occurrence(
        occ_id,
        key,
        job,
        task,
        scope,
        from_us(plan),
        from_us(due),
        _KIND[kind],
        _STATE[state],
        int(att),
        int(max_att),
        _OVERLAP[overlap],
        {} if payload == "{}" else json.loads(payload),
        instance,
        _opt_time(lease),
        int(token),
        from_us(created),
        _opt_time(started),
        _opt_time(finished),
        code,
        message,
        json.loads(result) if result is not None else None,
        int(crashes) if crashes is not None else 0,
        int(max_crashes) if max_crashes is not None else DEFAULT_MAX_CRASHES,
        cancel == "1",
    )


_KIND = {kind.value: kind for kind in Kind}
_STATE = {state.value: state for state in State}
_OVERLAP = {overlap.value: overlap for overlap in Overlap}


def inserted(item: NewOccurrence, args: Sequence[object], created: str, due: str) -> Occurrence:
    """The occurrence insert.lua's 'now' just wrote for ``item`` with ``args``
    (:func:`item_now_args`: its id and payload text), from what the script answered: its
    now (created_at) and the due time, which is also the plan time. Every other field is
    the item's or a new row's default, so nothing is read back; the payload is decoded from
    the text sent, as a read of the row would give it."""
    due_at = from_us(due)
    payload = str(args[_NOW_PAYLOAD])
    return Occurrence(
        str(args[_NOW_ID]),
        item.dedupe_key,
        item.job,
        item.task,
        item.scope,
        due_at,
        due_at,
        Kind(item.kind),
        State.SCHEDULED,
        0,
        int(item.max_attempts),
        Overlap(item.overlap),
        {} if payload == "{}" else json.loads(payload),
        None,
        None,
        0,
        from_us(created),
        None,
        None,
        None,
        None,
        None,
        0,
        int(item.max_crashes),
        False,
    )


def attempt(occurrence_id: str, text: str) -> Attempt:
    """An attempt record from its JSON (written by ``log`` in lib.lua)."""
    rec = json.loads(text)
    started = rec.get("started")
    return Attempt(
        occurrence_id=occurrence_id,
        attempt=int(rec["att"]),
        fencing_token=int(rec["tok"]),
        instance_id=rec.get("inst"),
        started_at=from_us(started) if started else None,
        finished_at=from_us(rec["finished"]),
        outcome=rec["outcome"],
        error_code=rec.get("ecode"),
        error_message=rec.get("emsg"),
    )


def job_args(record: JobRecord) -> list[str]:
    """The 8 script arguments of a job (see jobs.lua), validated first."""
    name = record.name
    created = us_text(record.created_at) if record.created_at else ""
    return [
        name,
        record.task,
        object_json(record.schedule, f"schedule of job {name!r}"),
        object_json(record.payload, f"payload of job {name!r}"),
        object_json(record.metadata, f"metadata of job {name!r}"),
        "1" if record.dynamic else "0",
        "1" if record.paused else "0",
        created,
    ]


def job(name: str, fields: Row) -> JobRecord:
    """A job from its name and its fields in jobs.lua's ``JOB`` order."""
    task, schedule, payload, metadata, dynamic, paused, created = fields
    return JobRecord(
        name=name,
        task=task,
        schedule=json.loads(schedule),
        dynamic=dynamic == "1",
        paused=paused == "1",
        payload=json.loads(payload),
        metadata=json.loads(metadata),
        created_at=from_us(created),
    )


def leader_lease(name: str, fields: Row) -> LeaderLease:
    holder, epoch, elected, expires = fields
    return LeaderLease(name, holder, int(epoch), from_us(elected), from_us(expires))


def instance_args(info: InstanceInfo) -> list[str]:
    """The id, info JSON and start time of a heartbeat, validated first."""
    metadata = validate_payload(info.metadata, what=f"metadata of instance {info.instance_id!r}")
    text = json.dumps(
        {"mode": info.mode, "hostname": info.hostname, "pid": info.pid, "metadata": metadata},
        allow_nan=False,
    )
    return [info.instance_id, text, us_text(info.started_at)]


def instance(fields: Row) -> InstanceInfo:
    instance_id, text, started, seen, expires = fields
    info = json.loads(text)
    return InstanceInfo(
        instance_id=instance_id,
        mode=info["mode"],
        hostname=info["hostname"],
        pid=int(info["pid"]),
        started_at=from_us(started),
        last_seen=from_us(seen),
        expires_at=from_us(expires),
        metadata=info["metadata"],
    )


def _opt_us(moment: datetime | None) -> str:
    """An optional time for a script: its microseconds, or '' for None."""
    return us_text(moment) if moment is not None else ""


def cursor(job: str, scope: str, text: str) -> PlanCursor:
    """A planning cursor from its value in ``:cur:<job>`` (``cursor_parse`` in lib.lua:
    ``last|count|next|slot``, or ``last|count`` as written before the planning index)."""
    last, count, nxt, *_ = [*text.split("|", 3), ""]
    return PlanCursor(
        job,
        scope,
        from_us(last) if last else None,
        int(count),
        from_us(nxt) if nxt else None,
    )


def step_args(steps: Sequence[PlanAdvance]) -> list[object]:
    """The script arguments of plan steps (see plan.lua, 'advance'): 10 values each, then
    the 13 of each of its items (:func:`item_args`)."""
    args: list[object] = []
    for step in steps:
        fence = step.fence
        args += [
            step.job,
            step.scope,
            stream_slot(step.job, step.scope),
            _opt_us(step.expected_last),
            _opt_us(step.new_last),
            step.added_count,
            _opt_us(step.next_plan_time),
            fence.partition if fence is not None else "",
            fence.epoch if fence is not None else "",
            len(step.items),
            *item_args(step.items),
        ]
    return args


def stream_args(streams: Sequence[tuple[str, str]]) -> list[object]:
    """job, scope and slot of each stream (see plan.lua, 'ensure')."""
    return [value for job, scope in streams for value in (job, scope, stream_slot(job, scope))]


def due_batch(reply: Row) -> DueBatch:
    """What plan.lua's 'due' answers: next_at (or None), then {job, scope, cursor value,
    job fields or None} per due stream."""
    next_at, *rows = reply
    streams = [
        DueStream(cursor(name, scope, text), job(name, fields) if fields else None)
        for name, scope, text, fields in rows
    ]
    return DueBatch(streams, from_us(next_at) if next_at is not None else None)


def partition_leases(rows: Row) -> list[PartitionLease]:
    """Partition leases from partitions.lua's {partition, holder, epoch, expires} rows."""
    return [
        PartitionLease(int(number), holder, int(epoch), from_us(expires))
        for number, holder, epoch, expires in rows
    ]
