"""etcd transaction parts, and packing many independent units into few transactions.

A *unit* is one conditional change: compares and the operations that apply only when
they all hold (one nested transaction). Units are packed into outer transactions without
compares, each within etcd's limits: at most ``--max-txn-ops`` (128 by default) operations
or compares on any level, counted down the nesting (etcd gives a nested transaction the
budget its parent leaves); at most ``--max-request-bytes`` (1.5 MiB by default) per request;
and no key written twice in one request (etcd refuses that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aetcd import rpc

from soloist.stores.etcd.connections import range_request

__all__ = ["MAX_BYTES", "MAX_OPS", "Unit", "delete", "get", "mod_is", "put", "txn"]

#: etcd's default ``--max-txn-ops``.
MAX_OPS = 128
#: A request stays under this many bytes (etcd's default limit is 1.5 MiB, 1,572,864).
MAX_BYTES = 1_400_000
_EQUAL = rpc.Compare.EQUAL
_LESS = rpc.Compare.LESS


def put(key: bytes, value: bytes, lease: int = 0) -> Any:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease))


def delete(key: bytes, end: bytes | None = None) -> Any:
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key, range_end=end or b""))


def get(key: bytes, end: bytes | None = None, *, limit: int = 0, keys_only: bool = False) -> Any:
    return rpc.RequestOp(request_range=range_request(key, end, limit, keys_only=keys_only))


def txn(compare: Sequence[Any], success: Sequence[Any], failure: Sequence[Any] = ()) -> Any:
    return rpc.RequestOp(
        request_txn=rpc.TxnRequest(compare=compare, success=success, failure=failure)
    )


def mod_is(key: bytes, revision: int) -> Any:
    """The key was last written at ``revision`` (0: the key does not exist)."""
    return rpc.Compare(key=key, target=rpc.Compare.MOD, result=_EQUAL, mod_revision=revision)


def value_is(key: bytes, value: bytes) -> Any:
    return rpc.Compare(key=key, target=rpc.Compare.VALUE, result=_EQUAL, value=value)


def absent(key: bytes) -> Any:
    return rpc.Compare(key=key, target=rpc.Compare.CREATE, result=_EQUAL, create_revision=0)


def unchanged_since(key: bytes, end: bytes, revision: int) -> Any:
    """No key in ``[key, end)`` was written after ``revision`` (keys deleted since are not
    seen: a range compare holds for the keys it finds)."""
    return rpc.Compare(
        key=key, target=rpc.Compare.MOD, result=_LESS, mod_revision=revision + 1, range_end=end
    )


@dataclass
class Unit:
    """One conditional change (see the module docstring). ``writes`` names the keys its
    operations write, so that two units writing one key go to different requests."""

    compare: list[Any] = field(default_factory=list)
    success: list[Any] = field(default_factory=list)
    failure: list[Any] = field(default_factory=list)
    writes: set[bytes] = field(default_factory=set)

    def put(self, key: bytes, value: bytes, lease: int = 0) -> None:
        self.success.append(put(key, value, lease))
        self.writes.add(key)

    def delete(self, key: bytes) -> None:
        self.success.append(delete(key))
        self.writes.add(key)

    def nest(self, inner: Unit) -> None:
        """Add ``inner`` as a nested transaction of this unit's success branch."""
        self.success.append(inner.request())
        self.writes |= inner.writes

    def depth(self) -> int:
        """The operations budget this unit needs under its parent (see module docstring)."""
        return _depth(self.request().request_txn)

    def request(self) -> Any:
        return txn(self.compare, self.success, self.failure)


def _depth(request: Any) -> int:
    own = max(len(request.compare), len(request.success), len(request.failure), 1)
    inner = [
        _depth(op.request_txn)
        for op in request.success
        if op.WhichOneof("request") == "request_txn"
    ]
    return own + max(inner, default=0)


def pack(units: Sequence[Unit]) -> list[list[int]]:
    """Indexes of ``units`` grouped into outer transactions within etcd's limits, in
    order. A unit too large for a request of its own raises ValueError."""
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    deepest = 0
    written: set[bytes] = set()
    for at, unit in enumerate(units):
        need = unit.depth()
        nbytes = unit.request().ByteSize() + 8
        if need + 1 > MAX_OPS or nbytes > MAX_BYTES:
            raise ValueError(
                f"a change of {nbytes} bytes and {need} operations does not fit one etcd "
                f"request (at most {MAX_BYTES} bytes and {MAX_OPS} operations)"
            )
        fits = (
            len(current) + 1 + max(deepest, need) <= MAX_OPS
            and size + nbytes <= MAX_BYTES
            and not (unit.writes & written)
        )
        if current and not fits:
            groups.append(current)
            current, size, deepest, written = [], 0, 0, set()
        current.append(at)
        size += nbytes
        deepest = max(deepest, need)
        written |= unit.writes
    if current:
        groups.append(current)
    return groups
