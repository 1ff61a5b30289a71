"""How long a store call may go unanswered: driver timeouts derived from the lease TTL.

A runner must learn that it lost its lease within a bound derived from the TTL, so every
store call on the lease path needs a deadline. The runtime puts one around its calls; the
drivers add their own, so that a connection stuck on a network that silently drops
packets (no RST, no FIN: a cut cable, a partition, a dead NAT entry) fails within a bound
and is closed, never handed out again hung:

* a **call** gets ``ttl`` seconds: PostgreSQL's ``statement_timeout`` on the server, and
  the client closes a connection that has not answered ``ttl`` plus a small grace later;
  Redis' socket timeout (a reply not read within it closes the connection);
* **TCP keepalives** probe an idle connection after ``ttl / 2`` seconds, every
  ``ttl / 10`` seconds, and ``TCP_USER_TIMEOUT`` (``ttl``) drops a connection whose sent
  data stays unacknowledged: a dead peer is noticed even between calls (the PostgreSQL
  LISTEN connection, the Redis subscription, idle pooled connections);
* **opening** a connection waits at most ``min(10 s, ttl)``;
* SQLite waits for another process's write lock (its busy timeout) at most ``ttl / 2``
  (and at most 10 s, the wait of a store opened without a TTL).

Stores opened without a TTL (the CLI, benchmarks) keep the keepalives and connect timeouts
of the default 10 s TTL, but no call deadline: a long history query is not cut. Settings
that the store URL gives explicitly always win (see the store docs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from soloist.errors import ConfigError

__all__ = ["Deadlines", "lease_ttl_seconds"]

#: The TTL the connection settings are derived from when a store is opened without one.
BASE_TTL = 10.0
#: Longest wait to open a connection.
MAX_CONNECT = 10.0
#: Longest wait for SQLite's write lock (it was the fixed busy timeout).
MAX_BUSY = 10.0
#: Keepalive probes sent before a silent peer is given up (TCP_USER_TIMEOUT usually ends it
#: first: it counts from the last data received).
KEEPALIVE_COUNT = 3


def lease_ttl_seconds(ttl: float | timedelta | None) -> float | None:
    """``ttl`` in seconds (None stays None); ConfigError unless positive and finite."""
    if ttl is None:
        return None
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ConfigError(f"invalid lease TTL {ttl!r}: expected a positive number of seconds")
    return seconds


@dataclass(frozen=True)
class Deadlines:
    """The driver timeouts of one store, in seconds (see the module docstring)."""

    #: Longest a call may go unanswered; None: no bound (a store opened without a TTL).
    call: float | None
    #: Longest wait to open a connection.
    connect: float
    #: Idle seconds before the first keepalive probe, seconds between probes, and probes.
    keepalive_idle: int
    keepalive_interval: int
    keepalive_count: int
    #: TCP_USER_TIMEOUT: longest time sent data may stay unacknowledged, in milliseconds.
    user_timeout_ms: int
    #: SQLite's busy timeout.
    busy: float

    @classmethod
    def from_ttl(cls, ttl: float | timedelta | None) -> Deadlines:
        """The timeouts for a lease TTL (None: a store opened without one)."""
        seconds = lease_ttl_seconds(ttl)
        base = seconds if seconds is not None else BASE_TTL
        return cls(
            call=seconds,
            connect=min(MAX_CONNECT, base),
            keepalive_idle=max(1, int(base / 2)),
            keepalive_interval=max(1, int(base / 10)),
            keepalive_count=KEEPALIVE_COUNT,
            user_timeout_ms=max(1000, int(base * 1000)),
            busy=MAX_BUSY if seconds is None else min(MAX_BUSY, seconds / 2),
        )

    @property
    def cut(self) -> float | None:
        """When the client gives up a call: the call deadline plus a grace (a quarter of it,
        at most 1 s), so that a server that is alive answers first with its own timeout
        error and keeps its connection."""
        return None if self.call is None else self.call + min(1.0, self.call / 4)
