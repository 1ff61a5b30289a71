"""What only the PostgreSQL store promises: URLs and schemas, migrations, the database clock,
claims racing across processes, one statement per batch, and LISTEN/NOTIFY wake-ups."""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import sql

from soloist.clock import SystemClock
from soloist.context import JobContext
from soloist.errors import ConfigError, StoreError, StoreUnavailableError
from soloist.models import (
    SLOTS,
    Claimed,
    JobRecord,
    Kind,
    Outcome,
    Overlap,
    PlanAdvance,
    PlanCursor,
    PlanFence,
    State,
    stream_slot,
)
from soloist.scheduler import Scheduler
from soloist.stores import open_store
from soloist.stores.core import checked
from soloist.stores.pages import JobQuery
from soloist.stores.postgres import PostgresStore, codec, migrations, pages, parse_url
from soloist.stores.postgres.connections import (
    INDEX_WALK,
    ORDERED_WALK,
    ORDERED_WALK_END,
)
from soloist.stores.postgres.migrations import MIGRATIONS
from soloist.stores.postgres.planning import Planning
from soloist.stores.postgres.queries import Queries
from soloist.testing.clock import FakeClock
from soloist.testing.conformance import claim, new_occurrence
from soloist.testing.conformance.base import insert
from soloist.testing.conformance.processes import race_claimers

LONG_AGO = datetime(2020, 1, 1, tzinfo=timezone.utc)  # due for any real clock
EVERY = {"kind": "every", "seconds": 300}
TTL = timedelta(minutes=5)


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    """A migrated store on a fresh schema, reading the database's clock."""
    opened = PostgresStore(postgres_url)
    await opened.migrate()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def other(postgres_url: str, store: PostgresStore) -> AsyncIterator[PostgresStore]:
    """A second handle (another instance) on the same schema."""
    opened = PostgresStore(postgres_url)
    try:
        yield opened
    finally:
        await opened.close()


def _versions(dsn: str, schema: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = sql.SQL("SELECT version FROM {}.schema_version ORDER BY version")
        rows = conn.execute(query.format(sql.Identifier(schema))).fetchall()
    return [row[0] for row in rows]


# -- URLs and schemas -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "schema", "expected"),
    [
        ("postgresql://u@db.example:6432/app", None, "soloist"),
        ("postgres://u@db.example/app?schema=billing", None, "billing"),
        ("postgresql:///app?sslmode=disable&schema=_x1", None, "_x1"),
        ("postgresql://u@h/app", "reports", "reports"),
        ("postgresql://u@h/app?schema=reports", "reports", "reports"),
    ],
)
def test_schema_comes_from_the_url_or_the_argument(
    url: str, schema: str | None, expected: str
) -> None:
    """The schema is the URL's schema= parameter, else the argument, else 'soloist'."""
    target = parse_url(url, schema)
    assert target.schema == expected
    assert "schema=" not in target.conninfo
    assert target.channel == f"soloist_{expected}"


def test_other_url_parameters_reach_libpq_unchanged() -> None:
    """Parameters other than schema, percent-encoded ones included, go to libpq as given."""
    target = parse_url("postgresql://u@h/app?options=-c%20work_mem%3D8MB&schema=s")
    assert target.conninfo == "postgresql://u@h/app?options=-c%20work_mem%3D8MB"


@pytest.mark.parametrize("name", ["Upper", "1st", "pg_app", "a-b", "a b", "x" * 56, ""])
def test_bad_schema_names_raise_config_error_naming_them(name: str) -> None:
    """A schema name that is not a plain lower-case identifier is a ConfigError."""
    with pytest.raises(ConfigError, match="invalid PostgreSQL schema name"):
        PostgresStore("postgresql://u@h/app", schema=name)


@pytest.mark.parametrize(
    ("url", "schema", "match"),
    [
        ("mysql://u:hunter2@h/app", None, "invalid PostgreSQL store URL"),
        ("postgresql://u:hunter2@h/app?nosuch=1", None, "nosuch"),
        ("postgresql://u:hunter2@h/app?schema=a&schema=b", None, "twice"),
        ("postgresql://u:hunter2@h/app?schema=a", "b", "conflicting schemas"),
    ],
)
def test_bad_urls_raise_config_error_without_the_password(
    url: str, schema: str | None, match: str
) -> None:
    """A malformed URL is a ConfigError quoting it with its password masked."""
    with pytest.raises(ConfigError, match=match) as caught:
        PostgresStore(url, schema=schema)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_open_store_selects_the_postgres_store(scheme: str) -> None:
    """open_store dispatches both spellings of the scheme; repr hides the password."""
    store = open_store(f"{scheme}://app:hunter2@db.example:5433/prod?schema=billing")
    assert isinstance(store.driver, PostgresStore)
    assert store.driver.schema == "billing"
    assert "hunter2" not in repr(store) and "db.example:5433/prod" in repr(store)


async def test_unreachable_server_is_unavailable_without_the_password() -> None:
    """No server listening: StoreUnavailableError naming host and database, not the password."""
    store = PostgresStore("postgresql://app:hunter2@127.0.0.1:1/proddb")
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        await store.migrate()
    assert time.monotonic() - started < 5  # refused at once, not retried until a timeout
    message = str(caught.value)
    assert "127.0.0.1" in message and "proddb" in message
    assert "hunter2" not in message
    await store.close()


# -- migrations -----------------------------------------------------------------------------
async def test_migrate_twice_is_a_no_op_that_takes_no_lock(
    postgres_dsn: str, postgres_url: str
) -> None:
    """A current schema migrates with one read: no new version row, no wait on the lock."""
    first = PostgresStore(postgres_url)
    await first.migrate()
    await first.close()
    schema = parse_url(postgres_url).schema
    assert _versions(postgres_dsn, schema) == list(range(1, len(MIGRATIONS) + 1))
    with psycopg.connect(postgres_dsn) as holder:  # holds the migration lock meanwhile
        key = f"soloist:migrate:{schema}"
        holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))
        second = PostgresStore(postgres_url)
        await asyncio.wait_for(second.migrate(), timeout=5)
        await second.close()
    assert _versions(postgres_dsn, schema) == list(range(1, len(MIGRATIONS) + 1))


async def test_instances_migrating_at_once_are_safe(postgres_dsn: str, postgres_url: str) -> None:
    """Four stores migrating one fresh schema concurrently: no error, each version once."""
    stores = [PostgresStore(postgres_url) for _ in range(4)]
    await asyncio.gather(*(store.migrate() for store in stores))
    await asyncio.gather(*(store.close() for store in stores))
    schema = parse_url(postgres_url).schema
    assert _versions(postgres_dsn, schema) == list(range(1, len(MIGRATIONS) + 1))


async def test_two_apps_share_a_database_without_seeing_each_other(
    make_postgres_url: Callable[[], str],
) -> None:
    """Two schemas on one database: occurrences, claims and jobs stay in their own app."""
    a = PostgresStore(make_postgres_url())
    b = PostgresStore(make_postgres_url())
    await a.migrate()
    await b.migrate()
    await a.occurrence_insert(new_occurrence("same-key", due_at=LONG_AGO))
    (in_b, created) = await b.occurrence_insert(new_occurrence("same-key", due_at=LONG_AGO))
    assert created  # the dedupe key is per app
    assert [o.id for o in await b.occurrence_list()] == [in_b.id]
    assert [o.id for o in await claim(b, instance="b")] == [in_b.id]
    assert len(await claim(a, instance="a")) == 1
    await a.plan_advance(PlanAdvance("job", "", None, LONG_AGO, 0, []))
    assert await b.plan_cursor_get("job", "") is None
    await a.close()
    await b.close()


