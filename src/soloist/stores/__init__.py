"""Store implementations, selected by URL scheme (``sqlite:///path``, ``memory://``,
``postgresql://...``, ``redis://...``, ``etcd://...``).

Drivers are imported lazily so that the core never imports one it does not use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from datetime import timedelta

from soloist.clock import Clock
from soloist.errors import ConfigError
from soloist.stores.base import Store
from soloist.stores.core import CheckedStore, checked
from soloist.stores.deadlines import lease_ttl_seconds as lease_seconds
from soloist.stores.urls import mask_url

DEFAULT_STORE_URL = "sqlite:///soloist.db"

__all__ = ["DEFAULT_STORE_URL", "CheckedStore", "Store", "check_store_url", "checked", "open_store"]


@dataclass(frozen=True)
class Driver:
    """Where the driver of a URL scheme lives, imported only when a URL needs it: a class
    built as ``cls(url, clock=..., lease_ttl=...)``, and the extra that installs what it
    imports (None: nothing to install), and what else to install beside it (``also``: a
    choice the extra leaves to the application). A new store adds one entry to
    :data:`DRIVERS`."""

    module: str
    cls: str
    extra: str | None = None
    needs: str = ""
    also: str = ""


# soloist[postgres] installs psycopg without a libpq binding: the application picks one, and
# without any psycopg fails to import ("no pq wrapper available").
_PSYCOPG_BINDING = " 'psycopg[binary]' (or psycopg[c], or the system's libpq)"

#: The store of each URL scheme.
DRIVERS: dict[str, Driver] = {
    "sqlite": Driver("soloist.stores.sqlite", "SQLiteStore"),
    "memory": Driver("soloist.stores.memory", "MemoryStore"),
    "postgresql": Driver(
        "soloist.stores.postgres", "PostgresStore", "postgres", "psycopg 3", _PSYCOPG_BINDING
    ),
    "postgres": Driver(
        "soloist.stores.postgres", "PostgresStore", "postgres", "psycopg 3", _PSYCOPG_BINDING
    ),
    "redis": Driver("soloist.stores.redis", "RedisStore", "redis", "redis-py"),
    "rediss": Driver("soloist.stores.redis", "RedisStore", "redis", "redis-py"),
    "etcd": Driver("soloist.stores.etcd", "EtcdStore", "etcd", "aetcd"),
    "etcds": Driver("soloist.stores.etcd", "EtcdStore", "etcd", "aetcd"),
}
SCHEMES = tuple(DRIVERS)


def check_store_url(url: str) -> str:
    """Return the scheme of ``url``, or raise ConfigError naming it and every scheme there
    is: the one check of a URL's scheme (the drivers check the rest of their URLs)."""
    if not isinstance(url, str):
        raise ConfigError(f"invalid store URL {url!r}: expected a string such as {_EXAMPLES}")
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme:
        raise ConfigError(
            f"invalid store URL {mask_url(url)!r}: expected SCHEME://..., with a scheme "
            f"among {_KNOWN} (e.g. {_EXAMPLES})"
        )
    if scheme not in DRIVERS:
        raise ConfigError(
            f"unsupported store URL scheme {scheme!r} in {mask_url(url)!r}: expected one of "
            f"{_KNOWN}"
        )
    return scheme


_KNOWN = ", ".join(f"'{name}'" for name in DRIVERS)
_EXAMPLES = "'sqlite:///soloist.db', 'postgresql://host/db', 'redis://host:6379/0'"


def open_store(
    url: str, *, clock: Clock | None = None, lease_ttl: float | timedelta | None = None
) -> CheckedStore:
    """Return the store for ``url`` behind the core's checks (:func:`checked`), not yet
    migrated (call ``await store.migrate()``); its driver is ``.driver``.

    ``lease_ttl`` (seconds or a timedelta): the lease TTL of the instances using the store,
    from which its drivers derive their timeouts (call deadlines, keepalives, SQLite's busy
    timeout: see :mod:`soloist.stores.deadlines`), so that a call on a dead connection fails
    within a bound. None (tools, the CLI): keepalives, but no call deadline."""
    driver = DRIVERS[check_store_url(url)]
    lease_seconds(lease_ttl)  # a bad value fails here, for every scheme
    try:
        module = importlib.import_module(driver.module)
    except ImportError as exc:
        scheme = url.partition("://")[0]
        raise ConfigError(
            f"store URL scheme {scheme!r} needs {driver.needs}: "
            f"pip install 'soloist[{driver.extra}]'{driver.also} ({exc})"
        ) from None
    store: Store = getattr(module, driver.cls)(url, clock=clock, lease_ttl=lease_ttl)
    return checked(store)
