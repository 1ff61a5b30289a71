"""Reading a Redis store URL: where to connect, soloist's own options, redis-py's options
passed through, and what may be shown in messages (never the password).

``redis://[user:password@]host[:port][/db][?option=value&...]`` (``rediss://`` for TLS).
soloist's own options, never given to redis-py: ``prefix`` (default ``soloist``: every key
is ``{prefix}:...``), ``history_max`` (finished occurrences kept, default 100000, 0: no
count limit), ``history_age`` (how long finished occurrences are kept, default ``30d``,
``0``: no age limit). ``socket_timeout`` and ``socket_connect_timeout`` (seconds) are read
here too: given, they win over the timeouts a store derives from the lease TTL (see
:meth:`RedisTarget.bounded`).

Every other option is redis-py's own and reaches redis-py as written (it parses a URL's
query itself in ``from_url``): the ones it parses from a URL (``health_check_interval``,
``retry_on_timeout``, ``socket_keepalive``, ``max_connections``, ``ssl_check_hostname``...)
and, with ``rediss://``, the string options of its TLS connection (``ssl_cert_reqs``,
``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``...). Each value is checked here, so a
bad one is a ConfigError naming it when the URL is read, not an error at the first
connection. Options that would change what the store relies on (``decode_responses``,
``protocol``, ``encoding``, ``db``) and unknown ones are refused, naming them.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

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
#: soloist's own options: read here, never given to redis-py.
_OWN = ("prefix", "history_max", "history_age")
#: redis-py options soloist reads and passes as arguments (the lease TTL bounds them).
_TIMEOUTS = ("socket_timeout", "socket_connect_timeout")
#: redis-py options a store may not be given, and why.
_REFUSED = {
    "db": "give the database in the path: redis://host:6379/2",
    "decode_responses": "the store decodes replies itself",
    "encoding": "the store decodes replies itself",
    "encoding_errors": "the store decodes replies itself",
    "protocol": "the store's scripts speak RESP2",
    "legacy_responses": "the store reads redis-py's default replies",
    "client_name": "the store names its connections 'soloist'",
    "password": "give it in the URL: redis://:password@host",
    "username": "give it in the URL: redis://user:password@host",
}
#: String options of redis-py's TLS connection (the ones this redis-py has are accepted).
_TLS_STRINGS = (
    "ssl_keyfile",
    "ssl_certfile",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_ca_path",
    "ssl_ca_data",
    "ssl_ciphers",
    "ssl_password",
)
_CERT_REQS = ("none", "optional", "required")


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
    known = redis_options()
    allowed = (*_OWN, *_TIMEOUTS, *sorted(set(known) - set(_REFUSED) - set(_TIMEOUTS)))
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if name not in allowed and name not in _REFUSED:
            raise ConfigError(
                f"unknown option {name!r} in Redis store URL {shown!r}: expected {_LISTED}"
            )
    options = query_options(parts.query, (*allowed, *_REFUSED), shown, "Redis")
    driver_options = _driver_options(options, known, parts.scheme, shown)
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
        driver_url=f"{parts.scheme}://{netloc}/{path}"
        + (f"?{urlencode(driver_options)}" if driver_options else ""),
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


#: What an unknown option's message lists.
_LISTED = (
    "prefix, history_max, history_age, or a redis-py connection option (socket_timeout, "
    "socket_connect_timeout, health_check_interval, retry_on_timeout, socket_keepalive, "
    "max_connections, and with rediss:// ssl_cert_reqs, ssl_ca_certs, ssl_certfile, "
    "ssl_keyfile, ssl_check_hostname ...)"
)


def redis_options() -> dict[str, Callable[[str], object] | None]:
    """The options this redis-py takes from a URL, each with its parser (None: a string):
    those it parses itself (``URL_QUERY_ARGUMENT_PARSERS``) and the string options of its
    TLS connection. Empty when redis-py is not installed (the store then says so)."""
    try:
        from redis.asyncio import connection
    except ImportError:  # pragma: no cover - the redis extra is missing
        return {}
    found: dict[str, Callable[[str], object] | None] = dict(connection.URL_QUERY_ARGUMENT_PARSERS)
    tls = inspect.signature(connection.SSLConnection.__init__).parameters
    found.update({name: None for name in _TLS_STRINGS if name in tls})
    return found


def _driver_options(
    options: dict[str, str],
    known: dict[str, Callable[[str], object] | None],
    scheme: str,
    shown: str,
) -> dict[str, str]:
    """The options for redis-py, each checked as redis-py will read it."""
    passed: dict[str, str] = {}
    for name, text in options.items():
        if name in _OWN or name in _TIMEOUTS:
            continue
        if name in _REFUSED:
            raise ConfigError(
                f"option {name!r} is not allowed in Redis store URL {shown!r}: {_REFUSED[name]}"
            )
        if name.startswith("ssl_") and scheme != "rediss":
            raise ConfigError(
                f"option {name!r} in Redis store URL {shown!r} needs TLS: use rediss://"
            )
        parser = known[name]
        flag = getattr(parser, "__name__", "") == "to_bool"
        try:
            value = parser(text) if parser is not None else text
            if not text:
                raise ValueError
            if parser in _EXPECTED and not 0 <= value < float("inf"):  # type: ignore[operator]
                raise ValueError  # redis-py takes -1 and fails at the first connection
            if flag and text.lower() not in _BOOLS:
                raise ValueError  # redis-py reads 'off' or 'maybe' as true
        except (TypeError, ValueError):
            expected = "true or false" if flag else _EXPECTED.get(parser, "a value")
            raise ConfigError(
                f"invalid {name} {text!r} in Redis store URL {shown!r}: expected {expected}"
            ) from None
        if name == "ssl_cert_reqs" and text.lower() not in _CERT_REQS:
            raise ConfigError(
                f"invalid ssl_cert_reqs {text!r} in Redis store URL {shown!r}: expected "
                "none, optional or required"
            )
        passed[name] = text
    return passed


_EXPECTED: dict[object, str] = {int: "a whole number >= 0", float: "a number >= 0"}
#: The flags redis-py's to_bool reads as false (the first five) and as true.
_BOOLS = ("0", "f", "false", "n", "no", "1", "t", "true", "y", "yes")