# -- errors and life cycle ------------------------------------------------------------------
async def test_an_unmigrated_schema_raises_store_error(postgres_url: str) -> None:
    """Driver errors (here: no tables yet) surface as StoreError, not psycopg errors."""
    store = PostgresStore(postgres_url)
    with pytest.raises(StoreError, match="does not exist"):
        await store.occurrence_get("x")
    await store.close()


async def test_a_closed_store_raises_store_error(store: PostgresStore) -> None:
    """Using a store after close() raises StoreError rather than reconnecting."""
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.occurrence_get("x")


async def test_json_values_read_back_exactly(store: PostgresStore) -> None:
    """Payloads and results keep their JSON text: 1e20 stays a float, -0.0 stays -0.0."""
    payload = {"big": 1e20, "negative_zero": -0.0, "n": 10**30}
    occ, _ = await store.occurrence_insert(new_occurrence("k", due_at=LONG_AGO, payload=payload))
    (got,) = await claim(store)
    done = Outcome(got.id, got.fencing_token, State.SUCCEEDED, result=[1e20])
    await store.occurrence_complete("i1", [done])
    stored = await store.occurrence_get(occ.id)
    assert stored is not None and stored.result == [1e20] and isinstance(stored.result[0], float)
    assert json.dumps(stored.payload) == json.dumps(payload)


async def test_bulk_inserted_json_reads_back_exactly(store: PostgresStore) -> None:
    """insert_many keeps each payload's JSON text: 1e20 stays a float, -0.0 stays -0.0."""
    payloads: list[dict[str, Any]] = [
        {"big": 1e20, "negative_zero": -0.0, "n": 10**30},
        {"s": 'quote " and ✓', "nested": [{"a": None}]},
        {},
    ]
    items = [new_occurrence(f"k{n}", payload=p) for n, p in enumerate(payloads)]
    assert await store.occurrence_insert_many(items) == 3
    stored = {o.dedupe_key: o.payload for o in await store.occurrence_list()}
    assert [json.dumps(stored[f"k{n}"]) for n in range(3)] == [json.dumps(p) for p in payloads]


async def test_bulk_insert_reads_back_shared_and_distinct_columns(store: PostgresStore) -> None:
    """insert_many stores each row's own values whether a column is shared by every row
    (sent once) or differs between rows, and a single row too."""
    base = LONG_AGO
    mixed = [
        new_occurrence(
            f"m{n}",
            job=f"job{n % 2}",
            task="task" if n else "other",
            scope=f"s{n}",
            plan_time=base + timedelta(seconds=n),
            due_at=base + timedelta(seconds=2 * n),
            kind=(Kind.SCHEDULE, Kind.TRIGGER, Kind.TASK)[n % 3],
            max_attempts=n + 1,
            overlap=(Overlap.ALLOW, Overlap.SKIP, Overlap.QUEUE)[n % 3],
            payload={"n": n},
            max_crashes=n,
        )
        for n in range(5)
    ]
    shared = [new_occurrence(f"s{n}", job="same", due_at=base, max_crashes=0) for n in range(4)]
    single = [new_occurrence("one", job="lone", kind=Kind.TRIGGER, max_attempts=3)]
    for items in (mixed, shared, single):
        assert await store.occurrence_insert_many(items) == len(items)
    stored = {o.dedupe_key: o for o in await store.occurrence_list(limit=100)}
    for item in [*mixed, *shared, *single]:
        occ = stored[item.dedupe_key]
        got = (occ.job, occ.task, occ.scope, occ.plan_time, occ.due_at, occ.kind)
        assert got == (item.job, item.task, item.scope, item.plan_time, item.due_at, item.kind)
        assert (occ.max_attempts, occ.overlap, occ.payload, occ.max_crashes) == (
            item.max_attempts,
            item.overlap,
            item.payload,
            item.max_crashes,
        )
        assert occ.state == State.SCHEDULED and len(occ.id) == 32


