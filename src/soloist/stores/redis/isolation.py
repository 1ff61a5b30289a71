"""Removing the Redis key prefixes made for tests and benchmarks
(:class:`soloist.testing.isolated.IsolatedStores`): the driver half of isolation."""

from __future__ import annotations

import re
from collections.abc import Iterable

import redis.asyncio

from soloist.stores.redis import parse_url

__all__ = ["delete_prefixes"]

#: Keys unlinked per command while scanning.
BATCH = 1000


async def delete_prefixes(url: str, prefixes: Iterable[str]) -> None:
    """Delete every key of each of ``prefixes`` (``{prefix}:...``, the layout of a Redis
    store) on the server of ``url``, with ``SCAN`` and ``UNLINK`` in batches, over a client
    of its own (the URL's soloist options are ignored)."""
    names = list(prefixes)
    if not names:
        return
    client = redis.asyncio.Redis.from_url(parse_url(url).driver_url)
    try:
        for prefix in names:
            batch: list[bytes] = []
            async for key in client.scan_iter(match=_pattern(prefix), count=BATCH):
                batch.append(key)
                if len(batch) >= BATCH:
                    await client.unlink(*batch)
                    batch.clear()
            if batch:
                await client.unlink(*batch)
    finally:
        await client.aclose()


def _pattern(prefix: str) -> str:
    """The SCAN pattern of the keys of ``prefix``: glob characters escaped."""
    return re.sub(r"([\\*?\[\]{}])", r"\\\1", "{" + prefix + "}") + ":*"
