"""soloist.testing.isolated.IsolatedStores: fresh storage per URL on a real server, and
nothing of it left after removal."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest
import redis

from soloist.stores import open_store
from soloist.testing.conformance import new_occurrence
from soloist.testing.isolated import IsolatedStores


async def _write_one(url: str) -> None:
    """Migrate the store at ``url`` and insert one occurrence into it."""
    store = open_store(url)
    try:
        await store.migrate()
        await store.occurrence_insert_many([new_occurrence("k1")])
        assert len(await store.occurrence_list(limit=10)) == 1
    finally:
        await store.close()


def _schemas(dsn: str, label: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (f"{label}\\_%",)
        ).fetchall()
    return sorted(row[0] for row in rows)


async def test_postgres_schemas_are_fresh_and_dropped(postgres_dsn: str) -> None:
    """Each URL names a new schema (the base URL's own schema replaced) that starts empty;
    aremove drops every schema made."""
    label = "iso_pg"
    async with IsolatedStores(f"{postgres_dsn}?schema=ignored", label=label) as isolated:
        first, second = isolated.url(), isolated.url()
        assert first != second and "ignored" not in first
        await _write_one(first)
        await _write_one(second)  # empty at first: the other schema's row is not seen
        assert len(_schemas(postgres_dsn, label)) == 2
    assert _schemas(postgres_dsn, label) == []
    assert isolated.made == ()


async def test_redis_prefixes_are_fresh_and_their_keys_deleted(redis_server: str) -> None:
    """Each URL names a new key prefix (the base URL's own prefix replaced); aremove
    deletes every key of every prefix made, and no other key."""
    client = redis.Redis.from_url(redis_server)
    client.set("iso-redis-bystander", "kept")
    try:
        async with IsolatedStores(f"{redis_server}?prefix=ignored", label="iso-redis") as isolated:
            first, second = isolated.url(), isolated.url()
            assert "prefix=ignored" not in first
            await _write_one(first)
            await _write_one(second)
            assert list(client.scan_iter(match="{iso-redis-*", count=1000))
        assert list(client.scan_iter(match="{iso-redis-*", count=1000)) == []
        assert client.get("iso-redis-bystander") == b"kept"
    finally:
        client.delete("iso-redis-bystander")
        client.close()


async def test_sqlite_files_are_fresh_and_deleted_with_their_companions(tmp_path: Path) -> None:
    """Each URL is a new file in the given directory; aremove deletes it and its -wal and
    -shm files (left behind by a killed process), and leaves other files alone."""
    (tmp_path / "other.db").write_text("")
    isolated = IsolatedStores("sqlite:///ignored.db", label="iso", directory=tmp_path)
    url = isolated.url()
    await _write_one(url)
    database = url.removeprefix("sqlite:///")
    for suffix in ("-wal", "-shm"):
        Path(database + suffix).write_bytes(b"")
    assert len(os.listdir(tmp_path)) == 4
    await isolated.aremove()
    assert os.listdir(tmp_path) == ["other.db"]


def test_sqlite_without_a_directory_uses_a_temporary_one_removed_afterwards() -> None:
    """Without a directory the files go to a temporary directory of its own, deleted by
    remove() (the sync form, for fixtures)."""
    with IsolatedStores("sqlite:///ignored.db") as isolated:
        path = Path(isolated.url().removeprefix("sqlite:///"))
        assert path.parent.is_dir() and not path.exists()
    assert not path.parent.exists()


def test_memory_urls_are_the_memory_store() -> None:
    """memory:// is fresh by itself: every store opened on it is new."""
    with IsolatedStores("memory://") as isolated:
        assert isolated.url() == "memory://" and isolated.kind == "memory"


@pytest.mark.parametrize("label", ["", "Upper", "1st", "a b", "x" * 41])
def test_bad_labels_raise_value_error(label: str) -> None:
    """A label that would not make a valid schema name or prefix is refused, naming it."""
    with pytest.raises(ValueError, match="invalid label"):
        IsolatedStores("memory://", label=label)


def test_a_store_it_cannot_isolate_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheme it has no isolation for (a new driver) is refused: the given store itself
    is never handed out as fresh storage."""
    from soloist.errors import ConfigError
    from soloist.stores import DRIVERS, Driver

    monkeypatch.setitem(DRIVERS, "mysql", Driver("soloist.stores.memory", "MemoryStore"))
    with pytest.raises(ConfigError, match="'mysql'"):
        IsolatedStores("mysql://app:secret@db/prod")


def test_a_pg_label_is_refused_for_postgres() -> None:
    """PostgreSQL reserves pg_ schema names: such a label is refused at once."""
    with pytest.raises(ValueError, match="pg_"):
        IsolatedStores("postgresql://127.0.0.1/test", label="pg_x")
