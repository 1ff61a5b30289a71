"""Conversions between soloist's values and the PostgreSQL store's rows and parameters.

Times are ``timestamptz`` and cross as aware datetimes (connections run in UTC; values are
normalised to UTC anyway). JSON values cross as ``json.dumps`` text cast to ``json`` in the
SQL, and come back decoded by psycopg: never pickle.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from soloist.clock import UTC
from soloist.errors import ConfigError
from soloist.models import (
    Attempt,
    JobRecord,
    Kind,
    NewOccurrence,
    Occurrence,
    Outcome,
    Overlap,
    State,
)
from soloist.payload import validate_payload
from soloist.stores._values import aware_utc, result_json

__all__ = [
    "attempt",
    "complete_params",
    "insert_params",
    "items_params",
    "job",
    "jobs_params",
    "occurrence",
    "utc",
]

_OUTCOME_STATES = (State.SUCCEEDED, State.FAILED, State.DEAD)


def utc(moment: datetime) -> datetime:
    """A datetime read from the database, in UTC (usually already is: no work)."""
    return moment if moment.tzinfo is UTC else moment.astimezone(UTC)


def _opt(moment: datetime | None) -> datetime | None:
    return None if moment is None else utc(moment)


def dump_object(value: object, what: str) -> str:
    """A JSON object as text, or PayloadError naming what is wrong with it."""
    return json.dumps(validate_payload(value, what=what), allow_nan=False)


def occurrence(row: Sequence[Any]) -> Occurrence:
    """An occurrence from a row in ``queries.OCCURRENCE_COLUMNS`` order (extra columns
    after those are ignored)."""
    return Occurrence(
        id=row[0],
        dedupe_key=row[1],
        job=row[2],
        task=row[3],
        scope=row[4],
        plan_time=utc(row[5]),
        due_at=utc(row[6]),
        kind=Kind(row[7]),
        state=State(row[8]),
        attempt=row[9],
        max_attempts=row[10],
        overlap=Overlap(row[11]),
        payload=row[12],
        instance_id=row[13],
        lease_expires_at=_opt(row[14]),
        fencing_token=row[15],
        created_at=utc(row[16]),
        started_at=_opt(row[17]),
        finished_at=_opt(row[18]),
        error_code=row[19],
        error_message=row[20],
        result=row[21],
    )


def insert_params(item: NewOccurrence) -> dict[str, Any]:
    """Parameters of ``Queries.insert`` for ``item`` (validated; a new id)."""
    return {
        "id": uuid.uuid4().hex,
        "dedupe_key": item.dedupe_key,
        "job": item.job,
        "task": item.task,
        "scope": item.scope,
        "plan_time": aware_utc(item.plan_time, "plan_time"),
        "due_at": aware_utc(item.due_at, "due_at"),
        "kind": Kind(item.kind).value,
        "max_attempts": item.max_attempts,
        "overlap": Overlap(item.overlap).value,
        "payload": dump_object(item.payload, f"payload of {item.dedupe_key!r}"),
    }


def items_params(items: Sequence[NewOccurrence]) -> dict[str, list[Any]]:
    """The parameter arrays of many new occurrences (``Queries.plan_*``), ordered by
    dedupe key so that concurrent writers of overlapping keys lock them in one order."""
    rows = sorted((insert_params(item) for item in items), key=lambda r: r["dedupe_key"])
    return {
        "ids": [r["id"] for r in rows],
        "keys": [r["dedupe_key"] for r in rows],
        "jobs": [r["job"] for r in rows],
        "tasks": [r["task"] for r in rows],
        "scopes": [r["scope"] for r in rows],
        "plan_times": [r["plan_time"] for r in rows],
        "dues": [r["due_at"] for r in rows],
        "kinds": [r["kind"] for r in rows],
        "max_attempts": [r["max_attempts"] for r in rows],
        "overlaps": [r["overlap"] for r in rows],
        "payloads": [r["payload"] for r in rows],
    }


def complete_params(outcomes: Sequence[Outcome]) -> dict[str, list[Any]]:
    """The parameter arrays of ``Queries.complete``; ConfigError/PayloadError before
    anything is written if an outcome is not valid."""
    params: dict[str, list[Any]] = {
        key: [] for key in ("ids", "tokens", "states", "retry_at", "codes", "messages", "results")
    }
    for outcome in outcomes:
        if outcome.state not in _OUTCOME_STATES:
            raise ConfigError(
                f"invalid outcome state {outcome.state!r} for {outcome.id}: "
                "expected succeeded, failed or dead"
            )
        retry_at = outcome.retry_at
        params["ids"].append(outcome.id)
        params["tokens"].append(outcome.fencing_token)
        params["states"].append(State(outcome.state).value)
        params["retry_at"].append(None if retry_at is None else aware_utc(retry_at, "retry_at"))
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
        created = record.created_at
        params["created"].append(None if created is None else aware_utc(created, "created_at"))
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
