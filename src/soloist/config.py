"""Settings of one instance, from constructor arguments or ``SOLOIST_*`` environment
variables (arguments win)."""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from soloist.durations import parse_duration
from soloist.errors import ConfigError
from soloist.models import SLOTS
from soloist.stores import DEFAULT_STORE_URL, check_store_url

MODES = ("distributed", "leader", "local")

#: Defaults, documented in the README: a dead instance's work is picked up after at most
#: about LEASE_TTL + HEARTBEAT.
DEFAULT_LEASE_TTL = timedelta(seconds=10)
#: The misfire grace at least (see default_misfire_grace).
DEFAULT_MISFIRE_GRACE = timedelta(seconds=10)
#: A dead planner's partitions or leadership pass on at most this long after its lease
#: expires: a poll (0.5 s), round trips and a tick.
FAILOVER_SLACK = timedelta(seconds=2)
#: The name of the election all instances of an app take part in.
DEFAULT_ELECTION = "soloist"


def default_misfire_grace(lease_ttl: timedelta) -> timedelta:
    """The default misfire grace: 10 s, and never less than the lateness a failover can
    cause (``lease_ttl`` + 2 s: a dead planner's partitions or leadership pass on after
    its lease expires and a poll), so that a failover alone never makes the catch-up
    policy drop an instant (12 s with the default 10 s TTL)."""
    return max(DEFAULT_MISFIRE_GRACE, lease_ttl + FAILOVER_SLACK)


def lease_margin(ttl: float) -> float:
    """How long before the store could expire a lease this runner stops trusting it: a
    tenth of the TTL, at least a quarter of it up to one second (1 s for the default 10 s).

    The store expires a lease ``ttl`` after it *processed* the last renewal; the runner
    counts from when it *sent* it, which is earlier, and gives up ``margin`` sooner still,
    so that an async handler is cancelled (and ``ctx.lease_lost`` is true) before any
    instance can reap the occurrence, even with a busy event loop."""
    return max(ttl * 0.1, min(1.0, ttl * 0.25))


