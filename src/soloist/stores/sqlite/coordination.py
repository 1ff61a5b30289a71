"""Leader leases, planning partition leases and instance heartbeats in SQLite, as blocking
functions of a connection.

Each write is a ``BEGIN IMMEDIATE`` transaction (see :mod:`.ops`): the write lock is taken
before the statements read the leases, so two processes electing (or syncing partitions) at
the same instant are serialised and the second sees the first's leases; each write reads
its instant (an ``ops.Now``) only once it holds the lock. Lease rows are never deleted; a
lapsed, resigned or released lease keeps its epoch, so the next holder's epoch is higher.
Partition leases have a table of their own (``partition_leases``). Times are epoch
microseconds.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection

from soloist.models import InstanceInfo, LeaderLease, PartitionLease
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

# A wanted partition: free (no row, or expired) is taken with the next epoch; held by the
# caller, extended with the same epoch; held by another, left (the WHERE fails).
_TAKE_PARTITION = """
INSERT INTO partition_leases (partition, holder, epoch, expires_at)
VALUES (:partition, :instance, 1, :expires)
ON CONFLICT (partition) DO UPDATE SET
    epoch = CASE WHEN holder = :instance AND expires_at > :now THEN epoch ELSE epoch + 1 END,
    holder = :instance,
    expires_at = :expires
WHERE expires_at <= :now OR holder = :instance
"""
# The caller's unexpired leases outside ``:want`` (a JSON array) end now, epoch kept.
_RELEASE_PARTITIONS = """
UPDATE partition_leases SET expires_at = :now
WHERE holder = :instance AND expires_at > :now
  AND partition NOT IN (SELECT value FROM json_each(:want))
"""
_LIVE_PARTITIONS = "SELECT * FROM partition_leases WHERE expires_at > ? ORDER BY partition"

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


def partition_sync(
    conn: sqlite3.Connection, instance_id: str, want: Collection[int], ttl_us: int, now: Now
) -> list[PartitionLease]:
    """Release the caller's partitions outside ``want``, renew or take those in it, and
    return every unexpired partition lease after that, all in one write transaction."""
    with transaction(conn):
        at = now()
        params = {"instance": instance_id, "now": at, "expires": at + ttl_us}
        conn.execute(_RELEASE_PARTITIONS, {**params, "want": json.dumps(sorted(want))})
        conn.executemany(_TAKE_PARTITION, ({**params, "partition": p} for p in sorted(want)))
        rows = conn.execute(_LIVE_PARTITIONS, (at,)).fetchall()
    return [codec.partition_lease(row) for row in rows]


def partition_list(conn: sqlite3.Connection, now: int) -> list[PartitionLease]:
    """Every unexpired partition lease at ``now``, by partition. Reads only."""
    rows = conn.execute(_LIVE_PARTITIONS, (now,)).fetchall()
    return [codec.partition_lease(row) for row in rows]


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
