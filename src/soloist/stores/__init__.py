"""Store implementations, selected by URL scheme (``sqlite:///path``, ``memory://``,
``postgresql://...``, ``redis://...``).

Drivers are imported lazily so that the core never imports one it does not use.
"""

from __future__ import annotations

from datetime import timedelta

from soloist.clock import Clock
from soloist.errors import ConfigError
from soloist.stores.base import Store
from soloist.stores.core import CheckedStore, checked
from soloist.stores.deadlines import lease_ttl_seconds as lease_seconds

DEFAULT_STORE_URL = "sqlite:///soloist.db"

__all__ = ["DEFAULT_STORE_URL", "CheckedStore", "Store", "check_store_url", "checked", "open_store"]


SCHEMES = ("sqlite", "memory", "postgresql", "postgres", "redis", "rediss")


def check_store_url(url: str) -> str:
    """Return the scheme of ``url``, or raise ConfigError naming it."""
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ConfigError(f"invalid store URL {url!r}: expected 'sqlite:///path.db' or 'memory://'")
    if scheme not in SCHEMES:
        raise ConfigError(
            f"unsupported store URL scheme {scheme!r} in {url!r}: "
            "expected 'sqlite', 'memory', 'postgresql' or 'redis'"
        )
    return scheme


def open_store(
    url: str, *, clock: Clock | None = None, lease_ttl: float | timedelta | None = None
) -> CheckedStore:
    """Return the store for ``url`` behind the core's checks (:func:`checked`), not yet
    migrated (call ``await store.migrate()``); its driver is ``.driver``.

    ``lease_ttl`` (seconds or a timedelta): the lease TTL of the instances using the store,
    from which its drivers derive their timeouts (call deadlines, keepalives, SQLite's busy
    timeout: see :mod:`soloist.stores.deadlines`), so that a call on a dead connection fails
    within a bound. None (tools, the CLI): keepalives, but no call deadline."""
    return checked(_driver(url, clock, lease_ttl))


def _driver(url: str, clock: Clock | None, lease_ttl: float | timedelta | None) -> Store:
    scheme = check_store_url(url)
    lease_seconds(lease_ttl)  # a bad value fails here, for every scheme
    if scheme == "memory":
        from soloist.stores.memory import MemoryStore

        return MemoryStore(url, clock=clock)
    if scheme in ("postgresql", "postgres"):
        try:
            from soloist.stores.postgres import PostgresStore
        except ImportError as exc:
            raise ConfigError(
                f"store URL scheme {scheme!r} needs psycopg 3: pip install 'soloist[postgres]' "
                f"({exc})"
            ) from None
        return PostgresStore(url, clock=clock, lease_ttl=lease_ttl)
    if scheme in ("redis", "rediss"):
        try:
            from soloist.stores.redis import RedisStore
        except ImportError as exc:
            raise ConfigError(
                f"store URL scheme {scheme!r} needs redis-py: pip install 'soloist[redis]' ({exc})"
            ) from None
        return RedisStore(url, clock=clock, lease_ttl=lease_ttl)
    from soloist.stores.sqlite import SQLiteStore

    return SQLiteStore(url, clock=clock, lease_ttl=lease_ttl)
