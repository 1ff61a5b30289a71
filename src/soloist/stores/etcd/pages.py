"""Pages of jobs with their last outcome on etcd (the capability ``pages_jobs``; see
:mod:`soloist.stores.pages` for the contract).

The jobs of the range are one range read of ``j/`` (a few for a filter's ``scan``), in key
order, which is the names' byte order. The last outcome of each job a page needs is the
last key of its range of ``f/<job>\\0`` (its finished occurrences by plan time, creation
and id, written with the outcome and deleted with the history): one transaction holds,
for every such job, a descending range read of one key (a few transactions past
:data:`~soloist.stores.etcd.ops.MAX_OPS` jobs), and one more request reads the
occurrences found. The cost follows the page, whatever the store holds.

Key layout 1 had no ``f/``: :func:`index_finished` (``migrate``, once) enters the
finished occurrences already there, a page of the history at a time. (An upgrade rather
than a fallback: etcd has no other index of occurrences by job, so a fallback would walk
``l/``, every occurrence, which is what this replaced: 490 ms for a page of 50 at 10,000
jobs.)"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aetcd import rpc

from soloist.models import State
from soloist.stores.etcd import codec
from soloist.stores.etcd.connections import range_request
from soloist.stores.etcd.ops import MAX_OPS, Unit, mod_is
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

__all__ = ["index_finished", "job_counts", "job_page"]

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
    """The newest finished occurrence, by plan time, of each job of ``names``: the last key
    of each job's ``f/`` range, read in transactions of :data:`MAX_OPS` ranges, then the
    occurrences found. A key whose occurrence is gone or unfinished (written beside an
    older soloist) counts as none."""
    ids: dict[str, str] = {}
    for at in range(0, len(names), MAX_OPS):
        chunk = names[at : at + MAX_OPS]
        ranges = [_last_key(*store._prefix("f", name)) for name in chunk]
        with store._conns.translated():
            reply = await store._conns.txn([], ranges)
        for name, response in zip(chunk, reply.responses, strict=True):
            kvs = response.response_range.kvs
            if kvs:
                start = store._prefix("f", name)[0]
                ids[name] = bytes(kvs[0].key)[len(start) + 40 :].decode()
    found = await store._gets([store._occ_key(i) for i in ids.values()])
    lasts: dict[str, LastOutcome | None] = dict.fromkeys(names)
    for name, kv in zip(ids, found, strict=True):
        if kv is not None:
            occ = codec.occurrence(kv.value)
            if occ.state.value in _FINISHED:
                lasts[name] = LastOutcome.of(occ)
    return lasts


def _last_key(start: bytes, end: bytes) -> Any:
    """A request for the last key of ``[start, end)`` (keys only)."""
    return rpc.RequestOp(request_range=range_request(start, end, 1, True, keys_only=True))


async def index_finished(store: EtcdStore) -> int:
    """Key layout 1 to 2: every finished occurrence of the history (``h/``) gets its
    ``f/`` key, and its ``h/`` value the job (so that the history's trim deletes the
    ``f/`` key with it), a page of :data:`PAGE` at a time; each write applies only while
    the ``h/`` key is unchanged (a trim deleted it: nothing to do). Running it again, or
    two at once, writes the same keys. Returns how many were entered."""
    start, end = store._prefix("h")
    entered = 0
    while True:
        batch = await store._range(start, end, limit=PAGE)
        old = [(kv, json.loads(kv.value)) for kv in batch]
        old = [(kv, value) for kv, value in old if len(value) == 2]
        listed = await store._gets([value[1].encode() for _, value in old])
        units = []
        for (kv, (dedupe, list_key)), entry in zip(old, listed, strict=True):
            if entry is None:
                continue
            job = json.loads(entry.value)[0]
            unit = Unit(compare=[mod_is(bytes(kv.key), int(kv.mod_revision))])
            unit.put(bytes(kv.key), codec.dumps([dedupe, list_key, job]))
            unit.put(store._finished_key(job, list_key.encode()), b"")
            units.append(unit)
        entered += sum(await store._apply(units))
        if len(batch) < PAGE:
            return entered
        start = bytes(batch[-1].key) + b"\0"


async def job_counts(store: EtcdStore, prefix: str) -> JobCounts:
    """The number of jobs from one count-only range read; paused ones are not counted
    (that would read every job)."""
    low, high = _name_range(store, prefix, True, prefix_end(prefix))
    with store._conns.translated():
        reply = await store._conns.range(low, high, count_only=True)
    return JobCounts(int(reply.count), None)
