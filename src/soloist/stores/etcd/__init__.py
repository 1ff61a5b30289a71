"""``etcd://host:2379?prefix=app``: the store on an etcd v3 cluster.

Data model (every key starts with ``/{prefix}/``; two apps with different prefixes share a
cluster without seeing each other). Times in keys are 20 digits, so keys sort by time:

* ``o/<id>`` an occurrence (a JSON array); ``k/<dedupe key>`` its id (an insert applies
  only while that key is absent); ``a/<id>\\0<token>`` its attempt records.
* ``q/<task>\\0<due>\\0<plan>\\0<created>\\0<id>`` the claimable (``scheduled``/``failed``)
  occurrences of a task, in claim order, each holding a copy of its occurrence: a claim
  reads the head of its tasks' ranges and takes each candidate only while its queue key is
  unchanged (``mod_revision``), one nested transaction per candidate, so that a conflict
  on one does not void the others.
* ``r/<job>\\0<scope>\\0<task>\\0<id>`` the running occurrences by overlap group, holding
  lease expiry, runner, token and start: reaping reads them, and a claim of a ``skip`` or
  ``queue`` candidate applies only while no running key of its group was written since the
  claim read them.
* ``l/<plan><created><id>`` every occurrence with its job and state, for
  ``occurrence_list`` (newest first) and ``occurrence_counts``; ``h/<finished>\\0<id>`` the
  finished ones: the history, trimmed to the URL's ``history_max`` (default 10000) and
  ``history_age`` (default 30 days) in batches, with their attempts, entries and dedupe
  keys; ``f/<job>\\0<plan><created><id>`` the finished ones by job, whose last key is the
  job's last outcome (``pages``), written with the outcome and deleted with the history.
* ``j/<name>`` jobs; ``c/<job>\\0<scope>`` plan cursors and ``n/<next>\\0<job>\\0<scope>``
  the planning index; a plan step applies only while its cursor (and the partition lease
  of its fence) is unchanged.
* ``e/<name>`` and ``p/<partition>`` leader and partition leases (holder, epoch, expiry;
  kept for good, so epochs never repeat), ``el/<name>`` and ``pl/<partition>`` their live
  keys on the holder's etcd lease; ``i/<instance>`` instances, on an etcd lease too.

Fencing tokens are per-occurrence counters that rise by one with every claim; leader and
partition epochs rise by one with every change of holder.
"""

from soloist.stores.etcd.store import SCHEMA_VERSION, EtcdStore
from soloist.stores.etcd.url import EtcdTarget, parse_url

__all__ = ["SCHEMA_VERSION", "EtcdStore", "EtcdTarget", "parse_url"]
