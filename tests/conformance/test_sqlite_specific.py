"""What only the SQLite store promises: URLs, files, migrations, threads and processes."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from soloist.clock import to_epoch_us
from soloist.errors import ConfigError, StoreError, StoreUnavailableError
from soloist.models import (
    Claimed,
    JobRecord,
    Outcome,
    PlanAdvance,
    PlanCursor,
    State,
    stream_slot,
)
from soloist.stores import open_store
from soloist.stores.core import checked
from soloist.stores.pages import JobPage, JobQuery
from soloist.stores.sqlite import SQLiteStore, sqlite_path
from soloist.stores.sqlite import pages as sqlite_pages
from soloist.stores.sqlite.migrations import MIGRATIONS, apply_migration
from soloist.stores.sqlite.planning import PLAN_DUE
from soloist.testing import FakeClock
from soloist.testing.conformance import T0, TTL, at, claim, new_occurrence
from soloist.testing.conformance.processes import race_claimers

EVERY = {"kind": "every", "seconds": 300}


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


def _versions(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT version FROM soloist_schema_version ORDER BY version")
        return [row[0] for row in rows]


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///soloist.db", "soloist.db"),
        ("sqlite:///data/app.db", "data/app.db"),
        ("sqlite:////tmp/x.db", "/tmp/x.db"),
    ],
)
def test_url_paths_read_like_sqlalchemy(url: str, path: str) -> None:
    """Three slashes then a relative path; four slashes for an absolute one."""
    assert sqlite_path(url) == path


@pytest.mark.parametrize("url", ["sqlite:///", "sqlite://", "sqlite://host/x.db", "sqlite:x.db"])
def test_bad_urls_raise_config_error_naming_them(url: str) -> None:
    """An empty path or a malformed SQLite URL is a ConfigError that quotes the URL."""
    with pytest.raises(ConfigError, match="sqlite:"):
        SQLiteStore(url)


def test_open_store_selects_the_sqlite_store(tmp_path: Path) -> None:
    """open_store('sqlite:///...') returns a SQLiteStore for that path."""
    store = open_store(_url(tmp_path / "x.db"))
    driver = store.driver
    assert isinstance(driver, SQLiteStore) and driver.path == str(tmp_path / "x.db")


async def test_missing_directory_is_unavailable_naming_the_path(tmp_path: Path) -> None:
    """A path in a directory that does not exist raises StoreUnavailableError naming it."""
    path = tmp_path / "nope" / "x.db"
    store = SQLiteStore(_url(path))
    with pytest.raises(StoreUnavailableError, match=r"nope/x\.db.*does not exist"):
        await store.migrate()
    await store.close()
    assert not path.parent.exists()


async def test_a_directory_as_path_is_unavailable(tmp_path: Path) -> None:
    """A path that is a directory cannot be opened: StoreUnavailableError naming it."""
    store = SQLiteStore(_url(tmp_path))
    with pytest.raises(StoreUnavailableError, match=re.escape(str(tmp_path))):
        await store.migrate()
    await store.close()


async def test_a_file_that_is_not_a_database_is_unavailable(tmp_path: Path) -> None:
    """A file that is not SQLite raises StoreUnavailableError; the file is left as it was."""
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not a database, " * 100)
    store = SQLiteStore(_url(path))
    with pytest.raises(StoreUnavailableError, match=r"notes\.txt"):
        await store.migrate()
    await store.close()
    assert path.read_bytes() == b"not a database, " * 100


async def test_migrate_twice_is_a_no_op(tmp_path: Path) -> None:
    """The second migrate applies nothing: one version row per migration."""
    path = tmp_path / "s.db"
    store = SQLiteStore(_url(path))
    await store.migrate()
    await store.migrate()
    await store.close()
    assert _versions(path) == list(range(1, len(MIGRATIONS) + 1))


async def test_instances_migrating_at_once_are_safe(tmp_path: Path) -> None:
    """Several stores on one fresh file migrate concurrently without error or double work."""
    path = tmp_path / "s.db"
    stores = [SQLiteStore(_url(path)) for _ in range(4)]
    await asyncio.gather(*(store.migrate() for store in stores))
    await asyncio.gather(*(store.close() for store in stores))
    assert _versions(path) == list(range(1, len(MIGRATIONS) + 1))


def _old_file(path: Path, version: int) -> None:
    """A store file at schema ``version`` holding one running occurrence, ``old``, written
    with that version's columns (running on i1 since T0, its lease expired at T0 + 30 s),
    and two plan cursors: ("job", "") planned up to T0 - 60 s with 5 runs, and
    ("job", "t1") never planned."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute(
            "CREATE TABLE soloist_schema_version (version INTEGER PRIMARY KEY, "
            "applied_at INTEGER NOT NULL)"
        )
        for number in range(1, version + 1):
            apply_migration(conn, number, 0)
            conn.execute("INSERT INTO soloist_schema_version VALUES (?, 0)", (number,))
        t0 = to_epoch_us(T0)
        conn.execute(
            "INSERT INTO plan_cursors (job, scope, last_plan_time, planned_count) "
            "VALUES ('job', '', ?, 5), ('job', 't1', NULL, 0)",
            (t0 - 60_000_000,),
        )
        conn.execute(
            "INSERT INTO occurrences (id, dedupe_key, job, task, scope, plan_time, due_at, "
            "kind, state, attempt, max_attempts, overlap, payload, instance_id, "
            "lease_expires_at, fencing_token, created_at, started_at) VALUES ('old', 'old', "
            "'job', 'task', '', ?, ?, 'schedule', 'running', 1, 1, 'allow', '{\"n\": 1}', "
            "'i1', ?, 1, ?, ?)",
            (t0, t0, t0 + 30_000_000, t0, t0),
        )
    conn.close()


