"""Reading a PostgreSQL store URL: the libpq connection string, the schema, and what may be
shown in messages (never the password)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict

from soloist.errors import ConfigError
from soloist.stores.urls import (
    DEFAULT_HISTORY_AGE,
    DEFAULT_HISTORY_MAX,
    Retention,
    history_bounds,
    mask_url,
    scrub,
)

__all__ = ["DEFAULT_SCHEMA", "PostgresTarget", "parse_url", "validate_schema"]

#: The schema holding soloist's tables unless the URL or the constructor names another.
DEFAULT_SCHEMA = "soloist"
SCHEMES = ("postgresql", "postgres")

# Lower case only, so the name means the same quoted or not, and at most 55 characters so
# that the NOTIFY channel ``soloist_<schema>`` fits PostgreSQL's 63-byte identifiers.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,54}")
#: The URL options that are soloist's own, not libpq's.
_HISTORY = ("history_max", "history_age")
_OWN = ("schema", *_HISTORY)


@dataclass(frozen=True)
class PostgresTarget:
    """Where a store connects: ``conninfo`` for libpq (the URL without soloist's own
    ``schema`` parameter), the ``schema``, and ``display``, a password-free description
    for messages."""

    conninfo: str
    schema: str
    display: str
    password: str | None = field(default=None, repr=False)
    #: The connection parameters the URL sets (``host``, ``sslmode``, ...).
    given: frozenset[str] = frozenset()
    #: The history bounds of the URL's ``history_max`` and ``history_age``.
    retention: Retention = field(default_factory=Retention)

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel of this schema's app."""
        return f"soloist_{self.schema}"

    def scrub(self, text: str) -> str:
        """``text`` with the password, if any, masked."""
        return scrub(text, self.password)


def validate_schema(name: str) -> str:
    """``name`` if it is a valid soloist schema name, else ConfigError naming it."""
    if not _SCHEMA_NAME.fullmatch(name) or name.startswith("pg_"):
        raise ConfigError(
            f"invalid PostgreSQL schema name {name!r}: expected 1-55 lower-case letters, "
            "digits or underscores, starting with a letter or underscore, not 'pg_...'"
        )
    return name


def parse_url(url: str, schema: str | None = None) -> PostgresTarget:
    """Read ``postgresql://user:password@host:port/db?schema=app&...`` (or ``postgres://``).

    The ``schema`` query parameter (or the ``schema`` argument; both given must agree) names
    the PostgreSQL schema of the app, default :data:`DEFAULT_SCHEMA`. ``history_max``
    (finished occurrences kept, default 100000, 0: no count limit) and ``history_age``
    (how long they are kept, default ``30d``, ``0``: no age limit) bound the history (see
    :class:`~soloist.stores.urls.Retention`). Every other parameter goes to libpq
    unchanged and is checked by it. Errors are ConfigError quoting the URL with its
    password masked."""
    scheme, sep, rest = url.partition("://")
    if scheme not in SCHEMES or not sep:
        raise ConfigError(
            f"invalid PostgreSQL store URL {mask_url(url)!r}: expected "
            "'postgresql://user@host:port/database?schema=name'"
        )
    base, _, query = rest.partition("?")
    params = parse_qsl(query, keep_blank_values=True)
    named = [value for key, value in params if key == "schema"]
    if len(named) > 1:
        raise ConfigError(f"the schema is given twice in store URL {mask_url(url)!r}")
    if named and schema is not None and named[0] != schema:
        raise ConfigError(
            f"conflicting schemas: {named[0]!r} in store URL {mask_url(url)!r} and {schema!r}"
        )
    if schema is None:
        schema = named[0] if named else DEFAULT_SCHEMA
    chosen = validate_schema(schema)
    retention = _retention(params, mask_url(url))
    # quote (not quote_plus): libpq decodes %20 but keeps '+' as it is.
    others = urlencode([(k, v) for k, v in params if k not in _OWN], quote_via=quote)
    conninfo = f"{scheme}://{base}" + (f"?{others}" if others else "")
    try:
        info = conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        raise ConfigError(f"invalid PostgreSQL store URL {mask_url(url)!r}: {exc}") from None
    password = info.get("password")
    return PostgresTarget(
        conninfo=conninfo,
        schema=chosen,
        display=_display(info, chosen),
        password=str(password) if password else None,
        given=frozenset(info),
        retention=retention,
    )


def _retention(params: list[tuple[str, str]], shown: str) -> Retention:
    """The history bounds of the URL's ``history_max`` and ``history_age`` (each at most
    once), soloist's options that libpq does not see."""
    options: dict[str, str] = {}
    for key, value in params:
        if key in _HISTORY:
            if key in options:
                raise ConfigError(f"option {key!r} is given twice in store URL {shown!r}")
            options[key] = value
    history_max, history_age = history_bounds(
        options, shown, "PostgreSQL", DEFAULT_HISTORY_MAX, DEFAULT_HISTORY_AGE
    )
    return Retention(history_max, history_age)


def _display(info: Mapping[str, object], schema: str) -> str:
    """``postgresql://user@host:port/db (schema 'x')`` from the parts that are known."""
    user = f"{info['user']}@" if info.get("user") else ""
    host = str(info.get("host") or "local socket")
    port = f":{info['port']}" if info.get("port") else ""
    database = f"/{info['dbname']}" if info.get("dbname") else ""
    return f"postgresql://{user}{host}{port}{database} (schema {schema!r})"
