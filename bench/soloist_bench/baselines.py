"""Figures of the machine and the server alone (store round trips, raw SQL, raw PINGs, raw
etcd reads and writes, a pure-Python loop), measured in the same invocation so that the
others can be read as ratios to them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from soloist.stores import open_store
from soloist_bench.config import BenchConfig
from soloist_bench.targets import (
    RawEtcd,
    RawSQL,
    Target,
    etcd_version,
    raw_etcd,
    raw_redis,
    raw_sql,
)

__all__ = ["measure_baseline", "server_version"]


async def measure_baseline(target: Target, config: BenchConfig) -> dict[str, Any]:
    """Figures of the machine and the server alone, to read the others against."""
    url = target.fresh_url()
    store = open_store(url)
    try:
        await store.migrate()
        result: dict[str, Any] = {"python_loops_per_s": _python_loops()}
        if target.kind == "postgresql":
            result["store_round_trips_per_s"] = await _rate(store.now, 1.0)
            async with raw_sql(url) as sql:

                async def select_one() -> None:
                    await sql("SELECT 1")

                result["select_1_per_s"] = await _rate(select_one, 1.0)
                schema = str(getattr(store.driver, "schema", ""))
                if not schema:
                    raise RuntimeError(f"no PostgreSQL schema on store {store!r}")
                result["raw_insert_rows_per_s"] = await _raw_insert_rate(sql, schema, config)
                result["raw_insert_one_per_s"] = await _raw_insert_one_rate(sql, schema)
        if target.kind == "redis":
            result["store_round_trips_per_s"] = await _rate(store.now, 1.0)
            async with raw_redis(url) as client:
                result["ping_per_s"] = await _rate(client.ping, 1.0)
                result["raw_script_per_s"] = await _raw_script_rate(client, url)
        if target.kind == "etcd":
            # No store.now() figure: the etcd store's clock is the member's, read from
            # an offset kept in this process, so it makes no round trip to time.
            async with raw_etcd(url) as etcd:
                result.update(await _raw_etcd(etcd, config))
        return result
    finally:
        await store.close()


async def _raw_insert_rate(sql: RawSQL, schema: str, config: BenchConfig) -> float:
    """Rows/s of a plain ``INSERT ... SELECT FROM unnest`` of comparable rows (a text key,
    two timestamps, a small json), batches of ``config.batch``, one index."""
    table = f'"{schema}".bench_raw'  # in the fresh bench schema
    await sql(
        f"CREATE TABLE {table} (id text PRIMARY KEY, due_at timestamptz, "
        "created_at timestamptz, payload json)",
    )
    started = time.perf_counter()
    for offset in range(0, config.tasks, config.batch):
        ids = [uuid.uuid4().hex for _ in range(min(config.batch, config.tasks - offset))]
        await sql(
            f"INSERT INTO {table} SELECT id, now(), now(), '{{}}'::json "  # noqa: S608
            "FROM unnest(%(ids)s::text[]) AS id",
            {"ids": ids},
        )
    return config.tasks / (time.perf_counter() - started)


async def _raw_insert_one_rate(sql: RawSQL, schema: str) -> float:
    """Rows/s of durable single-row ``INSERT`` statements, one at a time in autocommit
    (each its own commit, flushed to the WAL with ``synchronous_commit=on``), into a table
    shaped like the occurrences an enqueue writes: a text primary key, a unique text key,
    two timestamps and a small json payload. One ``aenqueue`` on this server cannot beat
    it; ``SELECT 1`` commits nothing, so it is not bound by it."""
    table = f'"{schema}".bench_raw_one'  # in the fresh bench schema
    await sql(
        f"CREATE TABLE {table} (id text PRIMARY KEY, dedupe_key text UNIQUE NOT NULL, "
        "due_at timestamptz NOT NULL, created_at timestamptz NOT NULL, payload json)",
    )
    query = f"INSERT INTO {table} VALUES (%s, %s, now(), now(), %s::json)"  # noqa: S608

    async def insert_one() -> None:
        key = uuid.uuid4().hex
        await sql(query, (key, f"t:{key}", "{}"))

    return await _rate(insert_one, 1.0)


#: The fields of the hash the raw Redis script writes: about 200 bytes, as an occurrence
#: of the benchmark task holds (ids, job and task names, times, state, attempt, payload).
_SCRIPT_FIELDS = (
    ("id", "0" * 32),
    ("job", "bench_noop"),
    ("task", "bench_noop"),
    ("scope", ""),
    ("state", "scheduled"),
    ("plan", "1790000000000000"),
    ("due", "1790000000000000"),
    ("created", "1790000000000000"),
    ("att", "0"),
    ("max", "1"),
    ("overlap", "allow"),
    ("payload", "{}"),
    ("dedupe", "t:" + "0" * 32),
)
#: The fewest writes of one enqueue on Redis: the occurrence's hash, and its id in the
#: due-time index.
_RAW_SCRIPT = """
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
return 1
"""


async def _raw_script_rate(client: Any, url: str) -> float:
    """``EVALSHA``/s of a trivial script doing what one enqueue minimally does on Redis: an
    ``HSET`` of a new ~200-byte hash and a ``ZADD`` to one sorted set, one call at a time,
    under the URL's fresh key prefix (removed with it)."""
    from soloist.stores.redis import parse_url

    base = parse_url(url).base + ":bench_raw"
    sha = await client.script_load(_RAW_SCRIPT)
    fields = [part for pair in _SCRIPT_FIELDS for part in pair]
    count = 0

    async def script() -> None:
        nonlocal count
        count += 1
        member = f"{count:032x}"
        keys = (f"{base}:occ:{member}", f"{base}:due")
        await client.evalsha(sha, 2, *keys, count, member, *fields)

    return await _rate(script, 1.0)