async def test_enqueue_is_one_statement_due_by_the_database_clock(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aenqueue sends one statement: the database's clock fixes created_at, plan_time and
    due_at (now + delay) inside the insert; a key seen before returns the first row."""
    app = Scheduler(store)

    @app.task(name="t")
    async def t(ctx: JobContext) -> None:
        return None

    await app.aenqueue("t")  # warm-up: the pool is open before counting starts
    sent: list[str] = []
    execute = psycopg.AsyncCursor.execute

    async def counting(self: psycopg.AsyncCursor[Any], query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(str(query))
        return await execute(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", counting)
    before = await store.now()
    sent.clear()
    occ_id = await app.aenqueue("t", delay="10s")
    assert len(sent) == 1
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and occ.created_at >= before and occ.kind == Kind.TASK
    assert occ.plan_time == occ.due_at == occ.created_at + timedelta(seconds=10)
    first_id = await app.aenqueue("t", key="once")
    assert await app.aenqueue("t", key="once", delay="1h") == first_id
    first = await store.occurrence_get(first_id)
    assert first is not None and first.due_at == first.created_at
    with pytest.raises(ConfigError, match="-1s"):
        await app.aenqueue("t", delay="-1s")


def _plan(dsn: str, query: str, params: dict[str, Any]) -> str:
    """EXPLAIN ANALYZE of ``query`` with the settings the store runs it with."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction(force_rollback=True):
        conn.execute(ORDERED_WALK)
        rows = conn.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {query}", params).fetchall()
    return "\n".join(row[0] for row in rows)


async def test_claims_walk_the_claim_index_without_sorting_the_due_rows(
    postgres_dsn: str, store: PostgresStore
) -> None:
    """With 3,000 due rows and no statistics (autovacuum off, never analyzed), a claim and
    next_due read the claim index in order and stop early: no bitmap scan, no sort of every
    due row (the plan the planner picks from its default estimates otherwise)."""
    items = [new_occurrence(f"k{n:04}", due_at=LONG_AGO) for n in range(3000)]
    assert await store.occurrence_insert_many(items) == 3000
    sql_ = Queries(store.schema)
    params = {
        "now": None,
        "tasks": ["task"],
        "limit": 100,
        "instance": "i1",
        "ttl": TTL,
        "allow_only": False,
    }
    claim_plan = await asyncio.to_thread(_plan, postgres_dsn, sql_.claim, params)
    assert "Index Scan using occurrences_claim" in claim_plan, claim_plan
    assert "Bitmap" not in claim_plan and "Sort Key: o.due_at" not in claim_plan, claim_plan
    next_plan = await asyncio.to_thread(_plan, postgres_dsn, sql_.next_due, {"tasks": ["task"]})
    (scan,) = [line for line in next_plan.splitlines() if "using occurrences_claim" in line]
    assert "Index Scan" in scan and "rows=1 loops=1" in scan, next_plan  # stopped at once


async def test_an_allow_only_claim_walks_the_claim_index_too(
    postgres_dsn: str, store: PostgresStore
) -> None:
    """With 3,000 due rows, two of every three skip or queue rows, and no statistics, an
    allow_only claim reads the claim index in order and stops after its limit of allow rows
    (about three index rows per claim), with no overlap probes and nothing to skip."""
    overlaps = (Overlap.ALLOW, Overlap.SKIP, Overlap.QUEUE)
    items = [
        new_occurrence(f"k{n:04}", job=f"j{n:04}", due_at=LONG_AGO, overlap=overlaps[n % 3])
        for n in range(3000)
    ]
    assert await store.occurrence_insert_many(items) == 3000
    params = {"now": None, "tasks": ["task"], "limit": 100, "instance": "i1", "ttl": TTL}
    query = Queries(store.schema).claim
    plan = await asyncio.to_thread(_plan, postgres_dsn, query, {**params, "allow_only": True})
    (scan,) = [line for line in plan.splitlines() if "using occurrences_claim" in line]
    assert "Index Scan" in scan and "rows=100 loops=1" in scan, plan
    assert "Rows Removed by Filter: 198" in plan, plan  # stopped at the 100th allow row
    assert "Bitmap" not in plan and "Sort Key: o.due_at" not in plan, plan
    probes = ("occurrences_running", "occurrences_group_siblings", "occurrences_exclusive")
    lines = [line for line in plan.splitlines() if any(name in line for name in probes)]
    assert all("never executed" in line for line in lines), plan  # or planned away
    claimed = await claim(store, limit=100, allow_only=True)
    assert [o.dedupe_key for o in claimed] == [f"k{n:04}" for n in range(0, 300, 3)]


async def test_a_claim_skips_from_the_running_rows_not_the_whole_backlog(
    postgres_dsn: str, store: PostgresStore
) -> None:
    """With 5,000 overdue "skip" rows of 5,000 streams (a backlog) and two streams running,
    a claim finds what to skip from the running rows, each looking up its own group: the
    overdue rows are not walked one by one (before: a probe per overdue row, 0.8 s at 170k),
    and what it skips is still exactly the rows due after a running run started."""
    backlog = [
        new_occurrence(f"b{n:04}", job=f"j{n:04}", due_at=LONG_AGO, overlap=Overlap.SKIP)
        for n in range(5000)
    ]
    assert await store.occurrence_insert_many(backlog) == 5000
    running = await claim(store, limit=2)
    assert [o.job for o in running] == ["j0000", "j0001"]
    started = max(o.started_at for o in running if o.started_at is not None)
    later = [
        new_occurrence(
            f"late{n}",
            job=f"j000{n}",
            due_at=started + timedelta(milliseconds=1),
            overlap=Overlap.SKIP,
        )
        for n in range(2)
    ]
    assert await store.occurrence_insert_many(later) == 2
    sql_ = Queries(store.schema)
    params = {
        "now": None,
        "tasks": ["task"],
        "limit": 10,
        "instance": "i1",
        "ttl": TTL,
        "allow_only": False,
    }
    plan = await asyncio.to_thread(_plan, postgres_dsn, sql_.claim, params)
    # No node of the plan runs once per overdue row: the lookups run once per running row
    # (and per candidate the claim examines, up to its limit).
    loops = [int(part.split(")", 1)[0]) for part in plan.split("loops=")[1:]]
    assert max(loops) <= 100, plan
    await claim(store, limit=10)
    skipped = await store.occurrence_list(state=State.SKIPPED, limit=100)
    assert sorted(o.dedupe_key for o in skipped) == ["late0", "late1"]


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _rows_read(dsn: str, query: str, params: dict[str, Any], table: str) -> int:
    """How many rows of ``table`` the plan of ``query`` read (kept or filtered out), in all
    its loops, run with the settings the store runs it with."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction(force_rollback=True):
        conn.execute(ORDERED_WALK)
        row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", params).fetchone()
    assert row is not None
    nodes = [n for n in _nodes(row[0][0]["Plan"]) if n.get("Relation Name") == table]
    assert nodes, row[0]
    return sum(
        (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"] for n in nodes
    )


async def test_a_page_finds_a_last_outcome_in_a_few_rows_whatever_the_job_holds(
    postgres_dsn: str, store: PostgresStore
) -> None:
    """A job with 2,000 finished occurrences, then 2,000 waiting after the last one (a
    queue behind a slow handler), among 200 jobs of one finished run each: the page's
    probe for its last outcome reads a few rows (occurrences_job_last, the finished rows
    in history order), not every waiting row nor every finished one."""
    names = [f"j{n:03}" for n in range(200)]
    jobs = [JobRecord(name=n, task="task", schedule=EVERY) for n in [*names, "busy"]]
    await store.job_upsert(jobs)
    base = (await store.now()).replace(microsecond=0) - timedelta(days=1)
    done = [new_occurrence(f"{n}:0", job=n, due_at=base) for n in names]
    done += [
        new_occurrence(f"busy:{n}", job="busy", due_at=base + timedelta(seconds=n))
        for n in range(2000)
    ]
    assert await store.occurrence_insert_many(done) == 2200
    runs = await claim(store, limit=2200, now=base + timedelta(hours=1))
    outcomes = [Outcome(o.id, o.fencing_token, State.SUCCEEDED) for o in runs]
    assert len(await store.occurrence_complete("i1", outcomes, now=base)) == 2200
    waiting = [
        new_occurrence(f"busy:{n}", job="busy", due_at=base + timedelta(hours=2, seconds=n))
        for n in range(2000, 4000)
    ]
    assert await store.occurrence_insert_many(waiting) == 2000
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ANALYZE {}.occurrences").format(sql.Identifier(store.schema)))
    query = JobQuery(prefix="busy", limit=1)
    (view,) = (await store.job_page(query)).jobs
    last = next(o for o in runs if o.dedupe_key == "busy:1999")
    assert view.last is not None and view.last.id == last.id
    key, params = pages.page_params(query)
    statement = pages.page_sql(store.schema, *key)
    read = await asyncio.to_thread(_rows_read, postgres_dsn, statement, params, "occurrences")
    assert read <= 5


async def test_the_overlap_probe_goes_straight_to_its_group(
    postgres_dsn: str, store: PostgresStore
) -> None:
    """Local mode: 1,000 earlier due copies of a skip job left by dead instances (same job,
    tasks of their own) do not block the live instance's copy, and the claim's
    earlier-sibling probe finds its group (job, scope, task) in the index alone, without
    walking the other copies."""
    items = [
        new_occurrence(
            f"dead{n}", job="tick", task=f"tick@{n}", due_at=LONG_AGO, overlap=Overlap.SKIP
        )
        for n in range(1000)
    ]
    live = new_occurrence(
        "live",
        job="tick",
        task="tick@live",
        due_at=LONG_AGO + timedelta(seconds=1),
        overlap=Overlap.SKIP,
    )
    assert await store.occurrence_insert_many([*items, live]) == 1001
    sql_ = Queries(store.schema)
    params = {
        "now": None,
        "tasks": ["tick@live"],
        "limit": 10,
        "instance": "i1",
        "ttl": TTL,
        "allow_only": False,
    }
    plan = await asyncio.to_thread(_plan, postgres_dsn, sql_.claim, params)
    (probe,) = [line for line in plan.splitlines() if "using occurrences_group_siblings" in line]
    assert "Index Only Scan" in probe, plan
    index_cond = plan.split(probe, 1)[1].splitlines()[1]
    assert "(task = o.task)" in index_cond, plan
    assert [o.dedupe_key for o in await claim(store, tasks=["tick@live"])] == ["live"]


def _indexes(dsn: str, schema: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
            (schema, "occurrences"),
        ).fetchall()
    return {row[0] for row in rows}


def _old_schema(dsn: str, schema: str, version: int, *rows: tuple[str, str, str]) -> None:
    """Schema ``schema`` at migration ``version`` holding ``rows`` written with that
    version's columns, each (id and dedupe key, state, overlap): job 'job', task 'task',
    planned and due LONG_AGO; a running one is held by 'i1' since LONG_AGO (attempt 1,
    token 1) with a lease that expired at LONG_AGO + TTL."""
    name = sql.Identifier(schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(name))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.schema_version (version integer PRIMARY KEY, "
                "applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            ).format(name)
        )
        for number in range(1, version + 1):
            for statement in MIGRATIONS[number - 1]:
                conn.execute(sql.SQL(statement).format(schema=name))
            conn.execute(
                sql.SQL("INSERT INTO {}.schema_version (version) VALUES (%s)").format(name),
                (number,),
            )
        for occ_id, state, overlap in rows:
            running = state == "running"
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.occurrences (id, dedupe_key, job, task, scope, plan_time, "
                    "due_at, kind, state, attempt, max_attempts, overlap, payload, "
                    "instance_id, lease_expires_at, fencing_token, created_at, started_at) "
                    "VALUES (%(id)s, %(id)s, 'job', 'task', '', %(t)s, %(t)s, 'schedule', "
                    "%(state)s, %(attempt)s, 1, %(overlap)s, '{{\"n\": 1}}', %(inst)s, "
                    "%(lease)s, %(attempt)s, %(t)s, %(started)s)"
                ).format(name),
                {
                    "id": occ_id,
                    "t": LONG_AGO,
                    "state": state,
                    "attempt": int(running),
                    "overlap": overlap,
                    "inst": "i1" if running else None,
                    "lease": LONG_AGO + TTL if running else None,
                    "started": LONG_AGO if running else None,
                },
            )


async def test_migration_3_keeps_rows_and_trims_the_indexes(
    postgres_dsn: str, postgres_url: str
) -> None:
    """A schema at version 2 migrates to 3 keeping its rows: renewals touch no index
    (no lease index) and enqueued tasks get no sibling entry; overlap rules still hold."""
    schema = parse_url(postgres_url).schema
    _old_schema(postgres_dsn, schema, 2, ("a", "scheduled", "skip"))
    assert "occurrences_lease" in _indexes(postgres_dsn, schema)
    store = PostgresStore(postgres_url)
    try:
        await store.migrate()
        assert _versions(postgres_dsn, schema) == list(range(1, len(MIGRATIONS) + 1))
        indexes = _indexes(postgres_dsn, schema)
        assert "occurrences_lease" not in indexes and "occurrences_siblings" not in indexes
        assert "occurrences_group_siblings" in indexes  # 3's job_siblings, as of migration 5
        later, _ = await store.occurrence_insert(
            new_occurrence("b", due_at=LONG_AGO + timedelta(seconds=1), overlap=Overlap.SKIP)
        )
        assert [o.id for o in await claim(store)] == ["a"]
        waiting = await store.occurrence_get(later.id)  # behind "a", claimed late: waits
        assert waiting is not None and waiting.state == State.SCHEDULED
    finally:
        await store.close()


async def test_a_schema_at_version_1_migrates_keeping_its_rows(
    postgres_dsn: str, postgres_url: str
) -> None:
    """A schema from before the election tables gains them, keeping its occurrences."""
    schema = parse_url(postgres_url).schema
    _old_schema(postgres_dsn, schema, 1, ("old", "scheduled", "allow"))
    store = PostgresStore(postgres_url)
    await store.migrate()
    assert _versions(postgres_dsn, schema) == list(range(1, len(MIGRATIONS) + 1))
    old = await store.occurrence_get("old")
    assert old is not None
    assert (old.state, old.due_at, old.payload) == (State.SCHEDULED, LONG_AGO, {"n": 1})
    lease = await store.leader_attempt_elect("main", "a", TTL)
    assert lease is not None and lease.epoch == 1
    await store.close()


async def test_a_schema_at_version_3_gains_crash_counts_keeping_its_rows(
    postgres_dsn: str, postgres_url: str
) -> None:
    """Migration 4 adds crashes (0) and max_crashes (3) to the rows there; an old running
    row is then reaped by the new rule (scheduled again, not dead), and every insert path
    stores its own max_crashes."""
    schema = parse_url(postgres_url).schema
    _old_schema(postgres_dsn, schema, 3, ("old", "running", "allow"), ("done", "dead", "allow"))
    store = PostgresStore(postgres_url)
    try:
        await store.migrate()
        assert _versions(postgres_dsn, schema) == list(range(1, len(MIGRATIONS) + 1))
        old, done = await store.occurrence_get("old"), await store.occurrence_get("done")
        assert old is not None and done is not None
        assert (old.state, old.attempt, old.instance_id, old.payload) == (
            State.RUNNING,
            1,
            "i1",
            {"n": 1},
        )
        assert {(o.crashes, o.max_crashes) for o in (old, done)} == {(0, 3)}
        (reaped,) = await store.occurrence_reap()
        assert (reaped.id, reaped.state, reaped.attempt, reaped.crashes) == (
            "old",
            State.SCHEDULED,
            0,
            1,
        )
        assert reaped.due_at == LONG_AGO
        await store.occurrence_insert(new_occurrence("one", max_crashes=0))
        await store.occurrence_insert_many([new_occurrence(f"m{n}", max_crashes=n) for n in (1, 2)])
        await store.occurrence_insert_now(new_occurrence("now", max_crashes=5))
        stored = {o.dedupe_key: o.max_crashes for o in await store.occurrence_list()}
        assert stored == {"old": 3, "done": 3, "one": 0, "m1": 1, "m2": 2, "now": 5}
    finally:
        await store.close()


async def test_a_schema_at_version_7_gains_the_cancel_flag_keeping_its_rows(
    postgres_dsn: str, postgres_url: str
) -> None:
    """Migration 8 adds cancel_requested (false) to the rows there; a scheduled old row
    is then cancelled, and an old running row's runner learns of its cancel at renewal."""
    schema = parse_url(postgres_url).schema
    rows = (("old", "running", "allow"), ("sched", "scheduled", "allow"))
    _old_schema(postgres_dsn, schema, 7, *rows)
    store = checked(PostgresStore(postgres_url))
    try:
        await store.migrate()
        assert _versions(postgres_dsn, schema) == list(range(1, len(MIGRATIONS) + 1))
        stored = {o.id: o for o in await store.occurrence_list()}
        assert not stored["old"].cancel_requested and not stored["sched"].cancel_requested
        cancelled = await store.occurrence_cancel("sched")
        assert cancelled is not None and cancelled[0].state is State.DEAD
        requested = await store.occurrence_cancel("old")
        assert requested is not None and requested[0].state is State.RUNNING
        renewed = await store.lease_renew("i1", [Claimed("old", 1)], TTL)
        assert renewed == {"old"} and renewed.cancel_requested == {"old"}
    finally:
        await store.close()


async def test_a_schema_at_version_4_gets_the_overlap_group_index_keeping_its_rows(
    postgres_dsn: str, postgres_url: str
) -> None:
    """Migration 5 swaps the (job, scope) siblings index for a (job, scope, task) one,
    keeping the rows; the overlap rule then groups by (job, scope, task)."""
    schema = parse_url(postgres_url).schema
    _old_schema(postgres_dsn, schema, 4, ("a", "scheduled", "skip"))
    assert "occurrences_job_siblings" in _indexes(postgres_dsn, schema)
    store = PostgresStore(postgres_url)
    try:
        await store.migrate()
        assert _versions(postgres_dsn, schema) == list(range(1, len(MIGRATIONS) + 1))
        indexes = _indexes(postgres_dsn, schema)
        assert "occurrences_job_siblings" not in indexes
        assert "occurrences_group_siblings" in indexes
        other_task, same_task = await insert(
            store,
            new_occurrence(
                "b", task="other", due_at=LONG_AGO + timedelta(seconds=1), overlap=Overlap.SKIP
            ),
            new_occurrence("c", due_at=LONG_AGO + timedelta(seconds=2), overlap=Overlap.SKIP),
        )
        claimed = await claim(store, tasks=["task", "other"])
        assert [o.id for o in claimed] == ["a", other_task.id]
        waiting = await store.occurrence_get(same_task.id)  # behind "a", claimed late: waits
        assert waiting is not None and waiting.state == State.SCHEDULED
    finally:
        await store.close()


async def test_a_schema_at_version_5_enters_its_cursors_in_the_planning_index(
    postgres_dsn: str, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 6 enters every cursor there in the planning index, in batches: a planned
    one due again at its last plan time (the planner re-plans from there), one never
    planned at the store's now, each with its stream's slot; counts and plan times stay,
    and there is no partition lease yet."""
    schema = parse_url(postgres_url).schema
    _old_schema(postgres_dsn, schema, 5)
    cursors = [
        (f"job{n}", f"scope{n % 3}", LONG_AGO + timedelta(minutes=n) if n % 4 else None, n)
        for n in range(7)
    ]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for cursor in cursors:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.plan_cursors (job, scope, last_plan_time, planned_count) "
                    "VALUES (%s, %s, %s, %s)"
                ).format(sql.Identifier(schema)),
                cursor,
            )
    monkeypatch.setattr(migrations, "CURSOR_BATCH", 3)  # 7 cursors: three batches
    now = LONG_AGO + timedelta(days=1)
    store = PostgresStore(postgres_url, clock=FakeClock(now))
    try:
        await store.migrate()
        assert _versions(postgres_dsn, schema) == list(range(1, len(MIGRATIONS) + 1))
        for job, scope, last, count in cursors:
            expected = PlanCursor(job, scope, last, count, last if last is not None else now)
            assert await store.plan_cursor_get(job, scope) == expected
        assert len((await store.plan_due(now, 100)).streams) == len(cursors)
        for job, scope, _, _ in cursors:
            slot = stream_slot(job, scope)
            found = (await store.plan_due(now, 100, [(slot, slot + 1)])).streams
            assert (job, scope) in {(s.cursor.job, s.cursor.scope) for s in found}
            assert all(stream_slot(s.cursor.job, s.cursor.scope) == slot for s in found)
        assert await store.partition_list() == []
    finally:
        await store.close()


async def test_a_cursor_an_older_version_writes_enters_the_index_when_ensured(
    postgres_dsn: str, store: PostgresStore
) -> None:
    """A cursor written as version 5 wrote them (during a rolling upgrade: no slot, no
    index entry) is entered by plan_cursor_ensure, revive or not: its slot and ``at``,
    its plan time and count kept; ensuring it again changes nothing."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.plan_cursors (job, scope, last_plan_time, planned_count) "
                "VALUES ('old', 'x', %s, 4)"
            ).format(sql.Identifier(store.schema)),
            (LONG_AGO,),
        )
    at = LONG_AGO + timedelta(hours=1)
    assert await store.plan_cursor_ensure([("old", "x"), ("new", "")], at) == 2
    assert await store.plan_cursor_get("old", "x") == PlanCursor("old", "x", LONG_AGO, 4, at)
    slot = stream_slot("old", "x")
    batch = await store.plan_due(at, 10, [(slot, slot + 1)])
    assert [(s.cursor.job, s.cursor.scope) for s in batch.streams] == [("old", "x")]
    assert await store.plan_cursor_ensure([("old", "x"), ("new", "")], at, revive=True) == 0


