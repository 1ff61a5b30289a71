"""Removing the etcd key prefixes made for tests and benchmarks
(:class:`soloist.testing.isolated.IsolatedStores`): the driver half of isolation."""

from __future__ import annotations

from collections.abc import Iterable

from soloist.stores.deadlines import Deadlines
from soloist.stores.etcd.connections import Connections, prefix_end
from soloist.stores.etcd.url import parse_url

__all__ = ["delete_prefixes"]


async def delete_prefixes(url: str, prefixes: Iterable[str]) -> None:
    """Delete every key of each of ``prefixes`` (``/{prefix}/...``, the layout of an etcd
    store) on the members of ``url``, one range deletion each, over a connection of its
    own (the URL's soloist options are ignored)."""
    from soloist.stores.etcd.ops import delete

    conns = Connections(parse_url(url), Deadlines.from_ttl(None))
    try:
        with conns.translated():
            for prefix in prefixes:
                start = f"/{prefix}/".encode()
                await conns.txn([], [delete(start, prefix_end(start))])
    finally:
        await conns.close_all()
