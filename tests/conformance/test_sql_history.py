"""History retention on the SQL stores: the URL options, the migration that adds the
indexes of finished rows (on a database that already holds rows), and the plans that use
them."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from soloist.clock import to_epoch_us
from soloist.errors import ConfigError
from soloist.stores.postgres import PostgresStore
from soloist.stores.postgres import migrations as pg_migrations
from soloist.stores.postgres.history import History
from soloist.stores.postgres.url import parse_url
from soloist.stores.sqlite import SQLiteStore, sqlite_path
from soloist.stores.sqlite import history as sqlite_history
from soloist.stores.sqlite import migrations as sqlite_migrations
from soloist.stores.sqlite.store import sqlite_retention
from soloist.stores.urls import Retention

T0 = datetime(2026, 1, 10, tzinfo=timezone.utc)
#: The schema version before the history indexes.
BEFORE = 6
INDEXES = {"occurrences_finished", "occurrences_job_finished"}
#: (id, job, days before T0 it finished): job a's newest is a3.
FINISHED = [("a1", "a", 3), ("a2", "a", 2), ("a3", "a", 1), ("b1", "b", 5)]


# -- URLs -----------------------------------------------------------------------------------
def test_sqlite_url_takes_the_history_bounds_and_nothing_else(tmp_path: Path) -> None:
    """history_max and history_age are read (defaults as Redis's), not part of the path;
    any other option, or a bad bound, is refused naming it."""
    url = f"sqlite:///{tmp_path}/x.db"
    assert sqlite_retention(url) == Retention(100_000, timedelta(days=30))
    assert sqlite_retention(f"{url}?history_max=0&history_age=7d") == Retention(
        0, timedelta(days=7)
    )
    assert sqlite_retention(f"{url}?history_age=0").history_age is None
    assert sqlite_path(f"{url}?history_max=5") == f"{tmp_path}/x.db"
    assert SQLiteStore(f"{url}?history_max=5").retention.history_max == 5
    with pytest.raises(ConfigError, match="unknown option 'mode'"):
        sqlite_path(f"{url}?mode=ro")
    with pytest.raises(ConfigError, match="invalid history_max '-1'"):
        sqlite_retention(f"{url}?history_max=-1")
    with pytest.raises(ConfigError, match="invalid history_age 'soon'"):
        sqlite_retention(f"{url}?history_age=soon")


def test_postgres_url_takes_the_history_bounds_and_passes_libpq_options_on() -> None:
    """The bounds are soloist's own (never given to libpq); schema and every libpq
    parameter still work; a bound given twice or a bad one is refused naming it."""
    target = parse_url(
        "postgresql://u:pw@db:5433/app?schema=jobs&sslmode=require&history_max=10"
        "&connect_timeout=5&history_age=12h"
    )
    assert target.retention == Retention(10, timedelta(hours=12))
    assert target.schema == "jobs"
    assert "history" not in target.conninfo
    assert "sslmode=require" in target.conninfo and "connect_timeout=5" in target.conninfo
    assert parse_url("postgresql://db/app").retention == Retention()
    with pytest.raises(ConfigError, match="'history_max' is given twice"):
        parse_url("postgresql://db/app?history_max=1&history_max=2")
    with pytest.raises(ConfigError, match=r"invalid history_age '3 days'.*\*\*\*"):
        parse_url("postgresql://u:secret@db/app?history_age=3 days")


# -- SQLite -----------------------------------------------------------------------------------
def _old_sqlite_file(path: Path) -> None:
    """A store file at schema version :data:`BEFORE` holding the :data:`FINISHED` rows,
    each with one attempt record."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute(
            "CREATE TABLE soloist_schema_version (version INTEGER PRIMARY KEY, "
            "applied_at INTEGER NOT NULL)"
        )
        for number in range(1, BEFORE + 1):
            sqlite_migrations.apply_migration(conn, number, 0)
            conn.execute("INSERT INTO soloist_schema_version VALUES (?, 0)", (number,))
        for occ_id, job, days in FINISHED:
            at = to_epoch_us(T0 - timedelta(days=days))
            conn.execute(
                "INSERT INTO occurrences (id, dedupe_key, job, task, scope, plan_time, due_at, "
                "kind, state, attempt, overlap, created_at, started_at, finished_at) VALUES "
                "(?, ?, ?, 'task', '', ?, ?, 'schedule', 'succeeded', 1, 'allow', ?, ?, ?)",
                (occ_id, occ_id, job, at, at, at, at, at),
            )
            conn.execute(
                "INSERT INTO attempts (occurrence_id, fencing_token, attempt, finished_at, "
                "outcome) VALUES (?, 1, 1, ?, 'succeeded')",
                (occ_id, at),
            )
    conn.close()