def test_usable_from_several_event_loops_and_threads(postgres_dsn: str, postgres_url: str) -> None:
    """asyncio.run calls in turn and from threads share one store; close leaves no connection."""
    app_name = f"soloist-test-{random.getrandbits(48):x}"
    store = PostgresStore(f"{postgres_url}&application_name={app_name}")
    asyncio.run(store.migrate())
    asyncio.run(store.occurrence_insert(new_occurrence("first")))
    errors: list[BaseException] = []

    def insert_from_thread(n: int) -> None:
        try:
            asyncio.run(store.occurrence_insert(new_occurrence(f"k{n}")))
        except BaseException as exc:  # reported to the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=insert_from_thread, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert len(asyncio.run(store.occurrence_list())) == 5
    asyncio.run(store.close())

    def connections() -> int:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            row = conn.execute(query, (app_name,)).fetchone()
        return int(row[0]) if row else -1

    deadline = time.monotonic() + 5
    while connections() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert connections() == 0


# -- the database clock ---------------------------------------------------------------------
async def test_the_database_clock_decides_when_now_is_none(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no clock injected and now=None, due-ness and leases follow the database's clock,
    even when this process's clock runs an hour fast."""
    skew = timedelta(hours=1)
    real_now = SystemClock.now
    monkeypatch.setattr(SystemClock, "now", lambda self: real_now(self) + skew)
    db_now = await store.now()
    assert abs(db_now - (SystemClock().now() - skew)) < timedelta(minutes=1)
    soon = await store.occurrence_insert(new_occurrence("soon", due_at=db_now + skew / 2))
    due = await store.occurrence_insert(new_occurrence("due", due_at=db_now - timedelta(seconds=1)))
    before = await store.now()
    claimed = await claim(store, ttl=skew / 2)
    after = await store.now()
    assert [o.id for o in claimed] == [due[0].id]  # "soon" is due only on the fast clock
    (running,) = claimed
    assert running.started_at is not None and before <= running.started_at <= after
    assert running.lease_expires_at == running.started_at + skew / 2
    assert await store.occurrence_reap() == []  # the lease expired only on the fast clock
    assert await store.occurrence_next_due(["task"]) == soon[0].due_at


# -- claims ---------------------------------------------------------------------------------
async def test_processes_racing_to_claim_take_each_row_once(
    store: PostgresStore, postgres_url: str
) -> None:
    """Three OS processes claiming 300 due rows: every row is claimed exactly once."""
    items = [new_occurrence(f"k{n}", due_at=LONG_AGO + timedelta(seconds=n)) for n in range(300)]
    assert await store.plan_advance(PlanAdvance("bulk", "", None, LONG_AGO, 300, items))
    expected = {occ.id for occ in await store.occurrence_list(limit=1000)}
    claimed = race_claimers(postgres_url, processes=3, batch=7)
    assert len(claimed) == len(set(claimed)) == 300
    assert set(claimed) == expected
    rows = await store.occurrence_list(limit=1000)
    assert {(o.state, o.attempt, o.fencing_token) for o in rows} == {(State.RUNNING, 1, 1)}


async def test_batches_are_one_statement_each(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 500-row claim, and renewing and completing those 500, each send one statement
    (the claim also sets its planner setting, in the same round trip)."""
    items = [new_occurrence(f"k{n}", due_at=LONG_AGO + timedelta(seconds=n)) for n in range(1000)]
    await store.plan_advance(PlanAdvance("bulk", "", None, LONG_AGO, 1000, items))
    await store.occurrence_get("warm-up")  # the pool is open before counting starts
    sent: list[str] = []
    execute = psycopg.AsyncCursor.execute

    async def counting(self: psycopg.AsyncCursor[Any], query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(str(query))
        return await execute(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", counting)
    batch = await claim(store, limit=500)
    assert (sent[0], sent[-1]) == (ORDERED_WALK, ORDERED_WALK_END)
    del sent[0], sent[-1]
    assert len(batch) == 500 and len(sent) == 1
    assert [o.due_at for o in batch] == [LONG_AGO + timedelta(seconds=n) for n in range(500)]
    held = [Claimed(o.id, o.fencing_token) for o in batch]
    assert len(await store.lease_renew("i1", held, TTL)) == 500 and len(sent) == 2
    outcomes = [Outcome(o.id, o.fencing_token, State.SUCCEEDED) for o in batch]
    assert len(await store.occurrence_complete("i1", outcomes)) == 500 and len(sent) == 3


async def test_insert_many_is_one_statement(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 5,000-row insert_many sends one statement and reports the rows it created."""
    await store.occurrence_insert_many([new_occurrence("k00000", due_at=LONG_AGO)])
    sent: list[str] = []
    execute = psycopg.AsyncCursor.execute

    async def counting(self: psycopg.AsyncCursor[Any], query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(str(query))
        return await execute(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", counting)
    items = [new_occurrence(f"k{n:05}", due_at=LONG_AGO) for n in range(5000)]
    assert await store.occurrence_insert_many(items) == 4999
    assert len(sent) == 1


async def test_racing_bulk_inserts_in_opposite_orders_do_not_deadlock(
    postgres_url: str, store: PostgresStore
) -> None:
    """Eight handles inserting the same 2,000 keys, half in reverse order: no deadlock, each
    key created once."""
    handles = [store] + [PostgresStore(postgres_url) for _ in range(7)]
    items = [new_occurrence(f"k{n:04}", due_at=LONG_AGO) for n in range(2000)]
    try:
        counts = await asyncio.wait_for(
            asyncio.gather(
                *(
                    handle.occurrence_insert_many(items[:: 1 if n % 2 else -1])
                    for n, handle in enumerate(handles)
                )
            ),
            timeout=60,
        )
    finally:
        for handle in handles[1:]:
            await handle.close()
    assert sum(counts) == 2000
    assert len(await store.occurrence_list(limit=5000)) == 2000


# -- leader election on the database clock --------------------------------------------------
async def test_leases_follow_the_database_clock(
    store: PostgresStore, other: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no clock injected, terms start and end on the database's clock, even when this
    process's clock runs an hour fast."""
    real_now = SystemClock.now
    monkeypatch.setattr(SystemClock, "now", lambda self: real_now(self) + timedelta(hours=1))
    ttl = timedelta(minutes=30)
    before = await store.now()
    lease = await store.leader_attempt_elect("main", "a", ttl)
    after = await store.now()
    assert lease is not None and before <= lease.elected_at <= after
    assert lease.expires_at == lease.elected_at + ttl
    assert await other.leader_attempt_elect("main", "b", ttl) is None  # not expired on the db
    assert await other.leader_get("main") == lease
    assert await store.leader_resign("main", "a", lease.epoch) is True
    taken = await other.leader_attempt_elect("main", "b", ttl)
    assert taken is not None and taken.epoch == lease.epoch + 1


async def test_concurrent_elects_from_many_handles_have_one_winner(
    postgres_url: str, store: PostgresStore
) -> None:
    """Many handles (own pools) electing on the database clock at once: exactly one wins."""
    handles = [store] + [PostgresStore(postgres_url) for _ in range(5)]
    try:
        for handle in handles:
            await handle.occurrence_get("warm-up")
        ttl = timedelta(minutes=5)
        leases = await asyncio.gather(
            *(
                handles[n % len(handles)].leader_attempt_elect("main", f"c{n}", ttl)
                for n in range(30)
            )
        )
    finally:
        for handle in handles[1:]:
            await handle.close()
    won = [lease for lease in leases if lease is not None]
    assert len(won) == 1 and won[0].epoch == 1


async def test_concurrent_claimers_never_overlap_a_skip_or_queue_job(
    postgres_url: str, store: PostgresStore
) -> None:
    """Nine claimers on three handles: no skip/queue (job, scope) ever runs twice at once,
    and every queued occurrence runs exactly once."""
    jobs = {f"q{n}": Overlap.QUEUE for n in range(6)} | {f"s{n}": Overlap.SKIP for n in range(6)}
    items = [
        new_occurrence(f"{job}:{n}", job=job, due_at=LONG_AGO + timedelta(seconds=n), overlap=o)
        for job, o in jobs.items()
        for n in range(6)
    ]
    await store.plan_advance(PlanAdvance("bulk", "", None, LONG_AGO, len(items), items))
    handles = [store] + [PostgresStore(postgres_url) for _ in range(2)]
    for handle in handles:
        await handle.occurrence_get("warm-up")  # pools open before the race starts
    go = asyncio.Event()
    running: Counter[str] = Counter()
    violations: list[str] = []
    finished: list[str] = []

    async def claimer(n: int) -> None:
        handle = handles[n % len(handles)]
        await go.wait()
        idle = 0
        while idle < 5:
            batch = await claim(handle, instance=f"c{n}", limit=2)
            idle = 0 if batch else idle + 1
            for occ in batch:
                running[occ.job] += 1
                if running[occ.job] > 1:
                    violations.append(occ.job)
            # Hold the runs long enough for the other claimers to try their luck.
            await asyncio.sleep(random.uniform(0.005, 0.015) if batch else 0.01)
            for occ in batch:
                running[occ.job] -= 1  # before the completion: no false alarm
            done = [Outcome(o.id, o.fencing_token, State.SUCCEEDED) for o in batch]
            if done:
                assert await handle.occurrence_complete(f"c{n}", done) == {o.id for o in batch}
                finished.extend(o.job for o in batch)

    tasks = [asyncio.create_task(claimer(n)) for n in range(9)]
    go.set()
    await asyncio.gather(*tasks)
    for handle in handles[1:]:
        await handle.close()
    assert violations == []
    counts = Counter(finished)
    assert all(counts[job] == 6 for job in jobs if job.startswith("q"))
    rows = await store.occurrence_list(limit=1000)
    assert {o.state for o in rows} <= {State.SUCCEEDED, State.SKIPPED}
    assert all(o.attempt == 1 for o in rows if o.state == State.SUCCEEDED)


# -- the planning index and partitions ------------------------------------------------------
def _explain(
    dsn: str, query: str, params: dict[str, Any], setting: Sequence[str] = ()
) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) of ``query`` (after ``setting``, as the
    driver sends it): its top node and totals."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in setting:
            conn.execute(statement)
        row = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {query}", params).fetchone()
    assert row is not None
    explained: dict[str, Any] = row[0][0]
    return explained


def _scans(node: dict[str, Any]) -> set[tuple[str, str, str | None]]:
    """(node type, table, index) of every scan of a table in the plan under ``node``."""
    found = set()
    if "Relation Name" in node:
        found.add((node["Node Type"], node["Relation Name"], node.get("Index Name")))
    for child in node.get("Plans", []):
        found |= _scans(child)
    return found


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of the plan under ``node``, itself first."""
    return [node, *(n for child in node.get("Plans", []) for n in _nodes(child))]


async def test_plan_due_reads_only_what_the_due_streams_cost(
    postgres_dsn: str, store: PostgresStore
) -> None:
    """20,000 cursors of 20,000 jobs, 10 of them due, no statistics: plan_due walks the
    planning index from its start and looks each due stream's job up by name, with or
    without slots: no sequential scan, a few dozen buffers (a scan of either table reads
    hundreds)."""
    await store.job_upsert([JobRecord(f"s{n:05}", "task", {}) for n in range(20_000)])
    far, due = LONG_AGO + timedelta(days=1), LONG_AGO + timedelta(hours=1)
    steps = [
        PlanAdvance(f"s{n:05}", "", None, LONG_AGO, 0, (), (due if n % 2000 == 7 else far))
        for n in range(20_000)
    ]
    for start in range(0, len(steps), 5000):
        assert all(await store.plan_advance_many(steps[start : start + 5000]))
    statements = Planning(store.schema)
    params: dict[str, Any] = {"before": due, "limit": 500}
    everywhere = {**params, "slots": codec.slot_mask([(0, SLOTS)])}
    for query, values in ((statements.due, params), (statements.due_in_slots, everywhere)):
        explained = await asyncio.to_thread(_explain, postgres_dsn, query, values, INDEX_WALK)
        plan = explained["Plan"]
        scans = _scans(plan)
        assert not [scan for scan in scans if scan[0] == "Seq Scan"], scans
        assert ("Index Scan", "plan_cursors", "plan_cursors_due") in scans, scans
        assert ("Index Scan", "jobs", "jobs_pkey") in scans, scans
        assert plan["Actual Rows"] == 10
        assert plan["Shared Hit Blocks"] + plan["Shared Read Blocks"] < 100, plan
    batch = await store.plan_due(due, 500)
    assert [s.cursor.job for s in batch.streams] == [f"s{n:05}" for n in range(7, 20_000, 2000)]
    assert all(s.job is not None and s.job.name == s.cursor.job for s in batch.streams)
    assert batch.next_at == far


async def test_a_batch_of_many_streams_due_at_one_instant_reads_only_the_batch(
    postgres_dsn: str, store: PostgresStore
) -> None:
    """20,000 streams due at the same instant (all scopes of one job, or cron-aligned
    schedules): a batch of 500 walks the index in its order (time, job, scope) and stops
    after the batch, without reading and sorting the whole tie group."""
    due = LONG_AGO + timedelta(hours=1)
    steps = [PlanAdvance("fan", f"t{n:05}", None, LONG_AGO, 0, (), due) for n in range(20_000)]
    for start in range(0, len(steps), 5000):
        assert all(await store.plan_advance_many(steps[start : start + 5000]))
    statements = Planning(store.schema)
    params: dict[str, Any] = {"before": due, "limit": 500}
    explained = await asyncio.to_thread(_explain, postgres_dsn, statements.due, params, INDEX_WALK)
    plan = explained["Plan"]
    assert plan["Actual Rows"] == 500
    # The batch is the first 500 entries of the index, read in order: a Limit straight
    # over the index scan, no sort of the 20,000 tied entries below it.
    limits = [n for n in _nodes(plan) if n["Node Type"] == "Limit" and n["Actual Rows"] == 500]
    assert len(limits) == 1, plan
    scan = limits[0]["Plans"][0]
    assert (scan["Node Type"], scan.get("Index Name")) == ("Index Scan", "plan_cursors_due")
    assert scan["Shared Hit Blocks"] + scan["Shared Read Blocks"] < 50, scan
    batch = await store.plan_due(due, 500)
    assert [s.cursor.scope for s in batch.streams] == [f"t{n:05}" for n in range(500)]


async def test_plan_advance_many_is_one_statement(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """500 plan steps, each a cursor and an occurrence, send one statement; a batch naming
    a stream twice sends one statement per round, in one pipeline, and the second step of
    the stream sees the first one's write."""
    await store.occurrence_get("warm-up")  # the pool is open before counting starts
    sent: list[str] = []
    execute = psycopg.AsyncCursor.execute

    async def counting(self: psycopg.AsyncCursor[Any], query: Any, *args: Any, **kw: Any) -> Any:
        sent.append(str(query))
        return await execute(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", counting)
    later = LONG_AGO + timedelta(minutes=1)
    steps = [
        PlanAdvance(f"s{n}", "", None, LONG_AGO, 1, [new_occurrence(f"k{n}", job=f"s{n}")], later)
        for n in range(500)
    ]
    assert await store.plan_advance_many(steps) == [True] * 500
    assert len(sent) == 1
    assert len(await store.occurrence_list(limit=1000)) == 500
    sent.clear()
    twice = [
        PlanAdvance("s9", "", LONG_AGO, later, 0),
        PlanAdvance("s1", "", LONG_AGO, later, 0),
        PlanAdvance("s9", "", later, later + timedelta(minutes=1), 2),
        PlanAdvance("s9", "", later, later, 0),  # stale by then
    ]
    assert await store.plan_advance_many(twice) == [True, True, True, False]
    assert len(sent) == 3
    last = later + timedelta(minutes=1)
    assert await store.plan_cursor_get("s9", "") == PlanCursor("s9", "", last, 3, None)


async def test_partition_leases_and_fences_follow_the_database_clock(
    store: PostgresStore, other: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no clock injected, partition leases start and end on the database's clock,
    and a fenced plan step checks its lease there, even when this process's clock runs an
    hour fast."""
    real_now = SystemClock.now
    monkeypatch.setattr(SystemClock, "now", lambda self: real_now(self) + timedelta(hours=1))
    ttl = timedelta(minutes=30)
    before = await store.now()
    (lease,) = await store.partition_sync("a", [7], ttl)
    after = await store.now()
    assert (lease.partition, lease.holder, lease.epoch) == (7, "a", 1)
    assert before + ttl <= lease.expires_at <= after + ttl
    assert await other.partition_sync("b", [7], ttl) == [lease]  # not expired on the database
    assert await other.plan_advance(PlanAdvance("s", "", None, LONG_AGO, 0, fence=PlanFence(7, 1)))
    assert await store.partition_sync("a", [], ttl) == []  # released at once
    (taken,) = await other.partition_sync("b", [7], ttl)
    assert (taken.holder, taken.epoch) == ("b", 2)
    later = LONG_AGO + timedelta(minutes=1)
    stale = PlanAdvance("s", "", LONG_AGO, later, 0, fence=PlanFence(7, 1))
    assert not await store.plan_advance(stale)
    assert await other.plan_advance(PlanAdvance("s", "", LONG_AGO, later, 0, fence=PlanFence(7, 2)))


async def test_many_handles_syncing_partitions_at_once_do_not_deadlock(
    postgres_url: str, store: PostgresStore
) -> None:
    """Eight handles (own pools) syncing overlapping, changing sets of partitions, half of
    them listed in reverse order, while planning fenced steps: no deadlock and no error;
    then each live lease is held by an instance that wanted it last, and a late instance
    takes exactly the partitions nobody holds."""
    handles = [store] + [PostgresStore(postgres_url) for _ in range(7)]
    wanted: dict[int, list[int]] = {}

    async def instance(n: int) -> None:
        for turn in range(6):
            want = wanted[n] = [p for p in range(32) if (p + n + turn) % 3]
            leases = await handles[n].partition_sync(f"i{n}", want[:: 1 if n % 2 else -1], TTL)
            fences = [PlanFence(x.partition, x.epoch) for x in leases if x.holder == f"i{n}"]
            steps = [
                PlanAdvance(f"i{n}-{turn}-{f.partition}", "", None, LONG_AGO, 0, fence=f)
                for f in fences
            ]
            if steps:
                assert all(await handles[n].plan_advance_many(steps))

    try:
        await asyncio.wait_for(asyncio.gather(*(instance(n) for n in range(8))), timeout=60)
        leases = await store.partition_list()
    finally:
        for handle in handles[1:]:
            await handle.close()
    assert all(x.partition in wanted[int(x.holder[1:])] for x in leases)
    held = {x.partition: x for x in leases}
    assert sorted(held) == [x.partition for x in leases]  # one lease per partition
    late = await store.partition_sync("late", range(32), TTL)  # takes the free ones only
    assert [x.partition for x in late] == list(range(32))
    assert all(x == held[x.partition] for x in late if x.partition in held)
    assert all(x.holder == "late" for x in late if x.partition not in held)


# -- LISTEN/NOTIFY --------------------------------------------------------------------------
async def _insert_due(other: PostgresStore) -> None:
    await other.occurrence_insert(new_occurrence("k", due_at=await other.now()))


async def _insert_many_due(other: PostgresStore) -> None:
    now = await other.now()
    items = [new_occurrence(f"k{n}", due_at=now) for n in range(100)]
    assert await other.occurrence_insert_many(items) == 100


async def _plan_due(other: PostgresStore) -> None:
    now = await other.now()
    await other.plan_advance(
        PlanAdvance("job", "", None, now, 1, [new_occurrence("k", due_at=now)])
    )


async def _running(other: PostgresStore) -> Claimed:
    await other.occurrence_insert(new_occurrence("r", due_at=LONG_AGO, max_attempts=2))
    (occ,) = await claim(other, instance="w")
    return Claimed(occ.id, occ.fencing_token)


async def _release(other: PostgresStore, held: Claimed | None) -> None:
    assert held is not None and await other.lease_release("w", [held]) == {held.id}


async def _retry(other: PostgresStore, held: Claimed | None) -> None:
    assert held is not None
    failed = Outcome(held.id, held.fencing_token, State.FAILED, "handler_error")
    assert await other.occurrence_complete("w", [failed]) == {held.id}


async def _reap(other: PostgresStore, held: Claimed | None) -> None:
    assert held is not None
    later = await other.now() + 2 * TTL
    assert [o.id for o in await other.occurrence_reap(now=later)] == [held.id]


Cause = Callable[[PostgresStore, Claimed | None], Awaitable[None]]


async def _add_schedule(other: PostgresStore) -> None:
    await other.job_add(JobRecord(name="dyn", task="task", schedule={}, dynamic=True))


CAUSES: dict[str, tuple[bool, Cause]] = {
    "schedule_added": (False, lambda other, _: _add_schedule(other)),
    "insert": (False, lambda other, _: _insert_due(other)),
    "insert_many": (False, lambda other, _: _insert_many_due(other)),
    "plan_advance": (False, lambda other, _: _plan_due(other)),
    "release": (True, _release),
    "retry": (True, _retry),
    "reap": (True, _reap),
}


@pytest.mark.parametrize("cause", list(CAUSES))
async def test_work_made_claimable_elsewhere_wakes_a_listener(
    store: PostgresStore, other: PostgresStore, cause: str
) -> None:
    """work_wait returns True soon after another instance commits due work: woken by the
    notification (a wait that times out returns False, after 30 s here). How soon is the
    benchmarks' measure (p99 about 2 ms); 5 s leaves room for a loaded machine."""
    needs_running, act = CAUSES[cause]
    held = await _running(other) if needs_running else None
    await store.listen()
    assert await store.work_wait(0.05) is False  # nothing pending before the cause
    waiter = asyncio.create_task(store.work_wait(30))
    started = time.monotonic()
    await act(other, held)
    assert await waiter is True
    assert time.monotonic() - started < 5


async def test_work_wait_times_out_when_nothing_becomes_due(
    store: PostgresStore, other: PostgresStore
) -> None:
    """No wake-up for far-future work (single or bulk) or a success: False once the
    timeout has passed."""
    await store.listen()
    held = await _running(other)  # inserting "r" notifies: it is due
    assert await store.work_wait(5) is True
    now = await other.now()
    await other.occurrence_insert(new_occurrence("later", due_at=now + timedelta(hours=1)))
    later = [new_occurrence(f"later{n}", due_at=now + timedelta(hours=1)) for n in range(5)]
    assert await other.occurrence_insert_many(later) == 5
    done = Outcome(held.id, held.fencing_token, State.SUCCEEDED)
    assert await other.occurrence_complete("w", [done]) == {held.id}
    started = time.monotonic()
    assert await store.work_wait(0.3) is False
    assert 0.3 <= time.monotonic() - started < 5  # its timeout, not earlier; 5: a loaded box


async def test_a_new_listener_reports_possible_missed_work(store: PostgresStore) -> None:
    """The first wait (no listener yet) returns True at once: earlier wake-ups were missed
    (not after its 30 s timeout; 5 s leaves room for a loaded machine)."""
    started = time.monotonic()
    assert await store.work_wait(30) is True
    assert time.monotonic() - started < 5
    assert await store.work_wait(0.05) is False


async def test_the_ordered_walk_setting_ends_with_its_statement(store: PostgresStore) -> None:
    """After claims and next_due, a failing claim too, the store's pooled connection has
    bitmap scans on again: only those statements run without them."""
    await store.occurrence_insert(new_occurrence("k", due_at=LONG_AGO))
    assert len(await claim(store)) == 1
    assert await store.occurrence_next_due(["task"]) is None
    await store.occurrence_insert(new_occurrence("k2", due_at=LONG_AGO))
    with pytest.raises(StoreError, match="out of range"):  # the lease expiry overflows
        await store.occurrence_claim("i1", ["task"], 10, timedelta(days=999_999_999))
    # The store's own plumbing, to read its sessions' setting (one connection: calls in turn).
    row = await store._row("SHOW enable_bitmapscan", {})
    assert row == ("on",)


async def test_pooled_connections_the_server_closed_are_passed_over(
    postgres_dsn: str, postgres_url: str
) -> None:
    """Every idle pooled connection terminated (pg_terminate_backend: an administrator, a
    failover, an idle timeout): the next calls each run on a live connection instead of
    failing on a dead one they never sent anything on."""
    name = f"pooled_{random.getrandbits(48):012x}"
    opened = PostgresStore(f"{postgres_url}&application_name={name}")
    await opened.migrate()
    try:
        # Fill the pool: calls at once, each holding a connection for a moment.
        await asyncio.gather(*(opened._row("SELECT pg_sleep(0.05)", {}) for _ in range(4)))
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            pids = [
                row[0]
                for row in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,)
                )
            ]
            assert len(pids) >= 2, pids
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            deadline = time.monotonic() + 10
            while admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
            ).fetchone() != (0,):
                assert time.monotonic() < deadline, "the backends did not end"
                time.sleep(0.01)
        for _ in range(len(pids) + 1):  # each pooled connection in turn, and one more
            assert isinstance(await opened.now(), datetime)
    finally:
        await opened.close()


async def test_live_pooled_connections_are_kept_in_a_process_with_many_files(
    postgres_url: str,
) -> None:
    """The look for a closed pooled connection works for any descriptor number (select()
    refuses those from 1024 on): with over a thousand files open, calls keep their live
    connections instead of replacing them every time."""
    resource = pytest.importorskip("resource")  # (POSIX: where descriptors go that high)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"the descriptor limit {hard} is below {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    opened = PostgresStore(postgres_url)
    try:
        await opened.migrate()
        for _ in range(20):
            assert isinstance(await opened.now(), datetime)
        pool = await opened._conns.pool()
        assert min(conn.pgconn.socket for conn in pool._pool) >= 1024  # the case in hand
        stats = pool.get_stats()
        assert stats.get("returns_bad", 0) == 0, stats
        assert stats.get("connections_num", 0) <= 4, stats
    finally:
        await opened.close()
        for fd in held:
            os.close(fd)
        if soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
