"""``GET /api/jobs`` and ``GET /status`` at many jobs: pages by cursor, filters, clear 400s,
and a number of store calls that does not grow with the number of jobs (issue 15). The
app is served in-process (``create_app`` over an ASGI transport) on real stores."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from soloist import Scheduler
from soloist.http import create_app
from soloist.models import JobRecord, Kind, NewOccurrence, Outcome, State
from soloist.stores.memory import MemoryStore

EVERY = {"schedule": {"kind": "every", "seconds": 60}}


def _names(count: int) -> list[str]:
    return [f"job-{n:04d}" for n in range(count)]


async def _fill(app: Scheduler, count: int) -> None:
    """``count`` jobs (every 7th paused); job-0001 ends dead, job-0002 succeeds."""
    store = await app.astore()
    records = [
        JobRecord(name, "work", EVERY, dynamic=True, paused=n % 7 == 0)
        for n, name in enumerate(_names(count))
    ]
    await store.job_upsert(records)
    now = await store.now()
    for name, state in (("job-0001", State.DEAD), ("job-0002", State.SUCCEEDED)):
        item = NewOccurrence(f"{name}:1", name, f"t-{name}", "", now, now, Kind.SCHEDULE)
        await store.occurrence_insert(item)
        (run,) = await store.occurrence_claim("i", [f"t-{name}"], 1, timedelta(seconds=30))
        code = "handler_error" if state is State.DEAD else None
        await store.occurrence_complete("i", [Outcome(run.id, run.fencing_token, state, code)])


@pytest.fixture(params=["memory", "postgres"])
async def client(
    request: pytest.FixtureRequest, make_postgres_url: Callable[[], str]
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the endpoint of an app whose store holds 120 jobs."""
    app = Scheduler("memory://" if request.param == "memory" else make_postgres_url())
    await _fill(app, 120)
    transport = httpx.ASGITransport(app=create_app(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client
    await app.aclose()


async def _pages(client: httpx.AsyncClient, query: str) -> list[dict[str, Any]]:
    """Every page of ``/api/jobs?query``, following next_cursor to the end."""
    pages = [(await client.get(f"/api/jobs?{query}")).json()]
    while pages[-1]["next_cursor"] is not None:
        cursor = quote(pages[-1]["next_cursor"], safe="")
        pages.append((await client.get(f"/api/jobs?{query}&cursor={cursor}")).json())
    return pages


async def test_api_jobs_pages_every_job_once(client: httpx.AsyncClient) -> None:
    """Pages of 50 (the default), then on from each next_cursor: every job once, by
    name; the last page has no next_cursor."""
    first = (await client.get("/api/jobs")).json()
    assert len(first["jobs"]) == 50 and first["next_cursor"] == "job-0049"
    pages = await _pages(client, "limit=50")
    assert [len(page["jobs"]) for page in pages] == [50, 50, 20]
    assert [job["name"] for page in pages for job in page["jobs"]] == _names(120)
    small = await _pages(client, "limit=7")
    assert [job["name"] for page in small for job in page["jobs"]] == _names(120)


async def test_api_jobs_filters(client: httpx.AsyncClient) -> None:
    """prefix, paused and outcome narrow the jobs; each job carries its last outcome."""
    found = (await client.get("/api/jobs?prefix=job-001&limit=500")).json()
    assert [j["name"] for j in found["jobs"]] == [f"job-001{n}" for n in range(10)]
    assert found["next_cursor"] is None
    paused = await _pages(client, "paused=true&limit=5")
    names = [j["name"] for page in paused for j in page["jobs"]]
    assert names == [name for n, name in enumerate(_names(120)) if n % 7 == 0]
    dead = (await client.get("/api/jobs?outcome=dead")).json()
    assert [j["name"] for j in dead["jobs"]] == ["job-0001"]
    last = dead["jobs"][0]["last"]
    assert (last["state"], last["error_code"]) == ("dead", "handler_error")
    assert set(last) == {"id", "state", "plan_time", "finished_at", "error_code"}
    never = await _pages(client, "outcome=none&paused=false&limit=100")
    count = sum(len(page["jobs"]) for page in never)
    assert count == 120 - len(names) - 2  # neither paused nor job-0001, job-0002


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("limit=0", "invalid limit '0': expected an integer from 1 to 500"),
        ("limit=501", "invalid limit '501'"),
        ("limit=ten", "invalid limit 'ten'"),
        ("paused=yes", "invalid paused 'yes': expected true or false"),
        ("outcome=failed", "invalid outcome 'failed': expected one of succeeded, dead"),
        ("cursor=%00", "invalid cursor '\\x00'"),
        ("prefix=a%0A", "invalid prefix 'a\\n'"),
    ],
)
async def test_bad_job_query_parameters_are_400_naming_the_value(
    client: httpx.AsyncClient, query: str, named: str
) -> None:
    response = await client.get(f"/api/jobs?{query}")
    assert response.status_code == 400
    assert named in response.json()["error"]


async def test_status_has_the_counts_and_the_first_page(client: httpx.AsyncClient) -> None:
    """/status counts every job (and the paused ones), lists the first page and names the
    cursor where /api/jobs goes on."""
    status = (await client.get("/status")).json()
    assert status["job_counts"] == {"total": 120, "paused": 18}
    assert [j["name"] for j in status["jobs"]] == _names(50)
    assert status["jobs_next_cursor"] == "job-0049"
    by_name = {j["name"]: j for j in status["jobs"]}
    assert by_name["job-0002"]["last"]["state"] == "succeeded"
    assert by_name["job-0003"]["last"] is None


class CountingStore(MemoryStore):
    """A memory store that counts the calls of each of its methods."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __getattribute__(self, name: str) -> Any:
        found = super().__getattribute__(name)
        if callable(found) and not name.startswith("_") and name != "calls":
            self.calls[name] += 1
        return found


@pytest.mark.parametrize("path", ["/status", "/api/jobs", "/api/jobs?outcome=dead&prefix=job"])
async def test_reads_cost_the_same_store_calls_at_any_number_of_jobs(path: str) -> None:
    """The store calls of /status and a page of /api/jobs are the same at 60 jobs and at
    1500: never one per job (no job_list, no history read per job)."""
    counted = []
    for count in (60, 1500):
        driver = CountingStore()
        app = Scheduler(driver)
        await _fill(app, count)
        transport = httpx.ASGITransport(app=create_app(app))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            driver.calls.clear()
            response = await client.get(path)
            assert response.status_code == 200, response.text
        counted.append(dict(driver.calls))
        await app.aclose()
    assert counted[0] == counted[1]
    assert "job_page" in counted[0] and sum(counted[0].values()) <= 8
    assert "job_list" not in counted[0] and "occurrence_list" not in counted[0]
