"""``memory://``: the whole store in plain dicts, for tests and single-process use.

Each method does all its work under one ``threading.Lock`` with no ``await`` in between, so
every method is atomic even when sync code drives the store through ``asyncio.run`` in
another thread. Values cross the boundary as copies: payloads and results are JSON
round-tripped on the way in (exactly what a durable store would give back) and deep-copied
on the way out, so a caller mutating a returned dict cannot change the store.

Modules: :mod:`~soloist.stores.memory.store` (the methods), ``rows`` (stored values and
their copies), ``coordination`` (leader leases and instance heartbeats). Nothing can notify
another process, so ``work_wait`` only sleeps on the store's clock.
"""

from soloist.stores.memory.store import MemoryStore

__all__ = ["MemoryStore"]
