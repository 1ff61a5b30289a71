"""Figures of the machine and the server alone (store round trips, raw SQL, raw PINGs, a
pure-Python loop), measured in the same invocation so that the others can be read as
ratios to them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from soloist.stores import open_store
from soloist_bench.config import BenchConfig
from soloist_bench.targets import RawSQL, Target, raw_redis, raw_sql

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
        if target.kind == "redis":
            result["store_round_trips_per_s"] = await _rate(store.now, 1.0)
            async with raw_redis(url) as client:
                result["ping_per_s"] = await _rate(client.ping, 1.0)
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
    if target.kind != "postgresql":
        return None
    async with raw_sql(target.url) as sql:
        rows = await sql("SHOW server_version")
    return str(rows[0][0]) if rows else None
