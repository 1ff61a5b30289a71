"""Isolated stores: fresh, empty storage on a real server for one test or one measurement,
removed afterwards.

soloist's own tests, its benchmark and anyone running the conformance suite against
their own PostgreSQL, Redis or etcd server need the same thing: a store URL that no other
test sees, and nothing left behind. :class:`IsolatedStores` makes such URLs on the
server of a base URL, one kind of storage per store:

* PostgreSQL: a new schema (``<label>_<hex>``; the URL's ``schema`` parameter replaced),
  dropped with ``DROP SCHEMA ... CASCADE``;
* Redis: a new key prefix (``<label>-<hex>``; the URL's ``prefix`` option replaced), its
  keys deleted with ``SCAN`` and ``UNLINK``;
* etcd: a new key prefix (``<label>-<hex>``: keys under ``/<label>-<hex>/``; the URL's
  ``prefix`` parameter replaced), every key under it deleted;
* SQLite: a new file in ``directory`` (else a temporary directory of its own; the path of
  the base URL only selects the kind of store), deleted with its ``-wal`` and ``-shm``;
* memory: ``memory://`` itself (every store opened on it is new and empty).

The removals are the stores' own (``soloist.stores.<kind>.isolation``), imported when
needed: this module imports no database driver. For example, the conformance suite on
your PostgreSQL server::

    import pytest

    from soloist.clock import Clock
    from soloist.stores import open_store
    from soloist.testing.conformance import StoreConformance, StoreFactory
    from soloist.testing.isolated import IsolatedStores


    class TestMyServer(StoreConformance):
        @pytest.fixture
        async def make_store(self):
            async with IsolatedStores("postgresql://db.internal/test") as isolated:
                url = isolated.url()
                yield lambda clock: open_store(url, clock=clock)
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path
from types import TracebackType

from soloist.errors import ConfigError
from soloist.stores import check_store_url
from soloist.stores.urls import mask_url

__all__ = ["IsolatedStores"]

#: Store kinds by URL scheme (the aliases folded).
KINDS = {"postgres": "postgresql", "rediss": "redis", "etcds": "etcd"}
# Lower case so that it is a valid PostgreSQL schema name once '-' becomes '_', and short
# enough that a schema name (label, '_', 12 hex digits) stays within 55 characters.
_LABEL = re.compile(r"[a-z][a-z0-9_-]{0,39}")


class IsolatedStores:
    """Makes store URLs to fresh, empty storage on the server of ``url``, and removes all
    of it again with :meth:`aremove` (or :meth:`remove`, or on leaving ``async with`` /
    ``with``).

    ``label`` starts every name made (``t``: schemas ``t_<hex>``, Redis and etcd prefixes
    ``t-<hex>``, files ``t-<hex>.db``): lower-case letters, digits, ``_`` and ``-``, at
    most 40.
    ``directory`` holds the SQLite files; without it, a temporary directory is made and
    deleted at removal. Raises :class:`~soloist.errors.ConfigError` for an unknown store
    URL and ``ValueError`` for a bad label."""

    def __init__(
        self,
        url: str,
        *,
        label: str = "soloist_test",
        directory: str | os.PathLike[str] | None = None,
    ) -> None:
        scheme = check_store_url(url)
        if not _LABEL.fullmatch(label):
            raise ValueError(
                f"invalid label {label!r}: expected 1-40 lower-case letters, digits, '_' or "
                "'-', starting with a letter"
            )
        self.base_url = url
        #: ``postgresql``, ``redis``, ``etcd``, ``sqlite`` or ``memory``.
        self.kind = KINDS.get(scheme, scheme)
        if self.kind not in ("postgresql", "redis", "etcd", "sqlite", "memory"):
            # Never hand out the given store itself as "fresh" storage.
            raise ConfigError(
                f"IsolatedStores cannot isolate {self.kind!r} stores ({mask_url(url)}): "
                "expected a postgresql, redis, etcd, sqlite or memory URL"
            )
        if self.kind == "postgresql" and label.startswith("pg_"):
            raise ValueError(f"invalid label {label!r}: PostgreSQL schema names cannot start 'pg_'")
        self.label = label
        self._directory = Path(directory) if directory is not None else None
        self._temporary: Path | None = None
        self._made: list[str] = []
        self._names: list[str] = []

    @property
    def made(self) -> tuple[str, ...]:
        """The URLs made and not removed yet."""
        return tuple(self._made)

    def url(self) -> str:
        """A URL to new, empty storage of its own (created by the store's ``migrate()``)."""
        name = f"{self.label}_{uuid.uuid4().hex[:12]}"
        if self.kind == "postgresql":
            name = name.replace("-", "_")
            made = _with_parameter(self.base_url, "schema", name)
        elif self.kind in ("redis", "etcd"):
            name = name.replace("_", "-")
            made = _with_parameter(self.base_url, "prefix", name)
        elif self.kind == "sqlite":
            # An absolute path: "sqlite:///" + "/tmp/..." is the four-slash absolute form.
            made = f"sqlite:///{(self._sqlite_directory() / f'{name}.db').resolve()}"
        else:  # memory: each store is its own, and nothing outlives it
            return self.base_url
        self._names.append(name)
        self._made.append(made)
        return made

    def _sqlite_directory(self) -> Path:
        if self._directory is not None:
            return self._directory
        if self._temporary is None:
            self._temporary = Path(tempfile.mkdtemp(prefix=f"{self.label}-"))
        return self._temporary

    async def aremove(self) -> None:
        """Remove the storage of every URL made (stores on it must be closed first); safe
        to call again."""
        names, made = list(self._names), list(self._made)
        if self.kind == "postgresql" and names:
            from soloist.stores.postgres.isolation import drop_schemas

            await drop_schemas(self.base_url, names)
        elif self.kind == "redis" and names:
            from soloist.stores.redis.isolation import delete_prefixes

            await delete_prefixes(self.base_url, names)
        elif self.kind == "etcd" and names:
            from soloist.stores.etcd.isolation import delete_prefixes as delete_etcd_prefixes

            await delete_etcd_prefixes(self.base_url, names)
        elif self.kind == "sqlite":
            from soloist.stores.sqlite.isolation import remove_database

            for url in made:
                remove_database(url)
            if self._temporary is not None:
                shutil.rmtree(self._temporary, ignore_errors=True)
                self._temporary = None
        self._names.clear()
        self._made.clear()

    def remove(self) -> None:
        """:meth:`aremove` from sync code (a pytest fixture, a script); not inside a running
        event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self.aremove())
            return
        raise RuntimeError("IsolatedStores.remove() inside an event loop: await aremove()")

    async def __aenter__(self) -> IsolatedStores:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aremove()

    def __enter__(self) -> IsolatedStores:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.remove()


def _with_parameter(url: str, key: str, value: str) -> str:
    """``url`` with its query parameter ``key`` set to ``value`` (any others kept as
    written, percent-encoding included)."""
    base, _, query = url.partition("?")
    kept = [part for part in query.split("&") if part and part.partition("=")[0] != key]
    return f"{base}?{'&'.join([*kept, f'{key}={value}'])}"
