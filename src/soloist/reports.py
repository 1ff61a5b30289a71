"""What the store says about jobs and instances, as JSON for people: the rows of
``soloist jobs`` and ``soloist status``, ``GET /api/jobs`` and the shared part of
``GET /status``. Display only; the operations are in :mod:`soloist.operations`."""

from __future__ import annotations

from datetime import datetime

from soloist.errors import SoloistError
from soloist.models import InstanceInfo, JobRecord, JSONDict, Occurrence, State
from soloist.schedules import schedule_from_dict
from soloist.stores.base import Store

__all__ = ["LAST_LOOKBACK", "cluster_report", "job_json", "job_summaries"]

#: How many of a job's newest occurrences are read to find its last outcome (the newest
#: may be planned ahead and not yet run).
LAST_LOOKBACK = 5


def job_json(record: JobRecord, now: datetime, last: Occurrence | None = None) -> JSONDict:
    """A job as ``soloist jobs --json`` and ``GET /api/jobs`` show it: its schedule as
    text, the next plan time after ``now`` and a summary of ``last``, its latest run."""
    try:
        schedule = schedule_from_dict(record.schedule["schedule"])
        text, upcoming = schedule.describe(), schedule.next_after(now)
    except (KeyError, TypeError, SoloistError):
        text, upcoming = "(unreadable schedule)", None
    return {
        "name": record.name,
        "task": record.task,
        "schedule": text,
        "paused": record.paused,
        "dynamic": record.dynamic,
        "next_plan_time": upcoming.isoformat() if upcoming else None,
        "last": None
        if last is None
        else {
            "id": last.id,
            "state": last.state.value,
            "plan_time": last.plan_time.isoformat(),
            "finished_at": last.finished_at.isoformat() if last.finished_at else None,
            "error_code": last.error_code,
        },
    }


async def job_summaries(store: Store) -> list[JSONDict]:
    """Every job ``store`` knows, as :func:`job_json` objects with the last outcome."""
    now = await store.now()
    summaries = []
    for record in await store.job_list():
        recent = await store.occurrence_list(job=record.name, limit=LAST_LOOKBACK)
        last = next((o for o in recent if o.state is not State.SCHEDULED), None)
        summaries.append(job_json(record, now, last))
    return summaries


async def cluster_report(store: Store, election: str) -> JSONDict:
    """What ``store`` says about all instances: the leader of ``election``, its epoch, the
    live instances and every job (the shared part of ``GET /status``)."""
    lease = await store.leader_get(election)
    instances = await store.instance_list()
    held: dict[str, list[int]] = {}
    leases = await store.partition_list()
    for partition in leases:
        held.setdefault(partition.holder, []).append(partition.partition)
    return {
        "leader_id": lease.leader_id if lease else None,
        "epoch": lease.epoch if lease else None,
        "leader_expires_at": lease.expires_at.isoformat() if lease else None,
        "instances": [
            {
                "instance_id": i.instance_id,
                "host": i.hostname,
                "pid": i.pid,
                "mode": i.mode,
                "started_at": i.started_at.isoformat(),
                "last_seen": i.last_seen.isoformat(),
                "partitions": _partitions_of(i, held.get(i.instance_id, [])),
            }
            for i in instances
        ],
        "partitions_held": len(leases),
        "jobs": await job_summaries(store),
    }


def _partitions_of(info: InstanceInfo, held: list[int]) -> JSONDict | None:
    """The planning partitions an instance announces (their count) and holds, or None for
    an instance that does not plan by partitions."""
    count = info.metadata.get("partitions")
    if count is None and not held:
        return None
    return {"count": count, "held": held, "spans": spans(held)}


def spans(numbers: list[int]) -> str:
    """Sorted numbers as spans: ``[0, 1, 2, 5]`` as ``0-2,5`` (``-`` for none)."""
    if not numbers:
        return "-"
    parts: list[str] = []
    start = prev = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == prev + 1:
            prev = number
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if number is not None:
            start = prev = number
    return ",".join(parts)
