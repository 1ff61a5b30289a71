"""What the store says about jobs and instances, as JSON for people: the rows of
``soloist jobs`` and ``soloist status``, ``GET /api/jobs`` and the shared part of
``GET /status``. Display only; the operations are in :mod:`soloist.operations`.

Every report costs a bounded number of store round trips, whatever the number of jobs:
jobs come a page at a time with their last outcomes (one query,
:meth:`~soloist.stores.core.CheckedStore.job_page`), and the cluster report adds the
jobs' counts, the leader, the live instances and the partition leases."""

from __future__ import annotations

import asyncio
from datetime import datetime

from soloist.errors import SoloistError
from soloist.models import InstanceInfo, JobRecord, JSONDict
from soloist.schedules import schedule_from_dict
from soloist.stores.core import CheckedStore
from soloist.stores.pages import JobCounts, JobPage, JobQuery, LastOutcome

__all__ = ["cluster_report", "counts_json", "job_json", "job_page", "page_json"]


def job_json(record: JobRecord, now: datetime, last: LastOutcome | None = None) -> JSONDict:
    """A job as ``soloist jobs --json`` and ``GET /api/jobs`` show it: its schedule as
    text, the next plan time after ``now`` and a summary of ``last``, its last outcome."""
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


def page_json(page: JobPage, now: datetime) -> JSONDict:
    """A page of jobs as ``GET /api/jobs`` answers it: ``jobs`` (:func:`job_json`) and
    ``next_cursor``, the ``cursor`` of the next page (None: this is the last)."""
    return {
        "jobs": [job_json(view.record, now, view.last) for view in page.jobs],
        "next_cursor": page.next_after,
    }


def counts_json(counts: JobCounts) -> JSONDict:
    """The jobs' counts: ``total`` and ``paused`` (None where the store cannot count
    them without reading every job)."""
    return {"total": counts.total, "paused": counts.paused}


async def job_page(store: CheckedStore, query: JobQuery | None = None) -> JSONDict:
    """One page of jobs with their last outcomes (:func:`page_json`): two round trips."""
    now, page = await asyncio.gather(store.now(), store.job_page(query))
    return page_json(page, now)


async def cluster_report(
    store: CheckedStore, election: str, query: JobQuery | None = None
) -> JSONDict:
    """What ``store`` says about all instances (the shared part of ``GET /status``): the
    leader of ``election``, its epoch, the live instances, the jobs' counts (``job_counts``:
    :func:`counts_json`) and the first page of jobs of ``query`` (default: the first
    :data:`~soloist.stores.pages.DEFAULT_PAGE` by name) with ``jobs_next_cursor``, where
    ``GET /api/jobs`` goes on. Six reads, sent at once, whatever the number of jobs."""
    query = query if query is not None else JobQuery()
    lease, instances, leases, counts, now, page = await asyncio.gather(
        store.leader_get(election),
        store.instance_list(),
        store.partition_list(),
        store.job_counts(query.prefix),
        store.now(),
        store.job_page(query),
    )
    jobs = page_json(page, now)
    held: dict[str, list[int]] = {}
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
        "job_counts": counts_json(counts),
        "jobs": jobs["jobs"],
        "jobs_next_cursor": jobs["next_cursor"],
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
