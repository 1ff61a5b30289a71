"""Removing the PostgreSQL schemas made for tests and benchmarks
(:class:`soloist.testing.isolated.IsolatedStores`): the driver half of isolation."""

from __future__ import annotations

from collections.abc import Iterable

import psycopg
from psycopg import sql

from soloist.stores.postgres import parse_url
from soloist.stores.postgres.url import validate_schema

__all__ = ["drop_schemas"]


async def drop_schemas(url: str, schemas: Iterable[str]) -> None:
    """``DROP SCHEMA ... CASCADE`` each of ``schemas`` (absent ones are skipped) on the
    server of ``url``, over one connection of its own (the URL's ``schema`` parameter is
    ignored). Names are checked as store schema names first."""
    names = [validate_schema(name) for name in schemas]
    if not names:
        return
    conninfo = parse_url(url).conninfo
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        for name in names:
            statement = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
            await conn.execute(statement)
