"""saq 0.26.4 (Redis backend) single-job enqueue throughput (one client, sequential).

Usage: python bench/peers/saq_enqueue.py [N]   (default N=3000)
Queue name 'saqbench' on redis://127.0.0.1:6379/0; all keys containing
'saqbench' are deleted at the end.
"""

import asyncio
import json
import sys

import redis.asyncio as aioredis
from common import round_trips, timed_calls
from saq import Queue

URL = "redis://127.0.0.1:6379/0"
NAME = "saqbench"


async def cleanup(r: aioredis.Redis) -> int:
    keys = [k async for k in r.scan_iter(match=f"*{NAME}*", count=1000)]
    for i in range(0, len(keys), 500):
        await r.delete(*keys[i : i + 500])
    return len(keys)


async def main(n: int) -> None:
    queue = Queue.from_url(URL, name=NAME)  # RedisQueue
    plain = aioredis.from_url(URL)
    try:
        await queue.connect()
        rate, cpu = await timed_calls(lambda: queue.enqueue("noop"), n)
        ping = await round_trips(plain.ping)  # on a plain redis-py asyncio client
    finally:
        try:
            await cleanup(plain)
        finally:
            await plain.aclose()
            await queue.disconnect()
    print(
        json.dumps({"saq_single_per_s": rate, "cpu_us_per_call": cpu, "ping_per_s": ping, "n": n})
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
