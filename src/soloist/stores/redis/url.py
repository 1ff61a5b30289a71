"""Reading a Redis store URL: where to connect, soloist's own options, and what may be
shown in messages (never the password).

``redis://[user:password@]host[:port][/db][?option=value&...]`` (``rediss://`` for TLS).
Options: ``prefix`` (default ``soloist``: every key is ``{prefix}:...``), ``history_max``
(finished occurrences kept, default 100000, 0: no count limit), ``history_age`` (how long
finished occurrences are kept, default ``30d``, ``0``: no age limit), ``socket_timeout`` and
``socket_connect_timeout`` (seconds, for the driver: given, they win over the timeouts a
store derives from the lease TTL, see :meth:`RedisTarget.bounded`). Anything else is
refused, naming it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import unquote, urlsplit

from soloist.errors import ConfigError
from soloist.stores.deadlines import Deadlines
from soloist.stores.urls import history_bounds, mask_url, query_options, scrub

__all__ = [
    "DEFAULT_HISTORY_AGE",
    "DEFAULT_HISTORY_MAX",
    "DEFAULT_PREFIX",
    "RedisTarget",
    "parse_url",
]

DEFAULT_PREFIX = "soloist"
DEFAULT_HISTORY_MAX = 100_000
DEFAULT_HISTORY_AGE = timedelta(days=30)
#: Seconds to wait for the server when connecting, and for a reply, unless the URL says.
CONNECT_TIMEOUT = 10.0
SOCKET_TIMEOUT = 60.0
SCHEMES = ("redis", "rediss")

# No braces (the prefix is the hash tag), no colon (the key separator), no spaces.
_PREFIX = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_OPTIONS = ("prefix", "history_max", "history_age", "socket_timeout", "socket_connect_timeout")


@dataclass(frozen=True)
class RedisTarget:
    """Where a store connects and how it names its keys."""

    #: The URL handed to redis-py: the given one without soloist's options.
    driver_url: str
    prefix: str
    history_max: int
    history_age: timedelta | None
    socket_timeout: float
    socket_connect_timeout: float
    #: A password-free description for messages.
    display: str
    password: str | None = field(default=None, repr=False)
    #: The options the URL sets (``prefix``, ``socket_timeout``, ...).
    given: frozenset[str] = frozenset()

    def bounded(self, deadlines: Deadlines) -> RedisTarget:
        """This target with the timeouts of ``deadlines`` (derived from the lease TTL)
        where the URL does not set them: a reply is waited for at most the call deadline
        (a store without one keeps the 60 s default), a connection at most the connect
        deadline."""
        timeout, connect = self.socket_timeout, self.socket_connect_timeout
        if "socket_timeout" not in self.given and deadlines.call is not None:
            timeout = deadlines.call
        if "socket_connect_timeout" not in self.given:
            connect = min(connect, deadlines.connect)
        return dataclasses.replace(self, socket_timeout=timeout, socket_connect_timeout=connect)

    @property
    def base(self) -> str:
        """The start of every key: the prefix as a hash tag, so that in a Redis Cluster all
        keys of one app live in one slot (a script may only touch keys of one slot)."""
        return "{" + self.prefix + "}"

    @property
    def channel(self) -> str:
        """The pub/sub channel that wakes idle instances of this app."""
        return f"{self.base}:wake"

    def scrub(self, text: str) -> str:
        """``text`` with the password, if any, masked."""
        return scrub(text, self.password)


def parse_url(url: str) -> RedisTarget:
    """Read a ``redis://`` or ``rediss://`` store URL; ConfigError names a bad part."""
    shown = mask_url(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"invalid Redis store URL {shown!r}: {exc}") from None
    if parts.scheme not in SCHEMES or "://" not in url:
        raise ConfigError(
            f"invalid Redis store URL {shown!r}: expected 'redis://host:port/db?prefix=app'"
        )
    path = parts.path.lstrip("/")
    if path and not path.isdigit():
        raise ConfigError(
            f"invalid Redis database {path!r} in store URL {shown!r}: expected a number"
        )
    options = query_options(parts.query, _OPTIONS, shown, "Redis")
    prefix = options.get("prefix", DEFAULT_PREFIX)
    if not _PREFIX.fullmatch(prefix):
        raise ConfigError(
            f"invalid prefix {prefix!r} in Redis store URL {shown!r}: expected 1-64 letters, "
            "digits, '_', '.' or '-'"
        )
    history_max, history_age = history_bounds(
        options, shown, "Redis", DEFAULT_HISTORY_MAX, DEFAULT_HISTORY_AGE
    )
    host = parts.hostname or "localhost"
    user = f"{unquote(parts.username)}@" if parts.username else ""
    display = f"{parts.scheme}://{user}{host}:{port or 6379}/{path or '0'} (prefix {prefix!r})"
    netloc = parts.netloc
    return RedisTarget(
        driver_url=f"{parts.scheme}://{netloc}/{path}",
        prefix=prefix,
        history_max=history_max,
        history_age=history_age,
        socket_timeout=_seconds(options, "socket_timeout", SOCKET_TIMEOUT, shown),
        socket_connect_timeout=_seconds(options, "socket_connect_timeout", CONNECT_TIMEOUT, shown),
        display=display,
        password=unquote(parts.password) if parts.password else None,
        given=frozenset(options),
    )


def _seconds(options: dict[str, str], name: str, default: float, shown: str) -> float:
    text = options.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ConfigError(
            f"invalid {name} {text!r} in Redis store URL {shown!r}: expected a positive "
            "number of seconds"
        )
    return value
