"""What only the Redis store promises: URLs and key prefixes, bounded history, scripts
reloaded after a flush, the server's clock, pub/sub wake-ups and errors at the boundary."""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis

from ci import missing
from soloist.context import JobContext
from soloist.errors import ConfigError, StoreDataLostError, StoreError, StoreUnavailableError
from soloist.models import (
    SLOTS,
    Claimed,
    JobRecord,
    Kind,
    Occurrence,
    Outcome,
    Overlap,
    PlanAdvance,
    PlanCursor,
    State,
    stream_slot,
)
from soloist.scheduler import Scheduler
from soloist.stores import open_store
from soloist.stores.base import Store
from soloist.stores.memory import MemoryStore
from soloist.stores.pages import JobQuery
from soloist.stores.redis import SCHEMA_VERSION, RedisStore, parse_url
from soloist.testing.clock import FakeClock
from soloist.testing.conformance import T0, at, claim, new_occurrence
from soloist.testing.conformance.instances import instance_info
from soloist.testing.conformance.processes import race_claimers

LONG_AGO = datetime(2020, 1, 1, tzinfo=timezone.utc)  # due for any real clock
TTL = timedelta(minutes=5)


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    """A migrated store on a fresh prefix, reading the server's clock."""
    opened = RedisStore(redis_url)
    await opened.migrate()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def raw(redis_server: str) -> redis.Redis:
    """A plain client on the test server, to look at the keys behind the store's back."""
    return redis.Redis.from_url(redis_server, decode_responses=True)


def _keys(raw: redis.Redis, store: RedisStore, pattern: str = "*") -> list[str]:
    return sorted(raw.scan_iter(match=f"{{{store.prefix}}}:{pattern}", count=1000))


async def _finish(store: RedisStore, first: int, count: int, now: datetime | None = None) -> None:
    """Insert occurrences ``k<first>``... due at ``now`` (default T0), claim, succeed them."""
    base = now or T0
    items = [new_occurrence(f"k{first + n}", due_at=base) for n in range(count)]
    await store.occurrence_insert_many(items)
    claimed = await claim(store, limit=count, now=base)
    outcomes = [Outcome(o.id, o.fencing_token, State.SUCCEEDED) for o in claimed]
    assert len(await store.occurrence_complete("i1", outcomes, now=base)) == count


# -- URLs -------------------------------------------------------------------------------------
def test_url_defaults_and_options() -> None:
    """The prefix defaults to 'soloist'; options are read; the password is never shown."""
    default = parse_url("redis://localhost")
    assert (default.prefix, default.base, default.channel) == (
        "soloist",
        "{soloist}",
        "{soloist}:wake",
    )
    assert default.history_max == 100_000 and default.history_age == timedelta(days=30)
    target = parse_url(
        "rediss://app:s3cret@cache.example:6380/2?prefix=billing&history_max=50&history_age=2h"
        "&socket_timeout=5"
    )
    assert (target.prefix, target.history_max, target.history_age) == (
        "billing",
        50,
        timedelta(hours=2),
    )
    assert target.socket_timeout == 5.0
    assert target.driver_url == "rediss://app:s3cret@cache.example:6380/2"
    assert "s3cret" not in target.display and "cache.example:6380/2" in target.display
    assert parse_url("redis://h/0?history_max=0&history_age=0").history_age is None


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("redis://h/0?prefix=a{b}", "a{b}"),
        ("redis://h/0?prefix=", "''"),
        ("redis://h/0?prefix=a:b", "a:b"),
        ("redis://h/0?history_max=many", "many"),
        ("redis://h/0?history_max=-1", "-1"),
        ("redis://h/0?history_age=forever", "forever"),
        ("redis://h/0?socket_timeout=0", "'0'"),
        ("redis://h/0?colour=blue", "colour"),
        ("redis://h/0?prefix=a&prefix=b", "prefix"),
        ("redis://h/zero", "zero"),
        ("redis://h:99999/0", "99999"),
        ("redis://u:pw@h/0?nope=1", "nope"),
        ("redis://h/0?decode_responses=false", "decode_responses"),
        ("redis://h/0?protocol=3", "protocol"),
        ("redis://h/0?db=3", "db"),
        ("redis://h/0?ssl_cert_reqs=none", "rediss://"),
        ("rediss://h/0?ssl_cert_reqs=maybe", "maybe"),
        ("rediss://h/0?ssl_ca_certs=", "ssl_ca_certs"),
        ("redis://h/0?health_check_interval=often", "often"),
        ("redis://u:pw@h/0?retry_on_timeout=1&max_connections=lots", "lots"),
        ("redis://h/0?max_connections=-1", "max_connections '-1'"),
        ("redis://h/0?health_check_interval=-1", "health_check_interval '-1'"),
        ("redis://h/0?socket_keepalive=off", "socket_keepalive 'off'"),
        ("redis://h/0?retry_on_timeout=maybe", "maybe"),
    ],
)
def test_bad_urls_are_refused_naming_the_value(url: str, named: str) -> None:
    """A bad option, prefix, database or port raises ConfigError naming it (not the password):
    also values redis-py's own parsers let through to fail later or mean something else
    (a negative count or interval, a flag such as 'off' that it reads as true)."""
    with pytest.raises(ConfigError, match=r"store URL") as info:
        RedisStore(url)
    assert named.strip("'") in str(info.value)
    assert "pw@" not in str(info.value)


