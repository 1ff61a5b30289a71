"""Removing the SQLite files made for tests and benchmarks
(:class:`soloist.testing.isolated.IsolatedStores`): the driver half of isolation."""

from __future__ import annotations

import contextlib
import os

from soloist.stores.sqlite import sqlite_path

__all__ = ["remove_database"]

#: The files SQLite keeps beside a database in WAL mode.
COMPANIONS = ("", "-wal", "-shm", "-journal")


def remove_database(url: str) -> None:
    """Delete the database file of the ``sqlite:`` store ``url`` and its ``-wal``, ``-shm``
    and ``-journal`` files; missing ones are skipped. The store must be closed."""
    path = sqlite_path(url)
    for suffix in COMPANIONS:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + suffix)