async def test_a_version_2_file_migrates_keeping_its_rows(tmp_path: Path) -> None:
    """A file from before the election tables gains them, keeping its occurrences."""
    path = tmp_path / "s.db"
    _old_file(path, 2)
    store = SQLiteStore(_url(path), clock=FakeClock(T0))
    await store.migrate()
    assert _versions(path) == list(range(1, len(MIGRATIONS) + 1))
    old = await store.occurrence_get("old")
    assert old is not None and (old.state, old.payload, old.fencing_token) == (
        State.RUNNING,
        {"n": 1},
        1,
    )
    lease = await store.leader_attempt_elect("main", "a", timedelta(seconds=10))
    assert lease is not None and lease.epoch == 1
    await store.close()


async def test_a_version_3_file_gains_crash_counts_keeping_its_rows(tmp_path: Path) -> None:
    """Migration 4 adds crashes (0) and max_crashes (3) to the rows there; the old running
    row is then reaped by the new rule (scheduled again, not dead) and new rows store their
    own max_crashes."""
    path = tmp_path / "s.db"
    _old_file(path, 3)
    store = SQLiteStore(_url(path), clock=FakeClock(T0))
    try:
        await store.migrate()
        assert _versions(path) == list(range(1, len(MIGRATIONS) + 1))
        old = await store.occurrence_get("old")
        assert old is not None
        assert (old.state, old.attempt, old.instance_id, old.started_at) == (
            State.RUNNING,
            1,
            "i1",
            T0,
        )
        assert (old.crashes, old.max_crashes) == (0, 3)
        (reaped,) = await store.occurrence_reap(now=T0 + timedelta(seconds=30))
        assert (reaped.id, reaped.state, reaped.attempt, reaped.crashes) == (
            "old",
            State.SCHEDULED,
            0,
            1,
        )
        new, _ = await store.occurrence_insert(new_occurrence("new", max_crashes=0))
        assert (new.crashes, new.max_crashes) == (0, 0)
    finally:
        await store.close()


