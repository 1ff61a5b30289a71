"""Read-only commands (history, show, status, jobs, next) never migrate or create anything.

Each runs as the real ``soloist`` command against a store of the test's own: a SQLite file
that does not exist or belongs to another app, a PostgreSQL schema, a Redis key prefix.
Where no soloist store exists they exit 1 with one line naming it, and afterwards nothing
new exists: no file, no table, no schema, no key. On a real store they answer and change
nothing either.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import redis

from soloist import Scheduler
from soloist.errors import StoreUnavailableError

SOLOIST = Path(sys.executable).parent / "soloist"
READ_ONLY = (["history"], ["show", "f" * 32], ["status"], ["jobs"], ["next", "weekly"])


def soloist(*args: str, store: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLOIST_")}
    return subprocess.run(
        [str(SOLOIST), *args, "--store", store],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def refused(done: subprocess.CompletedProcess[str], names: str) -> None:
    """Exit 1, one stderr line saying there is no store (or an old one) and naming it."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert " store at " in done.stderr and names in done.stderr, done.stderr


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- SQLite -----------------------------------------------------------------------------------


def test_read_only_commands_create_no_sqlite_file(tmp_path: Path) -> None:
    """A store path that does not exist stays missing; its directory stays empty."""
    for args in READ_ONLY:
        refused(soloist(*args, store="sqlite:///missing.db", cwd=tmp_path), "missing.db")
    assert list(tmp_path.iterdir()) == []


def test_read_only_commands_leave_another_apps_sqlite_file_alone(tmp_path: Path) -> None:
    """A SQLite file of another app gets no soloist table, no WAL journal, no change."""
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    before = digest(other)
    for args in READ_ONLY:
        refused(soloist(*args, store=f"sqlite:///{other}", cwd=tmp_path), str(other))
    assert digest(other) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_read_only_commands_work_on_a_store_and_change_nothing(tmp_path: Path) -> None:
    """On a migrated store the commands answer (exit 0) and leave the data as it was."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert soloist("migrate", store=url, cwd=tmp_path).returncode == 0
    before = digest(tmp_path / "x.db")
    for args in (["history"], ["status"], ["jobs"]):
        done = soloist(*args, store=url, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
    unknown = soloist("show", "f" * 32, store=url, cwd=tmp_path)
    assert unknown.returncode == 2 and "f" * 32 in unknown.stderr  # unknown id, not no store
    assert digest(tmp_path / "x.db") == before


def test_read_only_commands_refuse_an_older_schema(tmp_path: Path) -> None:
    """A store at an older schema version is not upgraded by a read-only command: it
    says to run 'soloist migrate'."""
    path = tmp_path / "x.db"
    assert soloist("migrate", store=f"sqlite:///{path}", cwd=tmp_path).returncode == 0
    with sqlite3.connect(path) as conn:
        conn.execute(
            "DELETE FROM soloist_schema_version WHERE version = "
            "(SELECT MAX(version) FROM soloist_schema_version)"
        )
    before = digest(path)
    done = soloist("history", store=f"sqlite:///{path}", cwd=tmp_path)
    refused(done, str(path))
    assert "soloist migrate" in done.stderr
    assert digest(path) == before


def test_scheduler_without_migrate_creates_nothing(tmp_path: Path) -> None:
    """Scheduler(url, migrate=False) raises StoreUnavailableError naming a missing store
    and does not create it; on an existing store it works."""
    path = tmp_path / "x.db"
    app = Scheduler(f"sqlite:///{path}", migrate=False)
    with pytest.raises(StoreUnavailableError, match="no SQLite store"):
        app.history()
    app.close()
    assert not path.exists()
    Scheduler(f"sqlite:///{path}").close()  # nothing opened yet: still nothing
    assert not path.exists()
    maker = Scheduler(f"sqlite:///{path}")
    maker.history()  # opens and migrates
    maker.close()
    reader = Scheduler(f"sqlite:///{path}", migrate=False)
    assert reader.history() == []
    reader.close()


# -- PostgreSQL -------------------------------------------------------------------------------


def _tables(dsn: str, schema: str) -> tuple[bool, list[str]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,)
        )
        return exists.fetchone() is not None, [row[0] for row in tables.fetchall()]


def test_read_only_commands_create_no_postgres_schema_or_table(
    postgres_dsn: str, make_postgres_url: Callable[[], str], tmp_path: Path
) -> None:
    """A schema that does not exist is not created; an empty one gets no table; a
    migrated one answers."""
    url = make_postgres_url()
    schema = url.rpartition("schema=")[2]
    for args in READ_ONLY:
        refused(soloist(*args, store=url, cwd=tmp_path), schema)
    assert _tables(postgres_dsn, schema) == (False, [])
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    for args in READ_ONLY:
        refused(soloist(*args, store=url, cwd=tmp_path), schema)
    assert _tables(postgres_dsn, schema) == (True, [])
    assert soloist("migrate", store=url, cwd=tmp_path).returncode == 0
    for args in (["history"], ["status"], ["jobs"]):
        done = soloist(*args, store=url, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)


# -- Redis ------------------------------------------------------------------------------------


def test_read_only_commands_write_no_redis_key(
    redis_server: str, make_redis_url: Callable[[], str], tmp_path: Path
) -> None:
    """An empty key prefix stays empty; a migrated one answers and keeps the same keys."""
    url = make_redis_url()
    prefix = url.rpartition("prefix=")[2]
    client = redis.Redis.from_url(redis_server)

    def keys() -> list[bytes]:
        return sorted(client.scan_iter(match=f"{{{prefix}}}:*"))

    try:
        for args in READ_ONLY:
            refused(soloist(*args, store=url, cwd=tmp_path), prefix)
        assert keys() == []
        assert soloist("migrate", store=url, cwd=tmp_path).returncode == 0
        before = {key: client.dump(key) for key in keys()}
        assert before
        for args in (["history"], ["status"], ["jobs"]):
            done = soloist(*args, store=url, cwd=tmp_path)
            assert done.returncode == 0, (args, done.stderr)
        assert {key: client.dump(key) for key in keys()} == before
    finally:
        client.close()
