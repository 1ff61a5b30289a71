"""What a store can do beyond the :class:`~soloist.stores.base.Store` protocol, declared in
one place.

A store declares its extras with a class attribute ``capabilities`` (one that declares
nothing is taken to offer the extras whose methods it has). The core
(:class:`~soloist.stores.core.CheckedStore`) offers every extra on every store: it calls
the store's own method when the store declares it, and otherwise falls back to what the
protocol allows (one more round trip, or nothing to do). A store that declares nothing
is a plain store: it works, polls, and reads the clock before inserting at now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol, runtime_checkable

from soloist.errors import ConfigError
from soloist.models import NewOccurrence, Occurrence, OccurrenceCounts
from soloist.stores.pages import JobCounts, JobPage, JobQuery

__all__ = [
    "PLAIN",
    "Capabilities",
    "ChecksSchema",
    "CountsJobs",
    "InsertsAtNow",
    "Listens",
    "PagesJobs",
    "Reach",
    "capabilities_of",
]

#: Who may share one store: one process (memory), the processes of one host (a SQLite
#: file), or instances anywhere on the network (PostgreSQL, Redis).
Reach = Literal["process", "host", "network"]


@dataclass(frozen=True)
class Capabilities:
    """The extras a store offers (each one names the method it then must have).

    * ``notifies``: :meth:`~soloist.stores.base.Store.work_wait` returns as soon as another
      instance makes work claimable, so idle instances do not poll; the store also has
      ``listen()`` (:class:`Listens`), which starts listening before the first wait.
    * ``inserts_at_now``: ``occurrence_insert_now(item, delay)`` (:class:`InsertsAtNow`)
      inserts an occurrence due at the store's own now plus ``delay`` in one round trip.
    * ``checks_schema``: ``schema_check()`` (:class:`ChecksSchema`) says, reading only,
      whether the store holds soloist's newest schema (read-only CLI commands need it).
    * ``pages_jobs``: ``job_page(query)`` and ``job_counts(prefix)`` (:class:`PagesJobs`)
      read one page of jobs with their last outcomes, and the jobs' counts, each in a
      bounded number of round trips whatever the number of jobs (the operator's views).
    * ``counts_jobs``: ``occurrence_counts_of(jobs, now)`` (:class:`CountsJobs`) counts the
      occurrences of some jobs by state and those of all the others by state together, in
      one round trip whose answer does not grow with the number of jobs (the metrics).
    * ``reach``: who may share the store (see :data:`Reach`).
    """

    notifies: bool = False
    inserts_at_now: bool = False
    checks_schema: bool = False
    pages_jobs: bool = False
    counts_jobs: bool = False
    reach: Reach = "network"


#: A store that declares nothing.
PLAIN = Capabilities()


@runtime_checkable
class Listens(Protocol):
    async def listen(self) -> None:
        """Start listening for wake-ups now (``work_wait`` does it on first use); wake-ups
        sent from then on are kept until the next ``work_wait``."""
        ...


@runtime_checkable
class InsertsAtNow(Protocol):
    async def occurrence_insert_now(
        self, item: NewOccurrence, delay: timedelta
    ) -> tuple[Occurrence, bool]:
        """:meth:`~soloist.stores.base.Store.occurrence_insert` with plan_time and due_at
        set to the store's now plus ``delay`` (those of ``item`` are ignored), in one
        round trip."""
        ...


@runtime_checkable
class ChecksSchema(Protocol):
    async def schema_check(self) -> None:
        """Raise StoreUnavailableError unless this store holds soloist's newest schema
        (StoreError if it is newer than this code). Reads only: creates nothing."""
        ...


@runtime_checkable
class PagesJobs(Protocol):
    """The operator's views of the jobs (see :mod:`soloist.stores.pages` for the order,
    the last outcome, the filters and the scan bound)."""

    async def job_page(self, query: JobQuery) -> JobPage:
        """The jobs of ``query`` (checked: :func:`~soloist.stores.pages.check_query`),
        each with its last outcome, in one query (one statement or script call; a few
        range reads where the store has no other way), whatever the number of jobs.

        Examines the jobs whose names are in the query's range (``query.start``,
        ``query.end``), in name order, at most ``query.scan`` of them; returns those
        that match its filters (``query.wants``), at most ``limit``, and the cursor of
        the next page as :func:`~soloist.stores.pages.page_of` makes it."""
        ...

    async def job_counts(self, prefix: str) -> JobCounts:
        """How many jobs have names starting with ``prefix``, and how many of them are
        paused (None if that would mean reading every job), in one round trip."""
        ...


@runtime_checkable
class CountsJobs(Protocol):
    async def occurrence_counts_of(
        self, jobs: Sequence[str], now: datetime | None
    ) -> OccurrenceCounts:
        """:meth:`~soloist.stores.base.Store.occurrence_counts` for the jobs of ``jobs``
        (sorted, distinct) only, with ``others`` set: every other job's occurrences by
        state. One consistent read in one round trip, its answer as large as ``jobs``."""
        ...


_NEEDS: dict[str, tuple[type, str]] = {
    "notifies": (Listens, "listen"),
    "inserts_at_now": (InsertsAtNow, "occurrence_insert_now"),
    "checks_schema": (ChecksSchema, "schema_check"),
    "pages_jobs": (PagesJobs, "job_page"),
    "counts_jobs": (CountsJobs, "occurrence_counts_of"),
}


def capabilities_of(store: object) -> Capabilities:
    """What ``store`` declares, or, if it has no ``capabilities`` attribute, the extras whose
    methods it has; ConfigError if it declares an extra without the method that goes
    with it."""
    declared = getattr(store, "capabilities", None)
    if declared is None:
        # Nothing declared (a store written before capabilities existed): it offers the
        # extras whose methods it has.
        return Capabilities(
            notifies=isinstance(store, Listens),
            inserts_at_now=isinstance(store, InsertsAtNow),
            checks_schema=isinstance(store, ChecksSchema),
            pages_jobs=isinstance(store, PagesJobs),
            counts_jobs=isinstance(store, CountsJobs),
        )
    if not isinstance(declared, Capabilities):
        raise ConfigError(
            f"invalid capabilities {declared!r} of store {store!r}: expected "
            "soloist.stores.core.Capabilities"
        )
    for name, (protocol, method) in _NEEDS.items():
        if getattr(declared, name) and not isinstance(store, protocol):
            raise ConfigError(f"store {store!r} declares {name} but has no {method}() method")
    if declared.reach not in ("process", "host", "network"):
        raise ConfigError(
            f"invalid reach {declared.reach!r} of store {store!r}: expected 'process', "
            "'host' or 'network'"
        )
    return declared
