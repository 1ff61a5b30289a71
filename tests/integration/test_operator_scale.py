"""Operator views at 10,000 dynamic schedules, on each store: ``/metrics`` keeps a bounded
number of series (per-job labels only for jobs defined in code and the ``metrics_jobs``
set, every other dynamic schedule under ``job="(dynamic)"``), and ``/healthz``,
``/readyz`` and ``/metrics`` make the same store calls whatever the number of jobs.

The schedules are written through the store's bulk paths (``job_upsert`` of dynamic
records, ``occurrence_insert_many``), as the operator benchmark does, so that each test
takes seconds. Store calls are counted on the driver, only those made while a request is
served (a context variable set around it): the instance's own services, which run
meanwhile, are not counted."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from soloist import Scheduler, every
from soloist.http import create_app
from soloist.metrics import AGGREGATED
from soloist.models import Kind, NewOccurrence
from soloist.stores import open_store
from soloist.stores.core import CheckedStore

MANY = 10_000
FEW = 10
#: The bar of issue 15: /metrics under about 200 KB (there at 100,000 schedules).
BAR_BYTES = 200_000
TASK = "report"
CODE_JOB = "nightly"
KEPT = "report-7"  # a dynamic schedule listed in metrics_jobs
BATCH = 1000

#: Store calls made while a request is served (None: not counting).
CALLS: contextvars.ContextVar[Counter[str] | None] = contextvars.ContextVar("calls", default=None)


class CountingDriver:
    """Forwards everything to a store driver, counting the calls made while :data:`CALLS`
    holds a counter."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls = CALLS.get()
            if calls is not None:
                calls[name] += 1
            return attr(*args, **kwargs)

        return counted