def test_redis_py_options_reach_redis_py_and_soloists_do_not() -> None:
    """Options redis-py reads from a URL (timeouts, health checks, TLS) pass through to the
    client as written; prefix and history bounds stay out; an unknown option names what is
    accepted."""
    target = parse_url(
        "rediss://:pw@h:6380/2?prefix=app&history_max=5&ssl_cert_reqs=none"
        "&ssl_ca_certs=/etc/ca.pem&health_check_interval=5&retry_on_timeout=yes"
        "&socket_keepalive=true&socket_timeout=3"
    )
    assert target.driver_url == (
        "rediss://:pw@h:6380/2?ssl_cert_reqs=none&ssl_ca_certs=%2Fetc%2Fca.pem"
        "&health_check_interval=5&retry_on_timeout=yes&socket_keepalive=true"
    )
    assert (target.prefix, target.history_max, target.socket_timeout) == ("app", 5, 3.0)
    store = RedisStore("redis://127.0.0.1/0?prefix=p&health_check_interval=7&max_connections=3")
    pool = store._conns._new_client().connection_pool
    assert pool.connection_kwargs["health_check_interval"] == 7
    assert pool.max_connections == 3
    assert "prefix" not in pool.connection_kwargs
    with pytest.raises(ConfigError, match=r"unknown option 'colour'.*ssl_cert_reqs"):
        parse_url("redis://h/0?colour=blue")


def test_open_store_selects_the_redis_store() -> None:
    """open_store picks RedisStore for redis:// and rediss:// URLs."""
    for url in ("redis://127.0.0.1:6379/0?prefix=x", "rediss://127.0.0.1:6379/0"):
        store = open_store(url)
        assert isinstance(store.driver, RedisStore) and store.url == url


# -- prefixes -----------------------------------------------------------------------------------
async def test_two_apps_on_one_server_do_not_see_each_other(
    make_redis_url: Callable[[], str], raw: redis.Redis
) -> None:
    """Two prefixes on one server: separate occurrences, claims, jobs and leaders."""
    one, two = RedisStore(make_redis_url()), RedisStore(make_redis_url())
    try:
        await one.migrate()
        await two.migrate()
        (mine,) = [o for o, _ in [await one.occurrence_insert(new_occurrence("k"))]]
        theirs, created = await two.occurrence_insert(new_occurrence("k"))
        assert created and theirs.id != mine.id  # the same dedupe key, in another app
        assert [o.id for o in await claim(one, now=T0)] == [mine.id]
        assert [o.id for o in await claim(two, now=T0)] == [theirs.id]
        assert await one.leader_attempt_elect("main", "a", TTL, now=T0) is not None
        assert await two.leader_attempt_elect("main", "b", TTL, now=T0) is not None
        for store in (one, two):
            keys = _keys(raw, store)
            assert keys and all(k.startswith(f"{{{store.prefix}}}:") for k in keys)
        assert not set(_keys(raw, one)) & set(_keys(raw, two))
    finally:
        await one.close()
        await two.close()


# -- history retention ---------------------------------------------------------------------------
async def test_history_is_trimmed_to_its_count(
    make_redis_url: Callable[[], str], raw: redis.Redis
) -> None:
    """history_max=5: only the 5 latest finished occurrences (and their keys) are kept."""
    store = RedisStore(make_redis_url() + "&history_max=5", clock=FakeClock(T0))
    await store.migrate()
    try:
        for round_ in range(4):
            await _finish(store, 5 * round_, 5)
        await store.occurrence_insert(new_occurrence("waiting", due_at=at(60)))
        kept = await store.occurrence_list(limit=100)
        assert len([o for o in kept if o.state is State.SUCCEEDED]) == 5
        assert [o.dedupe_key for o in kept if o.state is State.SCHEDULED] == ["waiting"]
        assert len(_keys(raw, store, "o:*")) == 6
        assert len(_keys(raw, store, "a:*")) == 5
        assert raw.hlen(f"{{{store.prefix}}}:dedupe") == 6
        assert raw.zcard(f"{{{store.prefix}}}:fin:job") == 5  # the job's finished index too
        counts = await store.occurrence_counts(now=T0)
        assert counts.by_job_state == {("job", State.SUCCEEDED): 5, ("job", State.SCHEDULED): 1}
        # A trimmed key is free again; a kept one still deduplicates.
        assert (await store.occurrence_insert(new_occurrence("k0")))[1] is True
        assert (await store.occurrence_insert(new_occurrence("k19")))[1] is False
    finally:
        await store.close()


async def test_history_is_trimmed_by_age(make_redis_url: Callable[[], str]) -> None:
    """history_age=1h: occurrences finished over an hour before a later finish are dropped."""
    clock = FakeClock(T0)
    store = RedisStore(make_redis_url() + "&history_age=1h", clock=clock)
    await store.migrate()
    try:
        await _finish(store, 0, 3, now=T0)
        await _finish(store, 3, 2, now=at(1800))
        assert len(await store.occurrence_list(state=State.SUCCEEDED)) == 5
        await _finish(store, 5, 1, now=at(3601))
        kept = await store.occurrence_list(state=State.SUCCEEDED)
        assert sorted(o.finished_at for o in kept if o.finished_at) == [at(1800)] * 2 + [at(3601)]
    finally:
        await store.close()


async def test_unfinished_occurrences_are_never_trimmed(make_redis_url: Callable[[], str]) -> None:
    """Scheduled, running and retry-pending occurrences stay whatever the bounds."""
    store = RedisStore(make_redis_url() + "&history_max=1&history_age=1s")
    await store.migrate()
    try:
        items = [new_occurrence(f"k{n}", due_at=LONG_AGO, max_attempts=2) for n in range(4)]
        await store.occurrence_insert_many(items)
        first, second, third = await store.occurrence_claim("i1", ["task"], 3, TTL)
        outcomes = [
            Outcome(first.id, 1, State.SUCCEEDED),
            Outcome(second.id, 1, State.FAILED, retry_at=LONG_AGO + timedelta(days=3650)),
        ]
        await store.occurrence_complete("i1", outcomes)
        states = Counter(o.state for o in await store.occurrence_list())
        assert states == {State.SUCCEEDED: 1, State.FAILED: 1, State.RUNNING: 1, State.SCHEDULED: 1}
        assert await store.lease_renew("i1", [Claimed(third.id, 1)], TTL) == {third.id}
    finally:
        await store.close()


