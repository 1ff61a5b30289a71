"""Settings of one instance, from constructor arguments or ``SOLOIST_*`` environment
variables (arguments win)."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from datetime import timedelta

from soloist.durations import parse_duration
from soloist.errors import ConfigError
from soloist.stores import DEFAULT_STORE_URL, check_store_url

MODES = ("distributed", "leader", "local")

#: Defaults, documented in the README: a dead instance's work is picked up after at most
#: about LEASE_TTL + HEARTBEAT.
DEFAULT_LEASE_TTL = timedelta(seconds=10)
#: The name of the election all instances of an app take part in.
DEFAULT_ELECTION = "soloist"


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
        misfire_grace: object = "10s",
        lookahead: object = "1s",
        election: str = DEFAULT_ELECTION,
    ) -> Config:
        env = os.environ
        url = store_url or env.get("SOLOIST_STORE_URL") or DEFAULT_STORE_URL
        check_store_url(url)
        mode = mode or env.get("SOLOIST_MODE") or "distributed"
        if mode not in MODES:
            raise ConfigError(f"invalid mode {mode!r}: expected 'distributed', 'leader' or 'local'")
        ttl = parse_duration(
            lease_ttl or env.get("SOLOIST_LEASE_TTL") or DEFAULT_LEASE_TTL, what="lease_ttl"
        )
        beat = parse_duration(
            heartbeat or env.get("SOLOIST_HEARTBEAT") or ttl / 3, what="heartbeat"
        )
        if beat >= ttl:
            raise ConfigError(
                f"invalid heartbeat {beat.total_seconds()}s: must be shorter than the lease "
                f"TTL ({ttl.total_seconds()}s), e.g. a third of it"
            )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"invalid concurrency {concurrency!r}: expected an integer >= 1")
        return cls(
            store_url=url,
            instance_id=instance_id or env.get("SOLOIST_INSTANCE_ID") or default_instance_id(),
            mode=mode,
            lease_ttl=ttl,
            heartbeat=beat,
            concurrency=concurrency,
            poll_interval=parse_duration(poll_interval, what="poll_interval"),
            grace_period=parse_duration(grace_period, what="grace_period", allow_zero=True),
            misfire_grace=parse_duration(misfire_grace, what="misfire_grace", allow_zero=True),
            lookahead=parse_duration(lookahead, what="lookahead", allow_zero=True),
            election=election,
        )


def default_instance_id() -> str:
    """hostname-pid-random: unique per process, readable in the history."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"