@dataclass(frozen=True)
class Config:
    store_url: str
    instance_id: str
    mode: str
    lease_ttl: timedelta
    heartbeat: timedelta
    concurrency: int
    poll_interval: timedelta
    grace_period: timedelta
    misfire_grace: timedelta
    lookahead: timedelta
    election: str
    #: Where the HTTP endpoint listens, (host, port), or None: no HTTP server.
    http: tuple[str, int] | None = None
    #: The bearer token that enables the HTTP actions; None: the API is read-only.
    token: str | None = field(default=None, repr=False)
    #: Threads of timed-out sync handlers replaced at most (default: ``concurrency``);
    #: at the bound /readyz fails (see docs/explanation/guarantees.md, timeouts).
    max_leaked_threads: int | None = None
    #: How many partitions the streams to plan hash into (distributed mode): the same
    #: for every instance of an app (see soloist.runtime.partitions).
    partitions: int = 64
    #: Create or upgrade the store's schema when it is first opened (False: never).
    migrate: bool = True
    #: The IANA zone of cron schedules that name none (``cron(expr)`` without ``tz``).
    timezone: str = "UTC"
    #: Dynamic schedules that keep their own ``job`` label in the metrics (every other one
    #: is counted under ``job="(dynamic)"``; see soloist.metrics).
    metrics_jobs: frozenset[str] = frozenset()

    @classmethod
    def resolve(
        cls,
        store_url: str | None = None,
        *,
        instance_id: str | None = None,
        mode: str | None = None,
        lease_ttl: object = None,
        heartbeat: object = None,
        concurrency: object = None,
        poll_interval: object = None,
        grace_period: object = None,
        misfire_grace: object = None,
        lookahead: object = "1s",
        election: str = DEFAULT_ELECTION,
        http: object = None,
        token: str | None = None,
        max_leaked_threads: object = None,
        partitions: object = None,
        migrate: object = None,
        timezone: object = None,
        metrics_jobs: object = None,
    ) -> Config:
        """Each setting from its argument; where that is None, from its ``SOLOIST_*``
        variable (:data:`VARIABLES`; an empty one counts as unset); else the default. A bad
        value raises ConfigError naming the argument, or the variable it came from."""
        url, _ = setting("store", store_url)
        url = str(url) if url is not None else DEFAULT_STORE_URL
        check_store_url(url)
        value, what = setting("mode", mode)
        mode = check_mode(value if value is not None else "distributed", what=what)
        value, what = setting("lease_ttl", lease_ttl)
        ttl = duration(value if value is not None else DEFAULT_LEASE_TTL, what)
        value, beat_what = setting("heartbeat", heartbeat)
        beat = duration(value if value is not None else ttl / 3, beat_what)
        # A runner trusts its lease until ttl - margin after a renewal was sent: two
        # heartbeats must fit in that, so that one failed renewal does not lose it.
        trusted = ttl.total_seconds() - lease_margin(ttl.total_seconds())
        if beat.total_seconds() * 2 > trusted:
            raise ConfigError(
                f"invalid {beat_what} {beat.total_seconds()}s: must be at most half of the "
                f"lease TTL ({ttl.total_seconds()}s) less its safety margin, i.e. "
                f"{trusted / 2:g}s; the default is a third of the TTL"
            )
        value, what = setting("concurrency", concurrency)
        slots = check_count(value if value is not None else DEFAULT_CONCURRENCY, what, minimum=1)
        value, what = setting("max_leaked_threads", max_leaked_threads)
        leaks = slots
        if value is not None:
            leaks = check_count(value, what, minimum=0, default="as many as concurrency")
        value, what = setting("poll_interval", poll_interval)
        poll = duration(value if value is not None else DEFAULT_POLL_INTERVAL, what)
        value, what = setting("grace_period", grace_period)
        grace = duration(
            value if value is not None else DEFAULT_GRACE_PERIOD, what=what, allow_zero=True
        )
        value, what = setting("misfire_grace", misfire_grace)
        misfire = default_misfire_grace(ttl)
        if value is not None:
            misfire = duration(value, what, allow_zero=True)
        value, what = setting("http", http)
        address = parse_http_address(value, what=what) if value is not None else None
        value, what = setting("token", token)
        secret = check_token(value, what=what) if value is not None else None
        value, what = setting("instance_id", instance_id)
        name = check_instance_id(value, what=what) if value is not None else None
        value, what = setting("partitions", partitions)
        count = check_partitions(value if value is not None else DEFAULT_PARTITIONS, what=what)
        value, what = setting("timezone", timezone)
        zone = check_timezone(value, what=what) if value is not None else "UTC"
        value, what = setting("metrics_jobs", metrics_jobs)
        labelled = check_metrics_jobs(value, what=what) if value is not None else frozenset()
        value, what = setting("migrate", migrate)
        return cls(
            store_url=url,
            instance_id=name or default_instance_id(),
            mode=mode,
            lease_ttl=ttl,
            heartbeat=beat,
            concurrency=slots,
            poll_interval=poll,
            grace_period=grace,
            misfire_grace=misfire,
            lookahead=parse_duration(lookahead, what="lookahead", allow_zero=True),
            election=election,
            http=address,
            token=secret,
            max_leaked_threads=leaks,
            partitions=count,
            migrate=check_flag(value, what=what) if value is not None else True,
            timezone=zone,
            metrics_jobs=labelled,
        )

    def override(
        self,
        *,
        store_url: str | None = None,
        instance_id: str | None = None,
        mode: str | None = None,
        http: object = None,
        token: str | None = None,
    ) -> Config:
        """This configuration with the settings given here replaced (None keeps one), each
        checked as :meth:`resolve` checks it: the one way to change a resolved configuration
        (:meth:`soloist.Scheduler.reconfigure`, which ``soloist run``'s options use)."""
        if instance_id is not None:
            check_instance_id(instance_id)
        if mode is not None:
            check_mode(mode)
        if store_url is not None:
            check_store_url(store_url)
        address = parse_http_address(http) if http is not None else self.http
        if token is not None:
            check_token(token)
        return dataclasses.replace(
            self,
            store_url=store_url or self.store_url,
            instance_id=instance_id or self.instance_id,
            mode=mode or self.mode,
            http=address,
            token=token if token is not None else self.token,
        )