# -- scripts, clock, version ------------------------------------------------------------------
async def test_scripts_are_reloaded_after_a_script_flush(
    store: RedisStore, raw: redis.Redis
) -> None:
    """After SCRIPT FLUSH (NOSCRIPT), the next call loads its script again and works."""
    await store.occurrence_insert(new_occurrence("a", due_at=LONG_AGO))
    raw.script_flush()
    (got,) = await store.occurrence_claim("i1", ["task"], 10, TTL)
    assert got.dedupe_key == "a"
    raw.script_flush()
    await store.migrate()  # loads every script again
    assert await store.occurrence_complete("i1", [Outcome(got.id, 1, State.SUCCEEDED)]) == {got.id}


async def test_the_server_clock_decides(store: RedisStore, raw: redis.Redis) -> None:
    """Without a clock or now=, times come from the server's TIME."""
    seconds, micros = raw.time()
    server = datetime.fromtimestamp(seconds + micros / 1e6, tz=timezone.utc)
    now = await store.now()
    assert now.tzinfo is not None and abs((now - server).total_seconds()) < 2
    await store.occurrence_insert(new_occurrence("k", due_at=LONG_AGO))
    (got,) = await store.occurrence_claim("i1", ["task"], 1, TTL)
    assert got.started_at is not None and abs((got.started_at - now).total_seconds()) < 2
    assert got.lease_expires_at == got.started_at + TTL


