"""Reading an etcd store URL: the members to connect to, soloist's own options, and what may
be shown in messages (never the password).

``etcd://[user:password@]host[:port][,host:port...][/][?option=value&...]`` (``etcds://``
for TLS). Options: ``prefix`` (default ``soloist``: every key is ``/{prefix}/...``),
``history_max`` (finished occurrences kept, default 10000, 0: no count limit),
``history_age`` (how long they are kept, default ``30d``, ``0``: no age limit), and with
``etcds://`` the PEM files ``ca`` (the CA that signed the members' certificates; default:
the system's roots), ``cert`` and ``key`` (a client certificate, both or neither).
Anything else is refused, naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote

from soloist.errors import ConfigError
from soloist.stores.urls import history_bounds, mask_url, query_options, scrub

__all__ = [
    "DEFAULT_HISTORY_AGE",
    "DEFAULT_HISTORY_MAX",
    "DEFAULT_PREFIX",
    "EtcdTarget",
    "parse_url",
]

DEFAULT_PREFIX = "soloist"
#: Fewer than Redis keeps: etcd holds its whole key space in a few GiB (2 GiB by default).
DEFAULT_HISTORY_MAX = 10_000
DEFAULT_HISTORY_AGE = timedelta(days=30)
DEFAULT_PORT = 2379
SCHEMES = ("etcd", "etcds")

_PREFIX = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+")
_OPTIONS = ("prefix", "history_max", "history_age", "ca", "cert", "key")
_TLS_OPTIONS = ("ca", "cert", "key")


@dataclass(frozen=True)
class EtcdTarget:
    """Where a store connects and how it names its keys."""

    #: ``host:port`` of each member, in the order given (the first reachable one is used).
    endpoints: tuple[str, ...]
    tls: bool
    prefix: str
    history_max: int
    history_age: timedelta | None
    #: A password-free description for messages.
    display: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    @property
    def base(self) -> bytes:
        """The start of every key of the store."""
        return f"/{self.prefix}/".encode()

    def scrub(self, text: str) -> str:
        """``text`` with the password, if any, masked."""
        return scrub(text, self.password)


def parse_url(url: str) -> EtcdTarget:
    """Read an ``etcd://`` or ``etcds://`` store URL; ConfigError names a bad part."""
    shown = mask_url(url)
    scheme, sep, rest = url.partition("://")
    if scheme not in SCHEMES or not sep:
        raise ConfigError(
            f"invalid etcd store URL {shown!r}: expected 'etcd://host:2379?prefix=app'"
        )
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    if path:
        raise ConfigError(
            f"invalid path {'/' + path!r} in etcd store URL {shown!r}: the key prefix is an "
            "option ('?prefix=app'), not a path"
        )
    userinfo, at, hosts = netloc.rpartition("@")
    user = password = None
    if at:
        name, colon, secret = userinfo.partition(":")
        user = unquote(name)
        password = unquote(secret) if colon else None
        if not user or password is None:
            raise ConfigError(
                f"invalid credentials in etcd store URL {shown!r}: expected 'user:password@'"
            )
    endpoints = tuple(_endpoint(part, shown) for part in hosts.split(","))
    options = query_options(query, _OPTIONS, shown, "etcd")
    tls = scheme == "etcds"
    given_tls = [key for key in _TLS_OPTIONS if key in options]
    if given_tls and not tls:
        raise ConfigError(
            f"option {given_tls[0]!r} in etcd store URL {shown!r} needs TLS: use 'etcds://'"
        )
    if ("cert" in options) != ("key" in options):
        raise ConfigError(
            f"etcd store URL {shown!r} gives only one of 'cert' and 'key': a client "
            "certificate needs both"
        )
    prefix = options.get("prefix", DEFAULT_PREFIX)
    if not _PREFIX.fullmatch(prefix):
        raise ConfigError(
            f"invalid prefix {prefix!r} in etcd store URL {shown!r}: expected 1-64 letters, "
            "digits, '_', '.' or '-'"
        )
    history_max, history_age = history_bounds(
        options, shown, "etcd", DEFAULT_HISTORY_MAX, DEFAULT_HISTORY_AGE
    )
    who = f"{user}@" if user else ""
    display = f"{scheme}://{who}{','.join(endpoints)} (prefix {prefix!r})"
    return EtcdTarget(
        endpoints=endpoints,
        tls=tls,
        prefix=prefix,
        history_max=history_max,
        history_age=history_age,
        display=display,
        user=user,
        password=password,
        ca=_file(options, "ca", shown),
        cert=_file(options, "cert", shown),
        key=_file(options, "key", shown),
    )


def _endpoint(part: str, shown: str) -> str:
    host, colon, port = part.rpartition(":") if not part.endswith("]") else (part, "", "")
    if not colon:
        host, port = part, str(DEFAULT_PORT)
    if not _HOST.fullmatch(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"invalid member {part!r} in etcd store URL {shown!r}: expected 'host' or 'host:port'"
        )
    return f"{host}:{int(port)}"


def _file(options: dict[str, str], name: str, shown: str) -> Path | None:
    text = options.get(name)
    if text is None:
        return None
    path = Path(text)
    try:
        pem = b"-----BEGIN " in path.read_bytes()
    except OSError:
        pem = False
    if not pem:
        raise ConfigError(
            f"invalid {name} {text!r} in etcd store URL {shown!r}: expected the path of a "
            "readable PEM file"
        )
    return path
