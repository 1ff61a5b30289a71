"""Checking a SQLite store without creating or changing anything: a read-only connection of
its own (``mode=ro``), so a missing file is not created and another app's database gets
neither soloist's tables nor WAL journaling."""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import quote

from soloist.errors import StoreUnavailableError
from soloist.stores.existing import schema_problem
from soloist.stores.sqlite import migrations

__all__ = ["check_schema"]


def check_schema(path: str) -> None:
    """Raise StoreUnavailableError unless ``path`` is a SQLite file at soloist's newest
    schema (StoreError if newer). Blocking: run it on a worker thread."""
    if not os.path.isfile(path):
        raise StoreUnavailableError(
            f"no SQLite store at {path!r}: the file does not exist; check the store URL "
            "(--store, SOLOIST_STORE_URL): a store is created by 'soloist migrate' or by a "
            "running instance"
        )
    uri = f"file:{quote(os.path.abspath(path))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        try:
            found = migrations.schema_version(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreUnavailableError(f"cannot read SQLite store at {path!r}: {exc}") from None
    problem = schema_problem(
        repr(path), found, len(migrations.MIGRATIONS), "the file has no soloist tables", "SQLite"
    )
    if problem is not None:
        raise problem