#: The environment variable of each setting of ``Scheduler(...)`` that has one (an
#: argument that is None falls back to it). Every other constructor argument is an object
#: (``clock``), not a setting; docs/reference/configuration.md lists them all, and a test
#: checks that the two agree with the constructor.
VARIABLES: dict[str, str] = {
    "store": "SOLOIST_STORE_URL",
    "instance_id": "SOLOIST_INSTANCE_ID",
    "mode": "SOLOIST_MODE",
    "partitions": "SOLOIST_PARTITIONS",
    "lease_ttl": "SOLOIST_LEASE_TTL",
    "heartbeat": "SOLOIST_HEARTBEAT",
    "http": "SOLOIST_HTTP",
    "token": "SOLOIST_TOKEN",
    "concurrency": "SOLOIST_CONCURRENCY",
    "max_leaked_threads": "SOLOIST_MAX_LEAKED_THREADS",
    "poll_interval": "SOLOIST_POLL_INTERVAL",
    "grace_period": "SOLOIST_GRACE_PERIOD",
    "misfire_grace": "SOLOIST_MISFIRE_GRACE",
    "migrate": "SOLOIST_MIGRATE",
    "timezone": "SOLOIST_TIMEZONE",
    "metrics_jobs": "SOLOIST_METRICS_JOBS",
}

DEFAULT_CONCURRENCY = 10
DEFAULT_POLL_INTERVAL = timedelta(seconds=1)
DEFAULT_GRACE_PERIOD = timedelta(seconds=30)
DEFAULT_PARTITIONS = 64
#: Names ``metrics_jobs`` may list at most: each one adds about 60 series (some 5 KB of
#: text) to every instance's ``/metrics``.
MAX_METRICS_JOBS = 100


def setting(name: str, argument: object) -> tuple[object, str]:
    """The value of setting ``name`` and how to name it in an error: the argument when it
    is not None, else its environment variable (:data:`VARIABLES`) when set and not empty
    (named by the variable), else None (the caller's default)."""
    if argument is not None:
        return argument, name
    variable = VARIABLES[name]
    text = os.environ.get(variable, "")
    return (text, variable) if text.strip() else (None, name)


_SECONDS = re.compile(r"\d+(?:\.\d+)?")


def duration(value: object, what: str, *, allow_zero: bool = False) -> timedelta:
    """:func:`parse_duration`, also taking a string of a bare number of seconds (``"30"``,
    as an environment variable gives one)."""
    if isinstance(value, str) and _SECONDS.fullmatch(value.strip()):
        seconds = float(value.strip())
        try:
            return parse_duration(seconds, what=what, allow_zero=allow_zero)
        except ConfigError as exc:  # named as given ('1e400' is read as inf)
            raise ConfigError(str(exc).replace(repr(seconds), repr(value), 1)) from None
    return parse_duration(value, what=what, allow_zero=allow_zero)