async def test_enqueue_is_one_script_call_due_by_the_server_clock(
    store: RedisStore, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aenqueue sends one command, the insert script: the server's TIME fixes created_at,
    plan_time and due_at (now + delay) inside it; a key seen before returns the first
    occurrence, unchanged."""
    app = Scheduler(store)

    @app.task(name="t")
    async def t(ctx: JobContext) -> None:
        return None

    await app.aenqueue("t")  # warm-up: the client is made and connected
    sent: list[str] = []
    client = store._client()
    execute = client.execute_command

    async def counting(*args: Any, **kw: Any) -> Any:
        sent.append(str(args[0]))
        return await execute(*args, **kw)

    monkeypatch.setattr(client, "execute_command", counting)
    seconds, micros = raw.time()
    before = datetime.fromtimestamp(int(seconds), tz=timezone.utc) + timedelta(
        microseconds=int(micros)
    )
    occ_id = await app.aenqueue("t", delay="10s")
    assert sent == ["EVALSHA"]
    occ = await store.occurrence_get(occ_id)
    assert occ is not None and occ.kind == Kind.TASK
    assert before <= occ.created_at < before + timedelta(seconds=5)
    assert occ.plan_time == occ.due_at == occ.created_at + timedelta(seconds=10)
    first_id = await app.aenqueue("t", key="once")
    sent.clear()
    assert await app.aenqueue("t", key="once", delay="1h") == first_id
    assert sent == ["EVALSHA"]
    first = await store.occurrence_get(first_id)
    assert first is not None and first.due_at == first.created_at


async def test_a_newer_key_layout_is_refused(store: RedisStore, raw: redis.Redis) -> None:
    """migrate() refuses keys written by a newer soloist, naming both versions."""
    raw.set(f"{{{store.prefix}}}:schema", SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match=f"version {SCHEMA_VERSION + 1}.*upgrade"):
        await store.migrate()


async def test_an_unreachable_server_is_store_unavailable() -> None:
    """A server that does not answer: StoreUnavailableError naming it, not the password."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = RedisStore(f"redis://u:hunter2@127.0.0.1:{port}/0?prefix=gone")
    with pytest.raises(StoreUnavailableError, match=f"127.0.0.1:{port}") as info:
        await store.migrate()
    assert "hunter2" not in str(info.value)
    with pytest.raises(StoreUnavailableError):
        await store.occurrence_claim("i1", ["task"], 1, TTL)
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.now()


# -- the planning index and partitions --------------------------------------------------------
def _script_calls(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the scripts ``store`` runs from now on, in order."""
    calls: list[str] = []
    run = store._conns.run

    async def counted(name: str, args: list[object]) -> object:
        calls.append(name)
        return await run(name, args)

    monkeypatch.setattr(store._conns, "run", counted)
    return calls


async def test_plan_due_over_many_cursors_is_one_script_call_under_the_prefix(
    make_redis_url: Callable[[], str], raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20,000 cursors of which 10 are due: plan_due returns the 10 (earliest first, next_at
    the earliest later one) in one script call, as plan_advance_many writes 10 steps in
    one; the index and the partition leases are keys under the store's prefix."""
    store = RedisStore(make_redis_url(), clock=FakeClock(T0))
    await store.migrate()
    try:
        later = [(f"later-{n}", "") for n in range(19_990)]
        assert await store.plan_cursor_ensure(later, at(3600)) == 19_990
        steps = [PlanAdvance(f"due-{n}", "s", None, at(0), 0, (), at(10 - n)) for n in range(10)]
        calls = _script_calls(store, monkeypatch)
        assert await store.plan_advance_many(steps) == [True] * 10
        batch = await store.plan_due(at(10), 100)
        assert calls == ["plan", "plan"]
        assert [s.cursor.job for s in batch.streams] == [f"due-{n}" for n in range(9, -1, -1)]
        assert batch.streams[0].cursor == PlanCursor("due-9", "s", at(0), 0, at(1))
        assert batch.next_at == at(3600)
        half = [(0, SLOTS // 2)]
        filtered = await store.plan_due(at(10), 100, half)
        expected = [
            f"due-{n}" for n in range(9, -1, -1) if stream_slot(f"due-{n}", "s") < SLOTS // 2
        ]
        assert [s.cursor.job for s in filtered.streams] == expected
        await store.partition_sync("i1", [0, 7], TTL)
        base = store.target.base
        assert raw.zcard(f"{base}:plan") == 20_000
        assert raw.hget(f"{base}:part:7", "holder") == "i1"
        assert raw.zrange(f"{base}:parts", 0, -1) == ["0", "7"]
        assert _keys(raw, store, "lead:*") == []  # apart from the leader leases
        assert raw.exists("plan", "parts", "part:0", ":plan") == 0
    finally:
        await store.close()


async def test_plan_due_stops_after_many_members_of_other_slots(
    make_redis_url: Callable[[], str],
) -> None:
    """Past 5000 members of other slots, plan_due answers what it found so far with next_at
    where it stopped (never after the streams it did not look at, so the caller looks again
    early rather than late); once their own planners moved them on, the stream behind them
    is found."""
    store = RedisStore(make_redis_url(), clock=FakeClock(T0))
    await store.migrate()
    try:
        mine = next(f"mine-{n}" for n in range(100_000) if stream_slot(f"mine-{n}", "") == 0)
        others = [(f"o-{n}", "") for n in range(6000) if stream_slot(f"o-{n}", "") != 0]
        await store.plan_cursor_ensure(others, at(1))
        await store.plan_cursor_ensure([(mine, "")], at(2))
        stopped = await store.plan_due(at(5), 10, [(0, 1)])
        assert stopped.streams == [] and stopped.next_at == at(1)
        moved = [PlanAdvance(job, "", None, None, 0, (), at(100)) for job, _ in others]
        assert all(await store.plan_advance_many(moved))
        found = await store.plan_due(at(5), 10, [(0, 1)])
        assert [s.cursor.job for s in found.streams] == [mine]
        assert found.next_at == at(100)  # the later scan stopped there too: an early wake-up
    finally:
        await store.close()


async def test_migrate_puts_the_cursors_of_an_older_store_in_the_index(
    store: RedisStore, raw: redis.Redis
) -> None:
    """A store of key layout 1 (cursors 'last|count', no index): migrate gives every cursor
    a next plan time equal to its last plan time, in the index, once; new cursors stay."""
    base = store.target.base
    await store.plan_cursor_ensure([("fresh", "")], at(50))
    raw.set(f"{base}:schema", 1)
    last = str((at(30) - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1))
    for n in range(1200):  # more than one SCAN batch
        raw.hset(f"{base}:cur:job-{n}", mapping={"": f"{last}|3", "a:b": f"{last}|1"})
    assert (await store.plan_cursor_get("job-7", "a:b")) == PlanCursor("job-7", "a:b", at(30), 1)
    await store.migrate()
    assert raw.get(f"{base}:schema") == str(SCHEMA_VERSION)
    assert raw.zcard(f"{base}:plan") == 2401
    cursor = PlanCursor("job-7", "a:b", at(30), 1, at(30))
    assert await store.plan_cursor_get("job-7", "a:b") == cursor
    assert (await store.plan_cursor_get("fresh", "")) == PlanCursor("fresh", "", None, 0, at(50))
    due = await store.plan_due(at(30), 3)
    assert [(s.cursor.job, s.cursor.scope) for s in due.streams] == [
        ("job-0", ""),
        ("job-0", "a:b"),
        ("job-1", ""),
    ]
    assert due.next_at == at(50)
    step = PlanAdvance("job-7", "a:b", at(30), at(90), 2, (), None)
    assert await store.plan_advance(step)
    assert await store.job_delete("job-8") is False  # no job record, the cursors go anyway
    assert raw.zcard(f"{base}:plan") == 2398
    await store.migrate()  # nothing left to upgrade
    assert raw.zcard(f"{base}:plan") == 2398


# -- pages of jobs ------------------------------------------------------------------------------
def _hmgets_of_rows(server: str, prefix: str, seen: list[str], ready: threading.Event) -> None:
    """Record (MONITOR) the HMGETs of occurrence rows under ``prefix`` until the marker
    command GET <prefix>:stop-watching."""
    rows, marker = f"{{{prefix}}}:o:", f"{prefix}:stop-watching"
    client = redis.Redis.from_url(server)
    with client.monitor() as monitor:
        ready.set()
        for command in monitor.listen():
            text = command["command"]
            if text.startswith("HMGET") and rows in text:
                seen.append(text)
            if marker in text:
                return


async def test_a_page_reads_one_row_for_a_last_outcome_past_a_backlog(
    store: RedisStore, redis_server: str
) -> None:
    """A job with 2,000 occurrences waiting after its last finished one (a queue behind a
    slow handler): its page's script reads one occurrence row for its last outcome (the
    newest of ':fin:<job>'), not every waiting one (it walked ':job:<job>', a read each)."""
    await store.job_upsert(
        [JobRecord(name="busy", task="task", schedule={"kind": "every", "seconds": 60})]
    )
    await store.occurrence_insert(new_occurrence("busy:0", job="busy", due_at=LONG_AGO))
    (run,) = await claim(store, limit=1)
    assert await store.occurrence_complete("i1", [Outcome(run.id, 1, State.SUCCEEDED)]) == {run.id}
    waiting = [
        new_occurrence(f"busy:{n}", job="busy", due_at=LONG_AGO + timedelta(days=36500 + n))
        for n in range(1, 2001)
    ]
    assert await store.occurrence_insert_many(waiting) == 2000
    seen: list[str] = []
    ready = threading.Event()
    watcher = threading.Thread(
        target=_hmgets_of_rows, args=(redis_server, store.prefix, seen, ready), daemon=True
    )
    watcher.start()
    assert ready.wait(10)
    await asyncio.sleep(0.1)  # MONITOR is on once the server answered it
    page = await store.job_page(JobQuery(prefix="busy", limit=1))
    redis.Redis.from_url(redis_server).get(f"{store.prefix}:stop-watching")
    watcher.join(30)
    assert not watcher.is_alive()
    assert page.jobs[0].last is not None and page.jobs[0].last.id == run.id
    assert len(seen) == 1, seen[:5]


async def test_migrate_enters_the_finished_occurrences_of_an_older_store_in_their_jobs_index(
    store: RedisStore, raw: redis.Redis
) -> None:
    """A store of key layout 2 (no ':fin:<job>'): migrate enters every finished occurrence
    in its job's index, in batches (1,200: more than one), so that the pages show the same
    last outcomes as before; the waiting ones stay out of it."""
    base = store.target.base
    items = [new_occurrence(f"k{n}", job=f"j{n % 3}", due_at=at(n)) for n in range(1200)]
    assert await store.occurrence_insert_many(items) == 1200
    runs = await claim(store, limit=1200, now=at(2000))
    outcomes = [
        Outcome(o.id, 1, State.SUCCEEDED if n % 2 else State.DEAD) for n, o in enumerate(runs)
    ]
    assert len(await store.occurrence_complete("i1", outcomes, now=at(2000))) == 1200
    await store.occurrence_insert(new_occurrence("later", job="j0", due_at=at(5000)))
    await store.job_upsert(
        [
            JobRecord(name=f"j{n}", task="task", schedule={"kind": "every", "seconds": 60})
            for n in range(3)
        ]
    )
    before = await store.job_page(JobQuery())
    assert [v.last.id if v.last else None for v in before.jobs] == [
        next(o.id for o in reversed(runs) if o.job == f"j{n}") for n in range(3)
    ]
    raw.delete(*(f"{base}:fin:j{n}" for n in range(3)))
    raw.set(f"{base}:schema", 2)
    assert [v.last for v in (await store.job_page(JobQuery())).jobs] == [None] * 3
    assert await store.migrate() == [3]
    assert raw.get(f"{base}:schema") == str(SCHEMA_VERSION)
    assert [raw.zcard(f"{base}:fin:j{n}") for n in range(3)] == [400, 400, 400]
    assert await store.job_page(JobQuery()) == before
    assert await store.migrate() == []


# -- waking and racing ---------------------------------------------------------------------------
async def test_an_insert_by_another_instance_wakes_a_waiter(redis_url: str) -> None:
    """work_wait returns True soon after another handle inserts due work."""
    waiter, writer = RedisStore(redis_url), RedisStore(redis_url)
    try:
        await waiter.migrate()
        await writer.migrate()
        assert await waiter.work_wait(0.01) is True  # the first wait subscribes
        assert await waiter.work_wait(0.05) is False
        waiting = asyncio.create_task(waiter.work_wait(30))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        started = time.monotonic()
        await writer.occurrence_insert(new_occurrence("k", due_at=LONG_AGO))
        # Woken by the publication, not at its 30 s timeout; 5 s: room for a loaded machine.
        assert await asyncio.wait_for(waiting, 30) is True
        assert time.monotonic() - started < 5
        far = datetime.now(timezone.utc) + timedelta(hours=1)
        await writer.occurrence_insert(new_occurrence("later", due_at=far))
        assert await waiter.work_wait(0.2) is False  # due in an hour: nobody is woken
    finally:
        await waiter.close()
        await writer.close()


async def test_claims_race_across_processes(redis_url: str) -> None:
    """Three OS processes claiming the same rows: each row is claimed exactly once."""
    store = RedisStore(redis_url)
    await store.migrate()
    items = [new_occurrence(f"k{n:04}", due_at=LONG_AGO) for n in range(600)]
    await store.occurrence_insert_many(items)
    await store.close()
    claimed = race_claimers(redis_url, processes=3, batch=7)
    counts = Counter(claimed)
    assert len(counts) == 600 and max(counts.values()) == 1


# -- adversarial review: the store against the memory store, and its own indexes ------------------
def _check_indexes(raw: redis.Redis, store: RedisStore) -> None:
    """Every index and counter of the store agrees with the occurrence hashes behind it."""
    b = store.target.base
    rows = [raw.hgetall(k) for k in _keys(raw, store, "o:*")]
    by_state: dict[str, set[str]] = {}
    counts: Counter[str] = Counter()
    busy: Counter[str] = Counter()
    due: dict[str, dict[str, float]] = {}
    running: dict[str, float] = {}
    since: dict[str, dict[str, float]] = {}  # group -> {id: started}
    for r in rows:
        by_state.setdefault(r["state"], set()).add(r["ord"])
        counts[f"{r['job']}\0{r['state']}"] += 1
        if r["state"] in ("scheduled", "failed"):
            due.setdefault(r["task"], {})[r["ord"]] = float(r["due"])
        if r["state"] == "running":
            # The overlap group's counter, named in the row when it was claimed.
            assert r["busy"] == f"{r['job']}\0{r['scope']}\0{r['task']}"
            busy[r["busy"]] += 1
            since.setdefault(r["busy"], {})[r["id"]] = float(r["started"])
            running[r["id"]] = float(r["lease"])
        else:
            assert "busy" not in r
        assert raw.hget(f"{b}:dedupe", r["key"]) == r["id"]
    assert set(raw.zrange(f"{b}:all", 0, -1)) == {r["ord"] for r in rows}
    for state in ("scheduled", "running", "failed", "succeeded", "dead", "skipped"):
        assert set(raw.zrange(f"{b}:st:{state}", 0, -1)) == by_state.get(state, set()), state
    assert {k: int(v) for k, v in raw.hgetall(f"{b}:counts").items()} == dict(counts)
    assert {k: int(v) for k, v in raw.hgetall(f"{b}:busy").items()} == dict(busy)
    # The start times of each group's running rows, for the skip rule; none for idle groups.
    assert len(_keys(raw, store, "since:*")) == len(since)
    for group, starts in since.items():
        assert dict(raw.zrange(f"{b}:since:{group}", 0, -1, withscores=True)) == starts
    assert dict(raw.zrange(f"{b}:running", 0, -1, withscores=True)) == running
    for task in raw.smembers(f"{b}:tasks"):
        assert dict(raw.zrange(f"{b}:due:{task}", 0, -1, withscores=True)) == due.get(task, {})
    finished = by_state.get("succeeded", set()) | by_state.get("dead", set())
    assert set(raw.zrange(f"{b}:done", 0, -1)) == finished | by_state.get("skipped", set())
    assert raw.hlen(f"{b}:dedupe") == len(rows)


async def test_rows_claimed_before_the_task_joined_the_overlap_group(
    store: RedisStore, raw: redis.Redis
) -> None:
    """A row claimed before the overlap group became (job, scope, task) holds the old
    (job, scope) counter and no 'busy' field: while it runs it still blocks its job and
    scope, and when it stops (completed or reaped) that counter, not the new one, goes down:
    the counters never drift."""
    b = store.target.base
    old, new = "job\0", "job\0\0task"

    async def claim_as_before(key: str, now: datetime) -> Occurrence:
        await store.occurrence_insert(new_occurrence(key, overlap=Overlap.SKIP, due_at=now))
        (running,) = await claim(store, now=now)
        assert raw.hget(f"{b}:o:{running.id}", "busy") == new
        assert raw.hgetall(f"{b}:busy") == {new: "1"}
        raw.hdel(f"{b}:o:{running.id}", "busy")  # as the previous version claimed it
        raw.hdel(f"{b}:busy", new)
        raw.delete(f"{b}:since:{new}")
        raw.hset(f"{b}:busy", old, 1)
        return running

    running = await claim_as_before("old", T0)
    await store.occurrence_insert(new_occurrence("next", overlap=Overlap.SKIP, due_at=at(1)))
    assert await claim(store, now=at(2)) == []
    assert [o.dedupe_key for o in await store.occurrence_list(state=State.SKIPPED)] == ["next"]
    done = Outcome(running.id, running.fencing_token, State.SUCCEEDED)
    assert await store.occurrence_complete("i1", [done], now=at(3)) == {running.id}
    assert raw.hgetall(f"{b}:busy") == {}
    _check_indexes(raw, store)

    running = await claim_as_before("crashed", at(4))
    (reaped,) = await store.occurrence_reap(now=at(4) + TTL)
    assert reaped.id == running.id and reaped.state == State.SCHEDULED
    assert raw.hgetall(f"{b}:busy") == {}
    _check_indexes(raw, store)


async def test_rows_claimed_before_start_times_were_kept(
    store: RedisStore, raw: redis.Redis
) -> None:
    """A row claimed before the ':since:' start times existed (its group's counter counts
    it, no start time does) is taken to have started as early as can be: a skip sibling
    due while it runs is skipped, as before, even one due before it started; when it stops
    the counter and the start times are gone and later claims keep both."""
    b, group = store.target.base, "job\0\0task"
    await store.occurrence_insert(new_occurrence("old", overlap=Overlap.SKIP, due_at=T0))
    (running,) = await claim(store, now=at(2))
    raw.delete(f"{b}:since:{group}")  # as the previous version claimed it
    await store.occurrence_insert(new_occurrence("next", overlap=Overlap.SKIP, due_at=at(1)))
    assert await claim(store, now=at(3)) == []
    assert [o.dedupe_key for o in await store.occurrence_list(state=State.SKIPPED)] == ["next"]
    done = Outcome(running.id, running.fencing_token, State.SUCCEEDED)
    assert await store.occurrence_complete("i1", [done], now=at(4)) == {running.id}
    assert raw.hgetall(f"{b}:busy") == {} and _keys(raw, store, "since:*") == []
    await store.occurrence_insert(new_occurrence("new", overlap=Overlap.SKIP, due_at=at(5)))
    assert len(await claim(store, now=at(5))) == 1
    _check_indexes(raw, store)


def _comparable(o: Occurrence) -> tuple[object, ...]:
    """An occurrence without its store-made id, to compare two stores."""
    return tuple(v for k, v in vars(o).items() if k != "id")


async def _random_steps(
    stores: list[Store], clock: FakeClock, seed: int, steps: int, check: Callable[[], None]
) -> None:
    """Run the same seeded random operations on every store; their answers must agree."""
    rng = random.Random(seed)
    held: list[tuple[str, str, int]] = []  # (instance, dedupe key, token), stale ones too
    ids: list[dict[str, str]] = [{} for _ in stores]  # dedupe key -> id, per store
    n = 0
    for _ in range(steps):
        op = rng.choice(["insert", "insert", "claim", "claim", "complete", "complete",
                         "release", "renew", "reap", "tick"])  # fmt: skip
        now = clock.now()
        if op == "insert":
            n += 1
            item = new_occurrence(
                f"k{n}",
                job=rng.choice(["a", "b"]),
                task=rng.choice(["task", "other"]),
                scope=rng.choice(["", "s"]),
                due_at=now + timedelta(seconds=rng.randint(-5, 20)),
                max_attempts=rng.randint(1, 3),
                overlap=rng.choice(list(Overlap)),
            )
            got = [await s.occurrence_insert(item) for s in stores]
            for mine, (occ, _) in zip(ids, got, strict=True):
                mine[occ.dedupe_key] = occ.id
            answers: list[object] = [(_comparable(o), c) for o, c in got]
        elif op == "claim":
            inst = rng.choice(["i1", "i2"])
            tasks = rng.choice([["task"], ["other"], ["task", "other"]])
            limit, ttl = rng.randint(1, 3), timedelta(seconds=rng.choice([5, 30]))
            claims = [await s.occurrence_claim(inst, tasks, limit, ttl) for s in stores]
            held += [(inst, o.dedupe_key, o.fencing_token) for o in claims[0]]
            answers = [[_comparable(o) for o in c] for c in claims]
        elif op in ("complete", "release", "renew") and held:
            inst, key, tok = rng.choice(held)
            if rng.random() < 0.2:
                inst = "i1" if inst == "i2" else "i2"  # the wrong runner
            state = rng.choice([State.SUCCEEDED, State.FAILED, State.DEAD])
            retry = now + timedelta(seconds=rng.randint(0, 10))
            results = []
            for s, mine in zip(stores, ids, strict=True):
                if op == "complete":
                    outcome = Outcome(
                        mine[key], tok, state, "handler_error", "boom", {"n": n}, retry
                    )
                    got_ids = await s.occurrence_complete(inst, [outcome])
                elif op == "release":
                    got_ids = await s.lease_release(inst, [Claimed(mine[key], tok)])
                else:
                    got_ids = await s.lease_renew(inst, [Claimed(mine[key], tok)], TTL)
                results.append(len(got_ids))
            answers = results
        elif op == "reap":
            answers = [sorted(_comparable(o) for o in await s.occurrence_reap()) for s in stores]
        else:
            clock.advance(timedelta(seconds=rng.randint(1, 15)))
            answers = []
        assert all(a == answers[0] for a in answers), (op, answers)
        lists = [[_comparable(o) for o in await s.occurrence_list(limit=1000)] for s in stores]
        assert all(x == lists[0] for x in lists), op
        counts = [await s.occurrence_counts() for s in stores]
        assert all(c == counts[0] for c in counts), (op, counts)
        for state in (State.RUNNING, State.SKIPPED):
            for job in ("a", "b"):
                got_lists = [await s.occurrence_list(job=job, state=state) for s in stores]
                assert len({len(x) for x in got_lists}) == 1, (op, job, state)
        check()


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_operations_agree_with_the_memory_store(
    make_redis_url: Callable[[], str], raw: redis.Redis, seed: int
) -> None:
    """Seeded random insert/claim/complete/release/renew/reap/tick sequences give the same
    answers, rows and counts as the memory store, and every Redis index stays consistent."""
    clock = FakeClock(T0)
    store = RedisStore(make_redis_url() + "&history_max=0&history_age=0", clock=clock)
    await store.migrate()
    try:
        stores: list[Store] = [MemoryStore(clock=clock), store]
        await _random_steps(stores, clock, seed, 300, lambda: _check_indexes(raw, store))
    finally:
        await store.close()


async def test_random_operations_keep_indexes_with_history_trimming(
    make_redis_url: Callable[[], str], raw: redis.Redis
) -> None:
    """With a tiny history (3 kept), random operations never lose an unfinished occurrence
    and leave every index and counter consistent with the rows kept."""
    clock = FakeClock(T0)
    store = RedisStore(make_redis_url() + "&history_max=3&history_age=1m", clock=clock)
    await store.migrate()

    def check() -> None:
        _check_indexes(raw, store)
        assert raw.zcard(f"{store.target.base}:done") <= 3 + 2 * 3

    try:
        await _random_steps([store], clock, 7, 300, check)
    finally:
        await store.close()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server of this test's own (to pause or stop without disturbing others)."""
    binary = shutil.which("redis-server")
    if binary is None:
        reason = "REDIS SERVER TESTS NOT RUN: these start their own redis-server; none in PATH"
        missing(reason)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    proc = subprocess.Popen([*argv, "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_timeout=1)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "the private redis-server did not answer"
            time.sleep(0.05)
    try:
        yield url
    finally:
        client.close()
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A redis-server of its own that speaks only TLS, with a self-signed certificate made
    by openssl: its rediss:// URL and the certificate (the CA to trust)."""
    binary, openssl = shutil.which("redis-server"), shutil.which("openssl")
    if binary is None or openssl is None:
        reason = "REDIS TLS TESTS NOT RUN: they need redis-server and openssl in PATH"
        missing(reason)
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    request = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    request += ["-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=x"]
    request += ["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"]
    subprocess.run(request, check=True, capture_output=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1"]
    argv += ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
    argv += ["--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no", "--save", ""]
    proc = subprocess.Popen([*argv, "--dir", str(where)], stdout=subprocess.DEVNULL)
    url = f"rediss://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, ssl_ca_certs=str(cert), socket_timeout=1)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert proc.poll() is None, "the TLS redis-server did not start"
            assert time.monotonic() < deadline, "the TLS redis-server did not answer"
            time.sleep(0.05)
    try:
        yield url, cert
    finally:
        client.close()
        proc.kill()
        proc.wait(timeout=30)


async def test_a_rediss_url_with_tls_options_connects(tls_redis: tuple[str, Path]) -> None:
    """A managed-Redis style rediss:// URL works: trusting the server's CA with
    ssl_ca_certs, or not checking with ssl_cert_reqs=none; without either the self-signed
    certificate is refused (StoreUnavailableError saying why): the options reach redis-py."""
    url, cert = tls_redis
    for n, options in enumerate(
        (f"ssl_ca_certs={cert}", "ssl_cert_reqs=none&health_check_interval=5")
    ):
        store = RedisStore(f"{url}?prefix=tls{n}&{options}")
        try:
            await store.migrate()
            await store.occurrence_insert_many([new_occurrence("k1", due_at=LONG_AGO)])
            assert (await store.occurrence_counts()).due == 1
        finally:
            await store.close()
    store = RedisStore(f"{url}?prefix=tls&socket_connect_timeout=2")
    try:
        with pytest.raises(StoreUnavailableError, match="certificate verify failed"):
            await store.migrate()
    finally:
        await store.close()


async def test_more_concurrent_calls_than_connections_wait_for_one(private_redis: str) -> None:
    """40 calls at once while the server is slow (paused) all succeed: a call waits for a
    free pooled connection instead of failing with 'Too many connections'."""
    store = RedisStore(private_redis + "?prefix=many")
    await store.migrate()
    try:
        redis.Redis.from_url(private_redis).client_pause(300, all=False)
        got = await asyncio.gather(
            *(store.occurrence_counts() for _ in range(40)), return_exceptions=True
        )
        assert [g for g in got if isinstance(g, BaseException)] == []
    finally:
        await store.close()


async def test_a_wait_on_a_silent_server_ends_within_its_timeout() -> None:
    """work_wait(0.3) on a server that accepts but never answers gives up within about a
    second (StoreUnavailableError, no password), not after the 60 s socket timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        store = RedisStore(f"redis://u:hunter2@127.0.0.1:{port}/0?prefix=silent")
        started = time.monotonic()
        with pytest.raises(StoreUnavailableError, match="SUBSCRIBE") as info:
            await asyncio.wait_for(store.work_wait(0.3), 30)
        assert time.monotonic() - started < 5
        assert "hunter2" not in str(info.value)
        await store.close()


async def test_cancelled_waits_leave_no_connections_behind(private_redis: str) -> None:
    """30 waits cancelled mid-way, then close(): the server sees at most the one
    subscription and one command connection meanwhile, and none after close; the waits
    after the cancelled ones still work (a quiet one times out, due work wakes one)."""
    raw_client = redis.Redis.from_url(private_redis, decode_responses=True)
    store = RedisStore(private_redis + "?prefix=cancel")
    await store.migrate()

    def ours() -> int:
        return sum(1 for c in raw_client.client_list() if c.get("name") == "soloist")

    assert await store.work_wait(0.01) is True
    for _ in range(30):
        waiting = asyncio.create_task(store.work_wait(30))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    await store.work_wait(0.01)  # either: a subscription made again may answer at once
    assert await store.work_wait(0.05) is False
    waiting = asyncio.create_task(store.work_wait(30))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    await store.occurrence_insert(new_occurrence("k", due_at=LONG_AGO))
    assert await asyncio.wait_for(waiting, 10) is True
    assert ours() <= 2
    await store.close()
    deadline = time.monotonic() + 5
    while ours() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert ours() == 0
    raw_client.close()


# -- data loss ------------------------------------------------------------------------------
async def test_a_store_that_lost_its_data_says_so(redis_url: str, raw: redis.Redis) -> None:
    """With the prefix's keys gone (a flush, a restart without persistence), heartbeats,
    elections and renewals raise StoreDataLostError naming the store and the cause, and
    write nothing; migrate writes a new identity, and they work again."""
    store = RedisStore(redis_url)
    await store.migrate()
    try:
        old = store.identity
        assert old is not None and raw.get(f"{store.target.base}:identity") == old
        await store.instance_heartbeat(instance_info("i1"), TTL)
        lease = await store.leader_attempt_elect("e", "i1", TTL)
        assert lease is not None
        raw.delete(*_keys(raw, store))
        calls = [
            store.instance_heartbeat(instance_info("i1"), TTL),
            store.leader_attempt_elect("e", "i1", TTL),
            store.leader_renew("e", "i1", lease.epoch, TTL),
        ]
        for call in calls:
            with pytest.raises(StoreDataLostError) as info:
                await call
            message = str(info.value)
            assert store.target.display in message
            assert "identity key missing: restarted without persistence or flushed" in message
            assert (info.value.expected, info.value.found) == (old, None)
        assert _keys(raw, store) == []  # nothing was written into the emptied store
        await store.migrate()
        assert store.identity not in (None, old)
        await store.instance_heartbeat(instance_info("i1"), TTL)
        again = await store.leader_attempt_elect("e", "i1", TTL)
        assert again is not None and again.epoch == 1  # the epoch starts over
    finally:
        await store.close()


async def test_another_instance_sees_the_identity_written_again(
    redis_url: str, raw: redis.Redis
) -> None:
    """After a loss the first instance to notice sets the store up again; another one
    that knew the old identity is told the data was lost (changed), and adopts the new
    identity on migrate instead of writing its own."""
    first, second = RedisStore(redis_url), RedisStore(redis_url)
    await first.migrate()
    await second.migrate()
    try:
        assert first.identity == second.identity is not None
        old = first.identity
        raw.delete(*_keys(raw, first))
        await first.migrate()
        with pytest.raises(StoreDataLostError, match="identity key changed") as info:
            await second.instance_heartbeat(instance_info("i2"), TTL)
        assert (info.value.expected, info.value.found) == (old, first.identity)
        await second.migrate()
        assert second.identity == first.identity
        await second.instance_heartbeat(instance_info("i2"), TTL)
    finally:
        await first.close()
        await second.close()


async def test_a_store_never_set_up_here_does_not_check(redis_url: str) -> None:
    """A store object that did not migrate (a CLI read, a portal) knows no identity and
    heartbeats without the check."""
    setup, other = RedisStore(redis_url), RedisStore(redis_url)
    await setup.migrate()
    try:
        assert other.identity is None
        await other.instance_heartbeat(instance_info("i3"), TTL)
        assert [i.instance_id for i in await other.instance_list()] == ["i3"]
    finally:
        await setup.close()
        await other.close()


async def test_pooled_connections_the_server_closed_are_passed_over(
    store: RedisStore, raw: redis.Redis
) -> None:
    """CLIENT KILL of every pooled connection (an administrator, a restart, an idle
    timeout): the next calls each run on a live connection instead of failing on a closed
    one they never sent anything on (redis-py's pool looks first, with RESP2)."""

    async def held_id() -> int:
        # Each call holds its connection a moment, so that calls at once take several.
        async with store._conns.client().client() as one:
            await one.execute_command("CLIENT", "ID")
            await asyncio.sleep(0.05)
            return int(await one.execute_command("CLIENT", "ID"))

    ids = set(await asyncio.gather(*(held_id() for _ in range(4))))
    assert len(ids) >= 2, ids
    for client_id in ids:
        assert raw.execute_command("CLIENT", "KILL", "ID", client_id) == 1
    killed = {f"id={client_id} " for client_id in ids}
    deadline = time.monotonic() + 10
    while any(entry in raw.execute_command("CLIENT", "LIST") for entry in killed):
        assert time.monotonic() < deadline, "the connections were not closed"
        await asyncio.sleep(0.01)
    # The client learns that a socket closed when its event loop reads it: an idle
    # instance's loop keeps turning, this test's must be let to.
    await asyncio.sleep(0.05)
    for _ in range(len(ids) + 1):  # each pooled connection in turn, and one more
        assert isinstance(await store.now(), datetime)