@pytest.fixture(params=["memory", "postgres", "redis"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return "memory://"
    fixture = "postgres_url" if request.param == "postgres" else "redis_url"
    return str(request.getfixturevalue(fixture))


@asynccontextmanager
async def running(url: str) -> AsyncIterator[tuple[Scheduler, CheckedStore, httpx.AsyncClient]]:
    """A started instance on ``url`` with a code-defined job, the task of the dynamic
    schedules, ``metrics_jobs=[KEPT]``, and an HTTP client of its endpoint."""
    store = open_store(url)
    store.driver = CountingDriver(store.driver)  # type: ignore[assignment]
    app = Scheduler(store, instance_id="ops", poll_interval="200ms", metrics_jobs=[KEPT])
    app.task(name=TASK)(lambda ctx: None)
    app.job(every("1h"), name=CODE_JOB)(lambda ctx: None)
    await app.start()
    transport = httpx.ASGITransport(app=create_app(app))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield app, store, client
    finally:
        await app.stop()


async def add_schedules(app: Scheduler, store: CheckedStore, start: int, stop: int) -> None:
    """Dynamic schedules ``report-<start>`` to ``report-<stop - 1>`` (the first one added
    as a user would if ``start`` is 0, the others copies of it written by ``job_upsert``
    in batches), each with one occurrence due in an hour."""
    now = await store.now()
    every_hour = every("1h", start=now + timedelta(hours=1))
    if start == 0:
        await app.schedules.aadd("report-0", task=TASK, schedule=every_hour)
    template = await store.job_get("report-0")
    assert template is not None and template.dynamic
    names = [f"report-{i}" for i in range(start, stop)]
    records = [dataclasses.replace(template, name=name) for name in names if name != "report-0"]
    for offset in range(0, len(records), BATCH):
        await store.job_upsert(records[offset : offset + BATCH])
    items = [occurrence(name, now + timedelta(hours=1)) for name in names]
    for offset in range(0, len(items), BATCH):
        await store.occurrence_insert_many(items[offset : offset + BATCH])


def occurrence(job: str, due: datetime) -> NewOccurrence:
    return NewOccurrence(
        dedupe_key=f"seed:{job}:{due.isoformat()}",
        job=job,
        task=TASK,
        scope="",
        plan_time=due,
        due_at=due,
        kind=Kind.SCHEDULE,
    )


async def get(client: httpx.AsyncClient, path: str) -> tuple[httpx.Response, Counter[str]]:
    """GET ``path``; the answer and the store calls made to serve it."""
    calls: Counter[str] = Counter()
    token = CALLS.set(calls)
    try:
        answer = await client.get(path)
    finally:
        CALLS.reset(token)
    return answer, calls


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def job_labels(text: str) -> set[str]:
    return {value for (_, pairs) in samples(text) for key, value in pairs if key == "job"}


async def test_metrics_label_code_jobs_and_the_configured_set_only(url: str) -> None:
    """With 10,000 dynamic schedules that all ran, /metrics is as large as with 10 (well
    under 200 KB): the code-defined job and task and the schedule in ``metrics_jobs`` keep
    their labels, the others are summed under job="(dynamic)", in the runtime's counters
    (real runs, then the executor's per-run calls for every schedule) and in the store's
    counts."""
    async with running(url) as (app, store, client):
        await add_schedules(app, store, 0, FEW)
        # Real runs: one of an ordinary dynamic schedule, one of the kept one.
        now = await store.now()
        await store.occurrence_insert_many([occurrence("report-1", now), occurrence(KEPT, now)])

        def ran(job: str) -> float:
            return samples(app.metrics.exposition().decode()).get(
                ("soloist_runs_total", (("job", job), ("outcome", "succeeded"))), 0
            )

        deadline = time.monotonic() + 30
        while not (ran(AGGREGATED) == 1 and ran(KEPT) == 1):
            assert time.monotonic() < deadline, app.metrics.exposition().decode()[-3000:]
            await asyncio.sleep(0.05)
        for job in (CODE_JOB, TASK):  # a run of the code-defined job, one of a queued task
            app.metrics.run_finished(job, "succeeded", 0.01)
        for i in range(FEW):
            app.metrics.run_started(f"report-{i}", 0.05)
            app.metrics.run_finished(f"report-{i}", "succeeded", 0.01)
        few_answer, _ = await get(client, "/metrics")
        assert few_answer.status_code == 200
        few = few_answer.text

        await add_schedules(app, store, FEW, MANY)
        for i in range(FEW, MANY):  # what the executor calls for each run
            app.metrics.run_started(f"report-{i}", 0.05)
            app.metrics.run_finished(f"report-{i}", "failed" if i % 3 else "succeeded", 0.01)
        await app.metrics.refresh_counts(store, max_age=0)
        read = app.metrics.counts
        many = (await get(client, "/metrics"))[0].text
        counts = await store.occurrence_counts()

    # What the metrics read from the store names the labelled jobs only (PostgreSQL and
    # Redis answer so; the others are summed from every job's counts by the core).
    assert read is not None and read.others is not None
    assert {job for job, _ in read.by_job_state} <= {CODE_JOB, TASK, KEPT}

    assert len(many.encode()) < BAR_BYTES
    # Only the digits of the values differ from the text at 10 schedules.
    assert abs(len(many) - len(few)) < 1000, (len(few), len(many))
    assert job_labels(many) == job_labels(few) == {CODE_JOB, TASK, KEPT, AGGREGATED}
    got = samples(many)
    assert got[("soloist_runs_total", (("job", AGGREGATED), ("outcome", "succeeded")))] == (
        1 + (FEW - 1) + len([i for i in range(FEW, MANY) if i % 3 == 0])
    )
    assert got[("soloist_runs_total", (("job", KEPT), ("outcome", "succeeded")))] == 2
    assert got[("soloist_runs_total", (("job", CODE_JOB), ("outcome", "succeeded")))] == 1
    assert got[("soloist_lateness_seconds_count", (("job", AGGREGATED),))] >= MANY - 1
    # The store's counts: every schedule but the kept one summed under (dynamic).
    by_state: Counter[tuple[str, str]] = Counter()
    for (job, state), n in counts.by_job_state.items():
        by_state[(job if job == KEPT else AGGREGATED, state.value)] += n
    for (job, state), n in by_state.items():
        assert got[("soloist_occurrences", (("job", job), ("state", state)))] == n
    assert by_state[(AGGREGATED, "scheduled")] == MANY - 1  # one each, due in an hour
    assert by_state[(AGGREGATED, "succeeded")] == 1 and by_state[(KEPT, "succeeded")] == 1


async def test_probes_and_metrics_make_the_same_store_calls_at_10_and_10000_jobs(
    url: str,
) -> None:
    """/healthz touches no store, /readyz makes one call (the store's clock), /metrics one
    (the counts): the same at 10 and at 10,000 dynamic schedules, and each answers within
    a second either way (a read per job would take seconds at 10,000 on a server)."""
    async with running(url) as (app, store, client):
        seen: dict[int, dict[str, Counter[str]]] = {}
        for size in (FEW, MANY):
            await add_schedules(app, store, 0 if size == FEW else FEW, size)
            app.metrics._counts_at = float("-inf")  # the next scrape reads the store
            seen[size] = {}
            for path in ("/healthz", "/readyz", "/metrics"):
                started = time.perf_counter()
                answer, calls = await get(client, path)
                took = time.perf_counter() - started
                assert answer.status_code == 200, (path, answer.text)
                assert took < 1.0, (path, size, took)
                seen[size][path] = calls
    # A store that counts some jobs answers for the labelled ones and the rest together.
    counting = "occurrence_counts_of" if store.capabilities.counts_jobs else "occurrence_counts"
    assert seen[FEW] == seen[MANY]
    assert seen[MANY] == {
        "/healthz": Counter(),
        "/readyz": Counter({"now": 1}),
        "/metrics": Counter({counting: 1}),
    }
