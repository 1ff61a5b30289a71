"""Leader leases and instance heartbeats in SQLite, as blocking functions of a connection.

Each write is one statement in a ``BEGIN IMMEDIATE`` transaction (see :mod:`.ops`): the
write lock is taken before the statement reads the lease, so two processes electing at the
same instant are serialised and the second sees the first's lease; each write reads its
instant (an ``ops.Now``) only once it holds the lock. Lease rows are never deleted; a
lapsed or resigned lease keeps its epoch, so the next holder's epoch is higher. Times are
epoch microseconds.
"""

from __future__ import annotations

import sqlite3

from soloist.models import InstanceInfo, LeaderLease
from soloist.stores.sqlite import codec
from soloist.stores.sqlite.ops import Now, transaction

#: How long after expiring an instance's row is forgotten by ``instance_list``.
INSTANCE_RETENTION_US = 3600 * 1_000_000

# Free (no row, or expired): take it with the next epoch. Held by the caller: extend it,
# same epoch and elected_at. Held by another: the WHERE fails and nothing is returned.
# SET expressions read the row as it was before the update.
_ELECT = """
INSERT INTO leader_leases (name, leader_id, epoch, elected_at, expires_at)
VALUES (:name, :instance, 1, :now, :expires)
ON CONFLICT (name) DO UPDATE SET
    epoch = CASE WHEN leader_id = :instance AND expires_at > :now THEN epoch
                 ELSE epoch + 1 END,
    elected_at = CASE WHEN leader_id = :instance AND expires_at > :now THEN elected_at
                      ELSE :now END,
    leader_id = :instance,
    expires_at = :expires
WHERE expires_at <= :now OR leader_id = :instance
RETURNING *
"""
# Renew and resign apply only while the caller holds the lease with its epoch, unexpired.
_RENEW = """
UPDATE leader_leases SET expires_at = :expires
WHERE name = :name AND leader_id = :instance AND epoch = :epoch AND expires_at > :now
RETURNING *
"""
_RESIGN = """
UPDATE leader_leases SET expires_at = :now
WHERE name = :name AND leader_id = :instance AND epoch = :epoch AND expires_at > :now
RETURNING name
"""

# started_at is the first heartbeat's; every other field is the latest one's.
_HEARTBEAT = """
INSERT INTO instances (instance_id, mode, hostname, pid, started_at, metadata, last_seen,
                       expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (instance_id) DO UPDATE SET
    mode = excluded.mode, hostname = excluded.hostname, pid = excluded.pid,
    metadata = excluded.metadata, last_seen = excluded.last_seen,
    expires_at = excluded.expires_at
"""


def leader_attempt_elect(
    conn: sqlite3.Connection, name: str, instance_id: str, ttl_us: int, now: Now
) -> LeaderLease | None:
    with transaction(conn):
        at = now()
        params = {"name": name, "instance": instance_id, "now": at, "expires": at + ttl_us}
        row = conn.execute(_ELECT, params).fetchone()
    return codec.leader_lease(row) if row is not None else None


def leader_renew(
    conn: sqlite3.Connection, name: str, instance_id: str, epoch: int, ttl_us: int, now: Now
) -> LeaderLease | None:
    params = {"name": name, "instance": instance_id, "epoch": epoch}
    with transaction(conn):
        at = now()
        row = conn.execute(_RENEW, {**params, "now": at, "expires": at + ttl_us}).fetchone()
    return codec.leader_lease(row) if row is not None else None


def leader_resign(
    conn: sqlite3.Connection, name: str, instance_id: str, epoch: int, now: Now
) -> bool:
    params = {"name": name, "instance": instance_id, "epoch": epoch}
    with transaction(conn):
        return conn.execute(_RESIGN, {**params, "now": now()}).fetchone() is not None


def leader_get(conn: sqlite3.Connection, name: str, now: int) -> LeaderLease | None:
    row = conn.execute(
        "SELECT * FROM leader_leases WHERE name = ? AND expires_at > ?", (name, now)
    ).fetchone()
    return codec.leader_lease(row) if row is not None else None


def instance_heartbeat(
    conn: sqlite3.Connection, params: tuple[object, ...], ttl_us: int, now: Now
) -> None:
    with transaction(conn):
        at = now()
        conn.execute(_HEARTBEAT, (*params, at, at + ttl_us))


def instance_list(conn: sqlite3.Connection, now: int) -> list[InstanceInfo]:
    forget = now - INSTANCE_RETENTION_US
    # Listing is frequent: take the write lock only when there is something to forget.
    if conn.execute("SELECT 1 FROM instances WHERE expires_at <= ?", (forget,)).fetchone():
        with transaction(conn):
            conn.execute("DELETE FROM instances WHERE expires_at <= ?", (forget,))
    rows = conn.execute(
        "SELECT * FROM instances WHERE expires_at > ? ORDER BY instance_id", (now,)
    ).fetchall()
    return [codec.instance(row) for row in rows]


def instance_remove(conn: sqlite3.Connection, instance_id: str) -> None:
    with transaction(conn):
        conn.execute("DELETE FROM instances WHERE instance_id = ?", (instance_id,))
