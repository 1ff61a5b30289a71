"""The SQL of leader leases, planning partition leases and instance heartbeats: one
statement per store call.

Election, as in :mod:`soloist.stores.base`: one row per election name, never deleted, so a
lapsed or resigned lease keeps its epoch and the next holder's is higher. Taking the lease
is one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` (the lease is free, or the caller
holds it): PostgreSQL locks the conflicting row and evaluates the ``WHERE`` against its
latest committed version, so of candidates electing at the same instant the first takes
the lease and the others, having waited for its commit, find it held and get no row back.
Renew and resign are ``UPDATE``s fenced by holder, epoch and expiry.

Partition leases (``partition_leases``, apart from the leader leases) follow the same
rules, many partitions in one statement: :data:`_PARTITION_SYNC` is one ``INSERT ...
SELECT ... ON CONFLICT DO UPDATE ... WHERE`` over the partitions wanted (take or extend)
and those the caller holds but no longer wants (release: ``expires_at = now``, epoch
kept), in partition order, so two instances syncing at once lock their rows in one order
and each row ends with one holder. The store reads the leases back
(:data:`_PARTITION_LIST`) in the same transaction and round trip (a pipeline): a
statement does not see its own writes.

Every statement fixes its instant in the ``clock`` CTE (:data:`queries.NOW_CTE`): the
caller's ``now``, else the database's clock.
"""

# S608 flags SQL built with f-strings: only module constants are joined here (the clock
# CTE, column lists); values are %(name)s parameters, the schema is a quoted identifier.
# ruff: noqa: S608

from __future__ import annotations

from soloist.stores.postgres.queries import NOW_CTE, render

__all__ = ["INSTANCE_COLUMNS", "LEASE_COLUMNS", "PARTITION_COLUMNS", "Coordination"]

#: Column order of lease rows (see ``codec.leader_lease``).
LEASE_COLUMNS = "l.name, l.leader_id, l.epoch, l.elected_at, l.expires_at"
#: Column order of instance rows (see ``codec.instance``).
INSTANCE_COLUMNS = (
    "i.instance_id, i.mode, i.hostname, i.pid, i.started_at, i.last_seen, i.expires_at, i.metadata"
)

# ``excluded.elected_at`` is this statement's instant. The caller holding a live lease
# extends it (same epoch and elected_at); a free lease passes with the next epoch.
_SAME_TERM = "l.leader_id = excluded.leader_id AND l.expires_at > excluded.elected_at"
_ELECT = f"""
WITH {NOW_CTE}
INSERT INTO {{schema}}.leader_leases AS l (name, leader_id, epoch, elected_at, expires_at)
SELECT %(name)s, %(instance)s, 1, clock.now, clock.now + %(ttl)s::interval FROM clock
ON CONFLICT (name) DO UPDATE SET
    epoch = CASE WHEN {_SAME_TERM} THEN l.epoch ELSE l.epoch + 1 END,
    elected_at = CASE WHEN {_SAME_TERM} THEN l.elected_at ELSE excluded.elected_at END,
    leader_id = excluded.leader_id,
    expires_at = excluded.expires_at
WHERE l.expires_at <= excluded.elected_at OR l.leader_id = excluded.leader_id
RETURNING {LEASE_COLUMNS}
"""
_HELD = (
    "l.name = %(name)s AND l.leader_id = %(instance)s AND l.epoch = %(epoch)s "
    "AND l.expires_at > clock.now"
)
_RENEW = f"""
WITH {NOW_CTE}
UPDATE {{schema}}.leader_leases l SET expires_at = clock.now + %(ttl)s::interval
FROM clock WHERE {_HELD}
RETURNING {LEASE_COLUMNS}
"""
_RESIGN = f"""
WITH {NOW_CTE}
UPDATE {{schema}}.leader_leases l SET expires_at = clock.now
FROM clock WHERE {_HELD}
RETURNING l.name
"""
_GET = f"""
WITH {NOW_CTE}
SELECT {LEASE_COLUMNS} FROM {{schema}}.leader_leases l, clock
WHERE l.name = %(name)s AND l.expires_at > clock.now
"""

