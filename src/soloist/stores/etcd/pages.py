"""Pages of jobs with their last outcome on etcd (the capability ``pages_jobs``; see
:mod:`soloist.stores.pages` for the contract).

The jobs of the range are one range read of ``j/`` (a few for a filter's ``scan``), in key
order, which is the names' byte order. etcd has no index of occurrences by job, so the
last outcomes of the jobs a page needs come from one walk of ``l/`` (every occurrence by
plan time, with its job and state) from its newest end, which stops once each of those
jobs has met a finished row: its newest one by plan time. The walk costs what the store
holds (its history is bounded by the URL's ``history_max``, 10000 by default, plus the
occurrences waiting), never reads per job, and is a few range reads; then one request
reads the occurrences found."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from soloist.models import State
from soloist.stores.etcd import codec
from soloist.stores.pages import (
    JobCounts,
    JobPage,
    JobQuery,
    LastOutcome,
    page_in_python,
    prefix_end,
)

if TYPE_CHECKING:
    from soloist.stores.etcd.store import EtcdStore

__all__ = ["job_counts", "job_page"]

#: Keys read per range request.
PAGE = 500
_FINISHED = {State.SUCCEEDED.value, State.DEAD.value, State.SKIPPED.value}


def _name_range(
    store: EtcdStore, start: str, inclusive: bool, end: str | None
) -> tuple[bytes, bytes]:
    """The keys ``j/<name>`` of the names from ``start`` (name, inclusive) to ``end``."""
    first, last = store._prefix("j")
    low = first + start.encode() + (b"" if inclusive else b"\0")  # no name holds a NUL
    return low, first + end.encode() if end is not None else last


async def job_page(store: EtcdStore, query: JobQuery) -> JobPage:
    start, inclusive = query.start
    low, high = _name_range(store, start, inclusive, query.end)
    wanted = query.scan + 1
    kvs: list[Any] = []
    while len(kvs) < wanted:
        asked = min(PAGE, wanted - len(kvs))
        got = await store._range(low, high, limit=asked)
        kvs += got
        if len(got) < asked:
            break
        low = bytes(got[-1].key) + b"\0"
    skip = len(store._prefix("j")[0])
    records = [codec.job(bytes(kv.key)[skip:].decode(), kv.value) for kv in kvs]
    return await page_in_python(records, query, lambda names: _lasts(store, names))


async def _lasts(store: EtcdStore, names: list[str]) -> dict[str, LastOutcome | None]:
    """The newest finished occurrence, by plan time, of each job of ``names``: one walk of
    the list index from its newest end, stopped once every job has one."""
    missing = set(names)
    ids: dict[str, str] = {}
    start, end = store._prefix("l")
    async for kv in store._walk(start, end, descending=True):
        job, state = json.loads(kv.value)
        if job in missing and state in _FINISHED:
            ids[job] = bytes(kv.key)[len(start) + 40 :].decode()
            missing.discard(job)
            if not missing:
                break
    found = await store._gets([store._occ_key(i) for i in ids.values()])
    lasts: dict[str, LastOutcome | None] = dict.fromkeys(names)
    for kv in found:
        if kv is not None:
            occ = codec.occurrence(kv.value)
            lasts[occ.job] = LastOutcome.of(occ)
    return lasts


async def job_counts(store: EtcdStore, prefix: str) -> JobCounts:
    """The number of jobs from one count-only range read; paused ones are not counted
    (that would read every job)."""
    low, high = _name_range(store, prefix, True, prefix_end(prefix))
    with store._conns.translated():
        reply = await store._conns.range(low, high, count_only=True)
    return JobCounts(int(reply.count), None)
