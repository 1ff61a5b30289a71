"""The store of a Django project, from its settings: a URL given as such, or one derived
from a database of ``settings.DATABASES``, so that a project configures its database once.

:func:`store_url`, in this order:

1. ``settings.SOLOIST_STORE_URL``, when set;
2. else the ``SOLOIST_STORE_URL`` environment variable, when set (a deployment's choice);
3. else the database ``settings.SOLOIST_DATABASE`` names (default ``"default"``), as a
   ``postgresql://`` URL (ENGINE ``...postgresql`` or PostGIS: NAME, USER, PASSWORD, HOST,
   PORT, and the libpq parameters among OPTIONS, e.g. ``sslmode``) or a ``sqlite://`` URL
   (ENGINE ``...sqlite3``: the NAME file; soloist's tables sit beside Django's, in WAL
   mode). ``settings.SOLOIST_STORE_OPTIONS`` adds soloist's own URL options, e.g.
   ``{"schema": "jobs", "history_age": "7d"}``. On PostgreSQL soloist keeps its tables in
   its own schema (``soloist`` unless told), apart from Django's.

Another engine, a database that is not there, or an in-memory SQLite database (which no
other process can open) raises ImproperlyConfigured naming the setting; messages never show
the password.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = ["database_store_url", "store_url"]

URL_SETTING = "SOLOIST_STORE_URL"
DATABASE_SETTING = "SOLOIST_DATABASE"
OPTIONS_SETTING = "SOLOIST_STORE_OPTIONS"

POSTGRES_ENGINES = (
    "django.db.backends.postgresql",
    "django.db.backends.postgresql_psycopg2",
    "django.contrib.gis.db.backends.postgis",
)
SQLITE_ENGINES = ("django.db.backends.sqlite3", "django.contrib.gis.db.backends.spatialite")


def store_url() -> str:
    """The project's store URL: ``settings.SOLOIST_STORE_URL``, else the environment's
    ``SOLOIST_STORE_URL``, else derived from ``DATABASES[settings.SOLOIST_DATABASE]``
    (default ``"default"``), see :func:`database_store_url`."""
    given: object = getattr(settings, URL_SETTING, None)
    if given is not None:
        if not isinstance(given, str) or not given.strip():
            raise ImproperlyConfigured(
                f"invalid settings.{URL_SETTING} {given!r}: expected a store URL such as "
                "'postgresql://host/db' (or leave it unset to use settings.DATABASES)"
            )
        return given
    from_env = os.environ.get(URL_SETTING, "").strip()
    if from_env:
        return from_env
    alias: object = getattr(settings, DATABASE_SETTING, "default")
    options: object = getattr(settings, OPTIONS_SETTING, None)
    return database_store_url(alias, options)


def database_store_url(alias: object = "default", options: object = None) -> str:
    """The store URL of the Django database ``alias`` (a key of ``settings.DATABASES``),
    with soloist's URL ``options`` (``schema``, ``history_max``, ``history_age``) added."""
    databases: Mapping[str, Mapping[str, Any]] = settings.DATABASES
    if not isinstance(alias, str) or alias not in databases:
        known = ", ".join(repr(name) for name in databases) or "none"
        raise ImproperlyConfigured(
            f"invalid settings.{DATABASE_SETTING} {alias!r}: expected a database of "
            f"settings.DATABASES ({known})"
        )
    database = databases[alias]
    engine = str(database.get("ENGINE", ""))
    where = f"settings.DATABASES[{alias!r}]"
    if engine in SQLITE_ENGINES:
        url = _sqlite_url(database, where)
    elif engine in POSTGRES_ENGINES:
        url = _postgres_url(database)
    else:
        raise ImproperlyConfigured(
            f"{where} has ENGINE {engine!r}, which soloist has no store for: soloist can "
            "share a PostgreSQL or SQLite database; set settings.SOLOIST_STORE_URL (or the "
            "SOLOIST_STORE_URL environment variable) to a store URL, e.g. 'redis://host/0'"
        )
    return _with_options(url, options)


def _sqlite_url(database: Mapping[str, Any], where: str) -> str:
    name = str(database.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:") or "mode=memory" in name:
        raise ImproperlyConfigured(
            f"{where} is an in-memory SQLite database ({name!r}), which soloist's worker "
            f"processes cannot open: give it a file NAME, or set settings.{URL_SETTING}"
        )
    return f"sqlite:///{os.path.abspath(name)}"


#: libpq's connection parameters that Django's OPTIONS may hold (PostgreSQL's "Parameter
#: Key Words"), less those DATABASES has fields for; the rest of OPTIONS is Django's own
#: (isolation_level, pool, server_side_binding, assume_role...) and stays out of the URL.
#: Listed here because only soloist.stores may import a database driver.
LIBPQ_PARAMETERS = frozenset(
    [
        "application_name",
        "channel_binding",
        "client_encoding",
        "connect_timeout",
        "fallback_application_name",
        "gssdelegation",
        "gssencmode",
        "gsslib",
        "hostaddr",
        "keepalives",
        "keepalives_count",
        "keepalives_idle",
        "keepalives_interval",
        "krbsrvname",
        "load_balance_hosts",
        "max_protocol_version",
        "min_protocol_version",
        "oauth_client_id",
        "oauth_client_secret",
        "oauth_issuer",
        "oauth_scope",
        "options",
        "passfile",
        "require_auth",
        "requirepeer",
        "service",
        "ssl_max_protocol_version",
        "ssl_min_protocol_version",
        "sslcert",
        "sslcertmode",
        "sslcompression",
        "sslcrl",
        "sslcrldir",
        "sslkey",
        "sslkeylogfile",
        "sslmode",
        "sslnegotiation",
        "sslpassword",
        "sslrootcert",
        "sslsni",
        "target_session_attrs",
        "tcp_user_timeout",
    ]
)


def _postgres_url(database: Mapping[str, Any]) -> str:
    user = str(database.get("USER") or "")
    password = str(database.get("PASSWORD") or "")
    host = str(database.get("HOST") or "")
    port = str(database.get("PORT") or "")
    name = str(database.get("NAME") or "")
    query: dict[str, str] = {}
    auth = ""
    if user or password:
        auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "") + "@"
    if host.startswith("/"):  # a Unix socket directory goes in the query, as libpq reads it
        query["host"], host = host, ""
    elif ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = auth + host + (f":{port}" if port else "")
    # OPTIONS holds psycopg's connect() arguments; the libpq parameters among them (sslmode,
    # sslrootcert, connect_timeout, options, service...) belong in the URL too.
    for key, value in dict(database.get("OPTIONS") or {}).items():
        if key in LIBPQ_PARAMETERS:
            query[key] = str(value)
    tail = f"?{urlencode(query)}" if query else ""
    return f"postgresql://{netloc}/{quote(name, safe='')}{tail}"


def _with_options(url: str, options: object) -> str:
    if options is None:
        return url
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise ImproperlyConfigured(
            f"invalid settings.{OPTIONS_SETTING} {options!r}: expected a dict of soloist's "
            "store URL options, e.g. {'schema': 'jobs', 'history_age': '7d'}"
        )
    if not options:
        return url
    extra = urlencode({key: str(value) for key, value in options.items()})
    return f"{url}{'&' if '?' in url else '?'}{extra}"