#: Column order of partition lease rows (see ``codec.partition_lease``).
PARTITION_COLUMNS = "p.partition, p.holder, p.epoch, p.expires_at"
# The caller holds the row's lease, unexpired (``excluded`` is the caller's row).
_MINE = "p.holder = excluded.holder AND p.expires_at > (SELECT now FROM clock)"
# A partition taken: free (no row, or expired) and wanted (its new expiry is later than
# now; a release's is now).
_FREE = "p.expires_at <= (SELECT now FROM clock) AND excluded.expires_at > (SELECT now FROM clock)"
_PARTITION_SYNC = f"""
WITH {NOW_CTE},
asked AS (
    SELECT w AS partition, true AS keep FROM unnest(%(want)s::integer[]) AS w
    UNION ALL
    SELECT m.partition, false FROM {{schema}}.partition_leases m, clock
    WHERE m.holder = %(instance)s AND m.expires_at > clock.now
      AND m.partition <> ALL(%(want)s::integer[])
)
INSERT INTO {{schema}}.partition_leases AS p (partition, holder, epoch, expires_at)
SELECT a.partition, %(instance)s, 1,
       CASE WHEN a.keep THEN clock.now + %(ttl)s::interval ELSE clock.now END
FROM asked a, clock
ORDER BY a.partition
ON CONFLICT (partition) DO UPDATE SET
    epoch = CASE WHEN {_MINE} THEN p.epoch ELSE p.epoch + 1 END,
    holder = excluded.holder,
    expires_at = excluded.expires_at
WHERE {_MINE} OR {_FREE}
"""
_PARTITION_LIST = f"""
WITH {NOW_CTE}
SELECT {PARTITION_COLUMNS} FROM {{schema}}.partition_leases p, clock
WHERE p.expires_at > clock.now
ORDER BY p.partition
"""

# started_at is the first heartbeat's; every other field is the latest one's.
_HEARTBEAT = f"""
WITH {NOW_CTE}
INSERT INTO {{schema}}.instances AS i
    (instance_id, mode, hostname, pid, started_at, last_seen, expires_at, metadata)
SELECT %(instance)s, %(mode)s, %(hostname)s, %(pid)s, %(started_at)s, clock.now,
       clock.now + %(ttl)s::interval, %(metadata)s::json
FROM clock
ON CONFLICT (instance_id) DO UPDATE SET
    mode = excluded.mode, hostname = excluded.hostname, pid = excluded.pid,
    last_seen = excluded.last_seen, expires_at = excluded.expires_at,
    metadata = excluded.metadata
"""
# Rows expired for over an hour are forgotten on the way. Ids sort by code point (as
# Python's sorted and the other stores do), whatever the database's collation.
_LIST = f"""
WITH {NOW_CTE},
forgotten AS (
    DELETE FROM {{schema}}.instances f USING clock
    WHERE f.expires_at <= clock.now - interval '1 hour'
)
SELECT {INSTANCE_COLUMNS} FROM {{schema}}.instances i, clock
WHERE i.expires_at > clock.now
ORDER BY i.instance_id COLLATE "C"
"""

TEMPLATES: dict[str, str] = {
    "leader_elect": _ELECT,
    "leader_renew": _RENEW,
    "leader_resign": _RESIGN,
    "leader_get": _GET,
    "partition_sync": _PARTITION_SYNC,
    "partition_list": _PARTITION_LIST,
    "instance_heartbeat": _HEARTBEAT,
    "instance_list": _LIST,
    "instance_remove": "DELETE FROM {schema}.instances WHERE instance_id = %(instance)s",
}


class Coordination:
    """Every statement of :data:`TEMPLATES`, rendered for one schema, as attributes."""

    def __init__(self, schema: str) -> None:
        rendered = render(TEMPLATES, schema)
        self.leader_elect = rendered["leader_elect"]
        self.leader_renew = rendered["leader_renew"]
        self.leader_resign = rendered["leader_resign"]
        self.leader_get = rendered["leader_get"]
        self.partition_sync = rendered["partition_sync"]
        self.partition_list = rendered["partition_list"]
        self.instance_heartbeat = rendered["instance_heartbeat"]
        self.instance_list = rendered["instance_list"]
        self.instance_remove = rendered["instance_remove"]
