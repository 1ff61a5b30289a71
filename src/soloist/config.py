"""Settings of one instance, from constructor arguments or ``SOLOIST_*`` environment
variables (arguments win)."""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
from dataclasses import dataclass, field
from datetime import timedelta

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

    @classmethod
    def resolve(
        cls,
        store_url: str | None = None,
        *,
        instance_id: str | None = None,
        mode: str | None = None,
        lease_ttl: object = None,
        heartbeat: object = None,
        concurrency: int = 10,
        poll_interval: object = "1s",
        grace_period: object = "30s",
        misfire_grace: object = None,
        lookahead: object = "1s",
        election: str = DEFAULT_ELECTION,
        http: object = None,
        token: str | None = None,
        max_leaked_threads: int | None = None,
        partitions: object = None,
    ) -> Config:
        env = os.environ
        url = store_url or env.get("SOLOIST_STORE_URL") or DEFAULT_STORE_URL
        check_store_url(url)
        mode = check_mode(mode or env.get("SOLOIST_MODE") or "distributed")
        ttl = parse_duration(
            lease_ttl or env.get("SOLOIST_LEASE_TTL") or DEFAULT_LEASE_TTL, what="lease_ttl"
        )
        beat = parse_duration(
            heartbeat or env.get("SOLOIST_HEARTBEAT") or ttl / 3, what="heartbeat"
        )
        # A runner trusts its lease until ttl - margin after a renewal was sent: two
        # heartbeats must fit in that, so that one failed renewal does not lose it.
        trusted = ttl.total_seconds() - lease_margin(ttl.total_seconds())
        if beat.total_seconds() * 2 > trusted:
            raise ConfigError(
                f"invalid heartbeat {beat.total_seconds()}s: must be at most half of the "
                f"lease TTL ({ttl.total_seconds()}s) less its safety margin, i.e. "
                f"{trusted / 2:g}s; the default is a third of the TTL"
            )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"invalid concurrency {concurrency!r}: expected an integer >= 1")
        leaks = max_leaked_threads
        if leaks is not None and (
            isinstance(leaks, bool) or not isinstance(leaks, int) or leaks < 0
        ):
            raise ConfigError(
                f"invalid max_leaked_threads {leaks!r}: expected an integer >= 0 (or None: "
                "as many as concurrency)"
            )
        address = http if http is not None else env.get("SOLOIST_HTTP") or None
        token = token if token is not None else env.get("SOLOIST_TOKEN") or None
        if token is not None:
            check_token(token)
        return cls(
            store_url=url,
            instance_id=instance_id or env.get("SOLOIST_INSTANCE_ID") or default_instance_id(),
            mode=mode,
            lease_ttl=ttl,
            heartbeat=beat,
            concurrency=concurrency,
            poll_interval=parse_duration(poll_interval, what="poll_interval"),
            grace_period=parse_duration(grace_period, what="grace_period", allow_zero=True),
            misfire_grace=(
                parse_duration(misfire_grace, what="misfire_grace", allow_zero=True)
                if misfire_grace is not None
                else default_misfire_grace(ttl)
            ),
            lookahead=parse_duration(lookahead, what="lookahead", allow_zero=True),
            election=election,
            http=parse_http_address(address) if address is not None else None,
            token=token,
            max_leaked_threads=concurrency if leaks is None else leaks,
            partitions=check_partitions(
                partitions if partitions is not None else env.get("SOLOIST_PARTITIONS") or 64
            ),
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
        if instance_id is not None and (not isinstance(instance_id, str) or not instance_id):
            raise ConfigError(f"invalid instance id {instance_id!r}: expected a non-empty string")
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


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`MODES`."""
    if mode not in MODES:
        raise ConfigError(f"invalid mode {mode!r}: expected 'distributed', 'leader' or 'local'")
    return mode


def check_token(token: object) -> str:
    """``token`` if it is a non-empty string."""
    if not isinstance(token, str) or not token.strip():
        raise ConfigError("invalid token: expected a non-empty string (SOLOIST_TOKEN)")
    return token


def default_instance_id() -> str:
    """hostname-pid-random: unique per process, readable in the history."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


#: Where ``--http PORT`` listens when no host is given: this machine only.
DEFAULT_HTTP_HOST = "127.0.0.1"


def parse_http_address(value: object) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or a bare ``PORT`` (on 127.0.0.1) as (host, port).
    Port 0 asks the OS for a free port."""
    bad = ConfigError(
        f"invalid HTTP address {value!r}: expected HOST:PORT (e.g. 127.0.0.1:8080) or a port"
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


def check_partitions(value: object) -> int:
    """A partition count: an integer from 1 to 4096 (a string of one, from the
    environment)."""
    count: object = value
    if isinstance(value, str):
        try:
            count = int(value.strip())
        except ValueError:
            count = value
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= SLOTS:
        raise ConfigError(f"invalid partitions {value!r}: expected an integer from 1 to {SLOTS}")
    return count