async def test_a_version_5_file_gains_the_cancel_flag_keeping_its_rows(tmp_path: Path) -> None:
    """Migration 6 adds cancel_requested (false) to the rows there; the old running row
    can then be cancelled, and its runner's renewal reports it."""
    path = tmp_path / "s.db"
    _old_file(path, 5)
    store = checked(SQLiteStore(_url(path), clock=FakeClock(T0)))
    try:
        await store.migrate()
        old = await store.occurrence_get("old")
        assert old is not None and old.state is State.RUNNING and not old.cancel_requested
        answer = await store.occurrence_cancel("old")
        assert answer is not None and answer[1] and answer[0].cancel_requested
        renewed = await store.lease_renew("i1", [Claimed("old", 1)], TTL, now=at(1))
        assert renewed.cancel_requested == {"old"}
    finally:
        await store.close()


async def test_a_version_4_file_enters_its_cursors_in_the_planning_index(
    tmp_path: Path,
) -> None:
    """Migration 5 puts every existing cursor in the planning index, due at its last plan
    time (at the store's now when never planned) with its stream's slot, so the planner
    re-plans it; the cursors keep their counts, and partition leases work."""
    path = tmp_path / "s.db"
    _old_file(path, 4)
    clock = FakeClock(T0 + timedelta(seconds=5))
    store = checked(SQLiteStore(_url(path), clock=clock))
    try:
        await store.migrate()
        assert _versions(path) == list(range(1, len(MIGRATIONS) + 1))
        planned = PlanCursor("job", "", at(-60), 5, at(-60))
        assert await store.plan_cursor_get("job", "") == planned
        assert await store.plan_cursor_get("job", "t1") == PlanCursor("job", "t1", None, 0, at(5))
        batch = await store.plan_due(at(5), 10)
        assert [s.cursor for s in batch.streams] == [
            planned,
            PlanCursor("job", "t1", None, 0, at(5)),
        ]
        with sqlite3.connect(path) as conn:
            slots = dict(conn.execute("SELECT scope, slot FROM plan_cursors").fetchall())
        conn.close()
        assert slots == {scope: stream_slot("job", scope) for scope in ("", "t1")}
        only = slots["t1"]
        in_slot = await store.plan_due(at(5), 10, [(only, only + 1)])
        assert [(s.cursor.job, s.cursor.scope) for s in in_slot.streams] == [("job", "t1")]
        step = PlanAdvance("job", "", at(-60), at(0), 1, (), at(60))
        assert await store.plan_advance(step)
        assert await store.plan_cursor_get("job", "") == PlanCursor("job", "", at(0), 6, at(60))
        (lease,) = await store.partition_sync("a", [0], TTL)
        assert (lease.partition, lease.holder, lease.epoch) == (0, "a", 1)
    finally:
        await store.close()


def _query_plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    params = {"before": 0, "limit": 10, "slots": "[1, 2, 3]"}
    return [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]


@pytest.mark.parametrize("with_slots", [False, True])
async def test_plan_due_walks_the_partial_index(tmp_path: Path, with_slots: bool) -> None:
    """plan_due's queries (due streams, and next_at), with and without a slot filter, search
    the cursors through the partial index plan_cursors_due, in its order: no scan of the
    cursors and no sort, however many cursors there are."""
    path = tmp_path / "s.db"
    store = checked(SQLiteStore(_url(path), clock=FakeClock(T0)))
    try:
        await store.migrate()
        far = [PlanAdvance(f"far-{n}", "", None, at(0), 0, (), at(10_000 + n)) for n in range(500)]
        parked = [PlanAdvance(f"out-{n}", "", None, at(0), 0, ()) for n in range(500)]
        assert all(await store.plan_advance_many(far + parked))
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("ANALYZE")  # with statistics too, the planner keeps to the index
        for sql in PLAN_DUE[with_slots]:
            plan = _query_plan(conn, sql)
            cursors = [step for step in plan if step.startswith(("SEARCH c ", "SCAN c"))]
            assert len(cursors) == 1, plan
            assert re.fullmatch(
                r"SEARCH c USING (COVERING )?INDEX plan_cursors_due \(.*", cursors[0]
            )
            assert not [step for step in plan if "TEMP B-TREE" in step], plan
    conn.close()