def check_count(value: object, what: str, *, minimum: int, default: str = "") -> int:
    """``value`` as an integer of at least ``minimum`` (a string of one, from the
    environment); ConfigError names ``what`` otherwise."""
    count: object = value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        count = int(value.strip())
    if isinstance(count, bool) or not isinstance(count, int) or count < minimum:
        unset = f" (or None: {default})" if default else ""
        raise ConfigError(f"invalid {what} {value!r}: expected an integer >= {minimum}{unset}")
    return count


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def check_flag(value: object, *, what: str) -> bool:
    """``value`` as a bool: True/False, or (from the environment) one of 1/true/yes/on,
    0/false/no/off, in any case."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigError(f"invalid {what} {value!r}: expected true or false (1/0, yes/no, on/off)")


def check_mode(mode: object, *, what: str = "mode") -> str:
    """``mode`` if it is one of :data:`MODES`."""
    if mode not in MODES:
        raise ConfigError(f"invalid {what} {mode!r}: expected 'distributed', 'leader' or 'local'")
    return str(mode)


def check_token(token: object, *, what: str = "token") -> str:
    """``token`` if it is a non-empty string."""
    if not isinstance(token, str) or not token.strip():
        hint = "" if what.startswith("SOLOIST_") else " (SOLOIST_TOKEN)"
        raise ConfigError(f"invalid {what}: expected a non-empty string{hint}")
    return token


def check_timezone(value: object, *, what: str = "timezone") -> str:
    """``value`` if it names an IANA time zone that zoneinfo knows (``"Europe/Paris"``)."""
    text = value.strip() if isinstance(value, str) else value
    try:
        if not isinstance(text, str) or not text:
            raise ValueError(text)
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise ConfigError(
            f"invalid {what} {value!r}: expected an IANA time zone name such as "
            "'Europe/Paris' or 'UTC'"
        ) from None
    return text


def check_instance_id(value: object, *, what: str = "instance id") -> str:
    """``value`` if it is a non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"invalid {what} {value!r}: expected a non-empty string")
    return value


def default_instance_id() -> str:
    """hostname-pid-random: unique per process, readable in the history."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


#: Where ``--http PORT`` listens when no host is given: this machine only.
DEFAULT_HTTP_HOST = "127.0.0.1"


def parse_http_address(value: object, *, what: str = "HTTP address") -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or a bare ``PORT`` (on 127.0.0.1) as (host, port).
    Port 0 asks the OS for a free port."""
    bad = ConfigError(
        f"invalid {what} {value!r}: expected HOST:PORT (e.g. 127.0.0.1:8080) or a port"
    )
    if isinstance(value, bool):
        raise bad
    if isinstance(value, int):
        host, port_text = DEFAULT_HTTP_HOST, str(value)
    elif isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            host, sep, port_text = text[1:].partition("]:")
            if not sep:
                raise bad
        elif ":" in text:
            host, _, port_text = text.rpartition(":")
            if ":" in host:  # an IPv6 address needs brackets to carry a port
                raise bad
        else:
            host, port_text = "", text
        host = host or DEFAULT_HTTP_HOST
    else:
        raise bad
    if (
        not port_text.isdigit()
        or not 0 <= int(port_text) <= 65535
        or any(c.isspace() for c in host)
    ):
        raise bad
    return host, int(port_text)


def check_partitions(value: object, *, what: str = "partitions") -> int:
    """A partition count: an integer from 1 to 4096 (a string of one, from the
    environment)."""
    count: object = value
    if isinstance(value, str):
        try:
            count = int(value.strip())
        except ValueError:
            count = value
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= SLOTS:
        raise ConfigError(f"invalid {what} {value!r}: expected an integer from 1 to {SLOTS}")
    return count


def check_metrics_jobs(value: object, *, what: str = "metrics_jobs") -> frozenset[str]:
    """The names of ``metrics_jobs``: a string of names separated by commas (as the
    environment gives it; spaces around a name are dropped) or an iterable of names, each
    non-empty and printable, at most :data:`MAX_METRICS_JOBS`."""
    if isinstance(value, str):
        names: list[object] = [name.strip() for name in value.split(",")]
    elif isinstance(value, (list, tuple, set, frozenset)):
        names = list(value)
    else:
        raise ConfigError(
            f"invalid {what} {value!r}: expected job names, as a list or separated by commas"
        )
    # The whole value is named when short (a variable's text); a long list by its bad name.
    given = f" {value!r}" if len(repr(value)) <= 200 else ""
    for name in names:
        if not isinstance(name, str) or not name.strip() or any(ord(c) < 32 for c in name):
            raise ConfigError(
                f"invalid {what}{given}: {name!r} is not a job name (expected non-empty "
                "printable names, separated by commas)"
            )
    if len(set(names)) > MAX_METRICS_JOBS:
        raise ConfigError(
            f"invalid {what}: {len(set(names))} names, expected at most {MAX_METRICS_JOBS} "
            "(each adds about 60 series to every instance's /metrics)"
        )
    return frozenset(str(name) for name in names)
