"""pgqueuer 1.6.0 single-job enqueue throughput (one client, sequential).

Usage: python bench/peers/pgqueuer_enqueue.py [N]   (default N=3000)
Creates schema pgq_bench (pgqueuer's own Queries.install with db_schema=pgq_bench),
drops it (CASCADE) at the end.
"""

import asyncio
import json
import sys

import asyncpg
from common import round_trips, timed_calls
from pgqueuer.adapters.persistence import qb
from pgqueuer.db import AsyncpgDriver
from pgqueuer.domain.settings import DBSettings
from pgqueuer.queries import Queries

SCHEMA = "pgq_bench"
DSN = "postgresql://root@127.0.0.1:5432/test"


async def main(n: int) -> None:
    # Own NOTIFY channel too: channels are database-global, so the default
    # 'ch_pgqueuer' could wake any other pgqueuer listener on this database.
    settings = DBSettings(db_schema=SCHEMA, channel="pgq_bench_ch")
    conn = await asyncpg.connect(DSN, server_settings={"search_path": SCHEMA})
    try:
        queries = Queries(
            AsyncpgDriver(conn),
            qbe=qb.QueryBuilderEnvironment(settings=settings),
            qbq=qb.QueryQueueBuilder(settings=settings),
            qbs=qb.QuerySchedulerBuilder(settings=settings),
        )
        await queries.install()  # CREATE SCHEMA IF NOT EXISTS pgq_bench; tables, trigger...

        rate, cpu = await timed_calls(lambda: queries.enqueue("noop", None), n)
        # Raw SELECT 1 round trips on the same asyncpg connection.
        select1 = await round_trips(lambda: conn.fetchval("SELECT 1"))
    finally:
        try:
            await conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        finally:
            await conn.close()

    print(
        json.dumps(
            {
                "pgqueuer_single_per_s": rate,
                "cpu_us_per_call": cpu,
                "select1_per_s": select1,
                "n": n,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