async def _backlog_store(path: Path, waiting: int) -> str:
    """A file with job 'busy': one occurrence succeeded, then ``waiting`` planned after
    it, none run yet. Returns the succeeded one's id."""
    store = checked(SQLiteStore(_url(path), clock=FakeClock(T0)))
    try:
        await store.migrate()
        await store.job_upsert([JobRecord(name="busy", task="task", schedule=EVERY)])
        await store.occurrence_insert(new_occurrence("busy:0", job="busy", due_at=T0))
        (run,) = await claim(store, limit=1)
        done = Outcome(run.id, run.fencing_token, State.SUCCEEDED)
        assert await store.occurrence_complete("i1", [done]) == {run.id}
        items = [
            new_occurrence(f"busy:{n}", job="busy", due_at=at(3600 + n))
            for n in range(1, waiting + 1)
        ]
        if items:
            await store.occurrence_insert_many(items)
        return run.id
    finally:
        await store.close()


def _page_steps(path: Path, query: JobQuery) -> tuple[JobPage, int]:
    """The page of ``query`` read from the file, and how many SQLite VM steps (in
    thousands) the statement took."""
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    conn.set_progress_handler(tick, 1000)
    try:
        return sqlite_pages.job_page(conn, query), steps[0]
    finally:
        conn.close()


async def test_a_page_finds_a_last_outcome_past_a_backlog_in_one_index_entry(
    tmp_path: Path,
) -> None:
    """A job with 3,000 occurrences waiting after its last finished one: its page costs
    what it costs without them (the probe reads occurrences_job_last, finished rows only,
    backwards; no walk of the waiting rows, no sort)."""
    query = JobQuery(prefix="busy", limit=1)
    quiet, busy = tmp_path / "quiet.db", tmp_path / "busy.db"
    await _backlog_store(quiet, 0)
    last = await _backlog_store(busy, 3000)
    page, steps = _page_steps(busy, query)
    assert page.jobs[0].last is not None and page.jobs[0].last.id == last
    _, baseline = _page_steps(quiet, query)
    assert steps <= baseline + 2, (steps, baseline)
    with sqlite3.connect(busy) as conn:
        sql = sqlite_pages._page_sql(True, True, False, "")
        params = {"start": "busy", "end": "busz", "read": 2, "scan": 1, "take": 2}
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    assert "SEARCH occurrences USING INDEX occurrences_job_last (job=?)" in plan, plan


async def test_reads_of_the_index_and_partitions_take_no_write_lock(tmp_path: Path) -> None:
    """plan_due and partition_list only read: they answer while another process holds the
    file's write lock, instead of waiting for it."""
    path = tmp_path / "s.db"
    store = checked(SQLiteStore(_url(path), clock=FakeClock(T0)))
    await store.migrate()
    await store.plan_cursor_ensure([("job", "")], at(0))
    await store.partition_sync("a", [1], TTL)
    holder = _hold_write_lock(path)
    try:
        batch = await asyncio.wait_for(store.plan_due(at(0), 10, [(0, 4096)]), timeout=5)
        leases = await asyncio.wait_for(store.partition_list(), timeout=5)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        await store.close()
    assert [s.cursor.job for s in batch.streams] == ["job"]
    assert [(x.partition, x.holder) for x in leases] == [(1, "a")]


_ELECTOR = textwrap.dedent(
    """
    import asyncio, json, sys
    from datetime import datetime, timedelta, timezone
    from soloist.stores.sqlite import SQLiteStore

    async def main() -> None:
        store = SQLiteStore(sys.argv[1])
        await store.migrate()
        print("ready", flush=True)
        sys.stdin.readline()  # wait for "go": every process elects together
        won = []
        for round_ in range(1, 21):  # each round at its own instant, past the last lease
            now = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=round_)
            lease = await store.leader_attempt_elect(
                "main", sys.argv[2], timedelta(seconds=30), now=now
            )
            if lease is not None:
                won.append([round_, lease.epoch])
        await store.close()
        print(json.dumps(won), flush=True)

    asyncio.run(main())
    """
)