#: A value of the size of the benchmark's occurrences as the etcd store writes them (a
#: JSON array of about 230 bytes).
_ETCD_VALUE = b"x" * 230
#: Puts per transaction in the raw batch: etcd's default ``--max-txn-ops``.
_ETCD_BATCH = 128


async def _raw_etcd(etcd: RawEtcd, config: BenchConfig) -> dict[str, float]:
    """The etcd baselines: single-key reads (``range_per_s``, the ``PING`` of etcd: the
    leader confirms its commit index, nothing is written); one item at a time, a put and
    then a transaction that rewrites the key only while it is unchanged
    (``raw_put_and_txn_items_per_s``: the fewest writes an insert and a fenced claim or
    completion take, each a Raft entry fsynced by the members); ``config.tasks`` puts in
    transactions of 128 (``raw_put_rows_per_s``, the raw ``INSERT`` of etcd)."""
    key = etcd.base + b"read"
    await etcd.put(key, _ETCD_VALUE)
    range_per_s = await _rate(lambda: etcd.get(key), 1.0)
    items = 0

    async def put_and_txn() -> None:
        nonlocal items
        item = etcd.base + b"item/%d" % items
        items += 1
        revision = await etcd.put(item, _ETCD_VALUE)
        if not await etcd.put_if_unchanged(item, revision, _ETCD_VALUE):
            raise RuntimeError(f"the raw etcd transaction on {item!r} did not apply")

    put_and_txn_per_s = await _rate(put_and_txn, 1.0)
    started = time.perf_counter()
    for offset in range(0, config.tasks, _ETCD_BATCH):
        count = min(_ETCD_BATCH, config.tasks - offset)
        await etcd.put_many(
            [(etcd.base + b"row/%d" % (offset + i), _ETCD_VALUE) for i in range(count)]
        )
    return {
        "range_per_s": range_per_s,
        "raw_put_and_txn_items_per_s": put_and_txn_per_s,
        "raw_put_rows_per_s": config.tasks / (time.perf_counter() - started),
    }


async def _rate(call: Callable[[], Awaitable[object]], seconds: float) -> float:
    count, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        await call()
        count += 1
    return count / elapsed


def _python_loops() -> float:
    """Iterations per second of a fixed pure-Python loop: this CPU's speed, right now."""
    started, data = time.perf_counter(), {}
    for i in range(300_000):
        data[i & 1023] = (i, str(i & 63))
    return 300_000 / (time.perf_counter() - started)


async def server_version(target: Target) -> str | None:
    if target.kind == "etcd":
        return await etcd_version(target.url)
    if target.kind != "postgresql":
        return None
    async with raw_sql(target.url) as sql:
        rows = await sql("SHOW server_version")
    return str(rows[0][0]) if rows else None