async def test_sqlite_migration_indexes_the_finished_rows_of_an_existing_file(
    tmp_path: Path,
) -> None:
    """A file from before retention gains the indexes, keeps its rows, and then prunes
    through them: oldest first, each job's newest kept, attempts with their rows."""
    path = tmp_path / "s.db"
    _old_sqlite_file(path)
    store = SQLiteStore(f"sqlite:///{path}")
    try:
        await store.migrate()
        us = to_epoch_us(T0)
        with sqlite3.connect(path) as conn:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            assert names >= INDEXES
            plan = " ".join(
                str(row[3])
                for row in conn.execute(
                    "EXPLAIN QUERY PLAN " + sqlite_history._DOOMED,
                    {"upto": us, "before": us, "at": None, "id": None, "limit": 10},
                )
            )
        conn.close()
        assert "occurrences_finished" in plan and "occurrences_job_finished" in plan
        assert len(await store.occurrence_list(limit=10)) == len(FINISHED)
        assert await store.history_prune(T0, None, 1) == 1
        assert await store.occurrence_get("a1") is None
        assert await store.occurrence_attempts("a1") == []
        assert await store.history_prune(T0, None, 10) == 1  # a2; a3 and b1 are newest
        assert sorted(o.id for o in await store.occurrence_list(limit=10)) == ["a3", "b1"]
        assert [a.outcome for a in await store.occurrence_attempts("a3")] == ["succeeded"]
    finally:
        await store.close()


# -- PostgreSQL ----------------------------------------------------------------------------------
def _old_pg_schema(dsn: str, schema: str) -> None:
    """Schema ``schema`` at version :data:`BEFORE` holding the :data:`FINISHED` rows,
    each with one attempt record."""
    name = sql.Identifier(schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(name))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.schema_version (version integer PRIMARY KEY, "
                "applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            ).format(name)
        )
        for number in range(1, BEFORE + 1):
            for statement in pg_migrations.MIGRATIONS[number - 1]:
                conn.execute(sql.SQL(statement).format(schema=name))
            conn.execute(
                sql.SQL("INSERT INTO {}.schema_version (version) VALUES (%s)").format(name),
                (number,),
            )
        for occ_id, job, days in FINISHED:
            at = T0 - timedelta(days=days)
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.occurrences (id, dedupe_key, job, task, scope, plan_time, "
                    "due_at, kind, state, attempt, max_attempts, overlap, payload, created_at, "
                    "started_at, finished_at) VALUES (%(id)s, %(id)s, %(job)s, 'task', '', "
                    "%(at)s, %(at)s, 'schedule', 'succeeded', 1, 1, 'allow', '{{}}', %(at)s, "
                    "%(at)s, %(at)s)"
                ).format(name),
                {"id": occ_id, "job": job, "at": at},
            )
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.attempts (occurrence_id, fencing_token, attempt, "
                    "finished_at, outcome) VALUES (%s, 1, 1, %s, 'succeeded')"
                ).format(name),
                (occ_id, at),
            )


async def test_postgres_migration_indexes_the_finished_rows_of_an_existing_schema(
    postgres_dsn: str, postgres_url: str
) -> None:
    """A schema from before retention gains the indexes (partial: finished rows only; one
    built beforehand is kept), keeps its rows, and prunes through them."""
    schema = parse_url(postgres_url).schema
    _old_pg_schema(postgres_dsn, schema)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        # As the docs advise for a large table: one built beforehand, without blocking.
        conn.execute(
            sql.SQL(
                "CREATE INDEX CONCURRENTLY occurrences_finished ON {}.occurrences "
                "(finished_at) WHERE finished_at IS NOT NULL"
            ).format(sql.Identifier(schema))
        )
    store = PostgresStore(postgres_url)
    try:
        await store.migrate()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s",
                (schema,),
            ).fetchall()
            found = {name: definition for name, definition in rows if name in INDEXES}
            assert set(found) == INDEXES
            assert all("WHERE (finished_at IS NOT NULL)" in d for d in found.values())
            conn.execute("SET enable_seqscan = off")  # a 4-row table: ask for the index plan
            plan = "\n".join(
                str(row[0])
                for row in conn.execute(
                    "EXPLAIN " + History(schema).count, {"before": T0, "keep": None, "limit": 10}
                )
            )
        # The candidates in finish-time order straight from the index, each job's newer
        # rows probed through an index of the job's finished rows (on 4 rows the planner
        # may take migration 10's, by plan time: its first entry is the newest run).
        assert "Index Scan using occurrences_finished on occurrences o" in plan
        assert any(
            f"{index} on occurrences n" in plan
            for index in ("occurrences_job_finished", "occurrences_job_last")
        ), plan
        assert await store.history_prune(T0, None, 1) == 1
        assert await store.occurrence_get("a1") is None
        assert await store.occurrence_attempts("a1") == []
        assert await store.history_prune(T0, 0, 10) == 1  # a2; a3 and b1 are newest
        assert sorted(o.id for o in await store.occurrence_list(limit=10)) == ["a3", "b1"]
    finally:
        await store.close()