async def test_processes_racing_to_elect_get_one_leader_per_epoch(tmp_path: Path) -> None:
    """Three OS processes electing at the same instants: one winner per round, and the
    epochs of the rounds are 1, 2, 3, ... with no epoch held twice."""
    url = _url(tmp_path / "elect.db")
    store = SQLiteStore(url)
    await store.migrate()
    await store.close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _ELECTOR, url, f"proc-{n}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    wins: list[tuple[int, int]] = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        wins += [(round_, epoch) for round_, epoch in json.loads(out)]
    # A process that falls behind may take a round the others already left: it then holds
    # a later term. What must hold: no epoch twice, and no round with two winners.
    epochs = [epoch for _, epoch in wins]
    assert len(epochs) == len(set(epochs))
    rounds = [round_ for round_, _ in wins]
    assert len(rounds) == len(set(rounds))
    assert sorted(epochs) == list(range(1, len(epochs) + 1))


async def test_the_file_uses_wal_and_times_are_integer_microseconds(tmp_path: Path) -> None:
    """The database runs in WAL mode; times are stored as epoch microseconds."""
    path = tmp_path / "s.db"
    store = SQLiteStore(_url(path), clock=FakeClock(T0))
    await store.migrate()
    due = datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=timezone.utc)
    await store.occurrence_insert(new_occurrence("k", due_at=due))
    await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        (stored,) = conn.execute("SELECT due_at FROM occurrences").fetchone()
    assert stored == 1_767_225_600_000_001


async def test_an_in_memory_database_needs_no_wal(tmp_path: Path) -> None:
    """``sqlite:///:memory:`` (one connection, nobody to share it with) runs in SQLite's
    "memory" journal mode: the WAL check lets it through and it works as a store."""
    store = SQLiteStore("sqlite:///:memory:", clock=FakeClock(T0))
    try:
        await store.migrate()
        occ, created = await store.occurrence_insert(new_occurrence("k"))
        assert created and await store.occurrence_get(occ.id) == occ
    finally:
        await store.close()


async def test_a_file_that_cannot_use_wal_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When SQLite cannot switch a file to WAL (here a real VFS without shared memory,
    "unix-none", as on file systems that lack it) the pragma answers with the mode it kept;
    the store refuses the file, naming its path and that mode, and writes nothing."""
    path = tmp_path / "s.db"
    connect = sqlite3.connect

    def without_shared_memory(database: str, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        return connect(f"file:{database}?vfs=unix-none", *args, uri=True, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", without_shared_memory)
    store = SQLiteStore(_url(path))
    message = f"{re.escape(repr(str(path)))}.*journal_mode is 'delete', not 'wal'"
    with pytest.raises(StoreUnavailableError, match=message):
        await store.migrate()
    await store.close()
    monkeypatch.undo()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []
    conn.close()


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    """Another process's writer: a connection holding the file's write lock."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


@pytest.mark.parametrize("write", ["insert", "claim", "complete", "elect", "explicit now"])
async def test_a_write_reads_now_once_it_holds_the_write_lock(tmp_path: Path, write: str) -> None:
    """A write with now=None that waits for another process's write lock stamps its rows
    with the store's clock as it was when it got the lock, not when it started waiting;
    an explicit now still wins."""
    clock = FakeClock(T0)
    # Through the core, as soloist uses it: the core must leave reading now to the driver.
    store = checked(SQLiteStore(_url(tmp_path / "s.db"), clock=clock))
    await store.migrate()
    await store.occurrence_insert(new_occurrence("due"))
    held = await claim(store, now=T0) if write == "complete" else []
    holder = _hold_write_lock(tmp_path / "s.db")
    try:
        if write == "insert":
            pending = store.occurrence_insert(new_occurrence("k"))
        elif write == "claim":
            pending = claim(store)
        elif write == "explicit now":
            pending = claim(store, now=T0 + timedelta(seconds=5))
        elif write == "complete":
            outcome = Outcome(held[0].id, held[0].fencing_token, State.SUCCEEDED)
            pending = store.occurrence_complete("i1", [outcome])
        else:
            pending = store.leader_attempt_elect("main", "a", timedelta(seconds=10))
        task: asyncio.Task[Any] = asyncio.ensure_future(pending)
        await asyncio.sleep(0)  # the write has started: it now waits for the lock
        assert not task.done()
        clock.advance(60)  # time passes while it waits
    finally:
        holder.execute("COMMIT")
        holder.close()
    result = await asyncio.wait_for(task, timeout=10)
    later = T0 + timedelta(seconds=60)
    if write == "insert":
        assert result[0].created_at == later
    elif write in ("claim", "explicit now"):
        expected = later if write == "claim" else T0 + timedelta(seconds=5)
        (occ,) = result
        assert (occ.started_at, occ.lease_expires_at) == (expected, expected + TTL)
    elif write == "complete":
        occ = await store.occurrence_get(held[0].id)
        assert occ is not None and occ.finished_at == later
        (record,) = await store.occurrence_attempts(occ.id)
        assert record.finished_at == later
    else:
        assert result is not None
        assert (result.elected_at, result.expires_at) == (later, later + timedelta(seconds=10))
    await store.close()


async def test_a_closed_store_raises_store_error(tmp_path: Path) -> None:
    """Using a store after close() raises StoreError rather than hanging."""
    store = SQLiteStore(_url(tmp_path / "s.db"))
    await store.migrate()
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.occurrence_get("x")


async def test_an_unmigrated_store_raises_store_error(tmp_path: Path) -> None:
    """Driver errors (here: no tables yet) surface as StoreError, not sqlite3 errors."""
    store = SQLiteStore(_url(tmp_path / "s.db"))
    with pytest.raises(StoreError, match="no such table"):
        await store.occurrence_get("x")
    await store.close()


def test_usable_from_several_event_loops_and_threads(tmp_path: Path) -> None:
    """One store serves asyncio.run calls from different threads (the sync API's way)."""
    store = SQLiteStore(_url(tmp_path / "s.db"), clock=FakeClock(T0))
    asyncio.run(store.migrate())
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
    assert len(asyncio.run(store.occurrence_list())) == 4
    asyncio.run(store.close())


async def test_processes_racing_to_claim_take_each_row_once(tmp_path: Path) -> None:
    """Three OS processes claiming from one file: every row is claimed exactly once."""
    url = _url(tmp_path / "race.db")
    store = SQLiteStore(url, clock=FakeClock(T0))
    await store.migrate()
    due = datetime(2020, 1, 1, tzinfo=timezone.utc)  # due for any real clock
    for n in range(200):
        await store.occurrence_insert(new_occurrence(f"k{n}", due_at=due + timedelta(seconds=n)))
    expected = {occ.id for occ in await store.occurrence_list(limit=1000)}
    claimed = race_claimers(url, processes=3, batch=3, cwd=tmp_path)
    assert len(claimed) == len(set(claimed)) == 200
    assert set(claimed) == expected
    rows = await store.occurrence_list(limit=1000)
    assert {(o.state, o.attempt, o.fencing_token) for o in rows} == {(State.RUNNING, 1, 1)}
    await store.close()


async def test_two_handles_claim_disjoint_batches(tmp_path: Path) -> None:
    """Two stores on one file, claiming in turn, never see each other's running rows."""
    url = _url(tmp_path / "s.db")
    first, second = SQLiteStore(url), SQLiteStore(url)
    await first.migrate()
    await second.migrate()
    for n in range(6):
        await first.occurrence_insert(new_occurrence(f"k{n}"))
    a = await claim(first, instance="a", limit=4, now=T0)
    b = await claim(second, instance="b", limit=4, now=T0)
    assert len(a) == 4 and len(b) == 2
    assert not {o.id for o in a} & {o.id for o in b}
    await first.close()
    await second.close()
