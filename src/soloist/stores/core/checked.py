"""The checked core over a store's driver: one wrapper applies the rules that are not
dialect-specific to every store, including one given to ``Scheduler(store=...)``.

What lives here, once, for every store:

* argument checks: aware datetimes (converted to UTC), positive lease and election TTLs,
  integer limits, outcome states, state filters, task collections, delays;
* resolving ``now``: a time given by the caller is checked and converted to UTC;
  ``None`` stays ``None`` and means the store's own clock read at the moment of the
  write, which only the driver can do (inside the statement or script on a server, after
  the write lock on SQLite): read any earlier, a write that waits for a lock would be
  stamped with a time from before the wait;
* empty input: no items, claims, outcomes, records or tasks, or a limit of zero or less,
  answer at once without a round trip;
* the extras of :mod:`~soloist.stores.core.capabilities`, with a fallback for stores that
  lack them.

A driver (the store classes in ``soloist.stores.<name>``) may therefore assume checked
input and only translate it: SQL, Lua or dicts, and its errors to
:class:`~soloist.errors.StoreError`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import cast

from soloist.errors import ConfigError
from soloist.models import (
    Attempt,
    Claimed,
    DueBatch,
    InstanceInfo,
    JobRecord,
    LeaderLease,
    NewOccurrence,
    Occurrence,
    OccurrenceCounts,
    Outcome,
    PartitionLease,
    PlanAdvance,
    PlanCursor,
    Renewed,
    State,
)
from soloist.stores.base import Store
from soloist.stores.core.capabilities import (
    Capabilities,
    ChecksSchema,
    CountsJobs,
    InsertsAtNow,
    Listens,
    PagesJobs,
    capabilities_of,
)
from soloist.stores.core.checks import (
    MAX_LIMIT,
    aware_utc,
    check_delay,
    check_info,
    check_item,
    check_items,
    check_job,
    check_jobs,
    check_limit,
    check_outcomes,
    check_partitions,
    check_slots,
    check_state,
    check_step,
    check_streams,
    check_tasks,
    positive_ttl,
)
from soloist.stores.pages import (
    JobCounts,
    JobPage,
    JobQuery,
    LastOutcome,
    check_prefix,
    check_query,
    page_in_python,
)
from soloist.stores.urls import Retention

__all__ = ["MAX_DELAY", "CheckedStore", "checked", "split_counts"]

#: The longest delay of :meth:`CheckedStore.occurrence_insert_now`: 1000 years.
MAX_DELAY = timedelta(days=365_250)


def checked(store: Store) -> CheckedStore:
    """``store`` behind the core's checks (itself if it already is)."""
    if isinstance(store, CheckedStore):
        return store
    if not isinstance(store, Store):
        raise ConfigError(f"invalid store {store!r}: expected a soloist.stores.base.Store")
    return CheckedStore(store)


class CheckedStore:
    """A :class:`~soloist.stores.base.Store` that checks every call, then hands it to
    ``driver`` (see the module docstring). ``driver``: the store it wraps; its
    ``capabilities`` say which extras it offers itself."""

    def __init__(self, driver: Store) -> None:
        self.driver = driver
        self.url = driver.url
        self.capabilities: Capabilities = capabilities_of(driver)

    def __repr__(self) -> str:
        return repr(self.driver)

    @staticmethod
    def _at(now: datetime | None) -> datetime | None:
        return aware_utc(now, "now") if now is not None else None

    # -- life cycle -------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        # A store written for soloist 0.1 returns None: it applied nothing it can name.
        return list(await self.driver.migrate() or [])

    async def close(self) -> None:
        await self.driver.close()

    async def now(self) -> datetime:
        # Always the driver's: its test clock if it has one, else a real read (a readiness
        # probe pings the store this way).
        return aware_utc(await self.driver.now(), "now() of the store")

    async def schema_check(self) -> None:
        """Raise unless the store holds soloist's newest schema, reading only; a store that
        cannot tell (memory) has nothing to check."""
        if self.capabilities.checks_schema:
            await cast(ChecksSchema, self.driver).schema_check()

    async def listen(self) -> None:
        """Start listening for wake-ups now, on a store that notifies (else nothing)."""
        if self.capabilities.notifies:
            await cast(Listens, self.driver).listen()

    # -- occurrences ------------------------------------------------------------------------
    async def occurrence_insert(self, item: NewOccurrence) -> tuple[Occurrence, bool]:
        return await self.driver.occurrence_insert(check_item(item))

    async def occurrence_insert_now(
        self, item: NewOccurrence, delay: timedelta = timedelta(0)
    ) -> tuple[Occurrence, bool]:
        """Insert ``item`` due at the store's now plus ``delay`` (its own plan_time and
        due_at are ignored): in one round trip where the store inserts at its own now,
        else after reading the store's clock."""
        delay = check_delay(delay)
        if delay > MAX_DELAY:
            # The store adds it to its own clock: past year 9999 it would write a row that
            # no reader can decode (the fallback below cannot even compute it).
            raise ConfigError(f"invalid delay {delay!r}: expected at most 1000 years")
        if self.capabilities.inserts_at_now:
            return await cast(InsertsAtNow, self.driver).occurrence_insert_now(item, delay)
        due = await self.now() + delay
        return await self.driver.occurrence_insert(replace(item, plan_time=due, due_at=due))

    async def occurrence_insert_many(self, items: Sequence[NewOccurrence]) -> int:
        if not items:
            return 0
        return await self.driver.occurrence_insert_many(check_items(items))

    async def work_wait(self, timeout: float) -> bool:
        return await self.driver.work_wait(max(0.0, float(timeout)))

    async def plan_cursor_get(self, job: str, scope: str) -> PlanCursor | None:
        return await self.driver.plan_cursor_get(job, scope)

    async def plan_advance(self, advance: PlanAdvance) -> bool:
        return (await self.plan_advance_many([advance]))[0]

    async def plan_advance_many(self, steps: Sequence[PlanAdvance]) -> list[bool]:
        if not steps:
            return []
        return await self.driver.plan_advance_many([check_step(step) for step in steps])

    async def plan_due(
        self,
        before: datetime,
        limit: int,
        slots: Sequence[tuple[int, int]] | None = None,
    ) -> DueBatch:
        ranges, limit = check_slots(slots), check_limit(limit)
        if limit <= 0 or ranges == []:
            return DueBatch([], None)
        return await self.driver.plan_due(aware_utc(before, "before"), limit, ranges)

    async def plan_cursor_ensure(
        self,
        streams: Sequence[tuple[str, str]],
        at: datetime | None = None,
        *,
        revive: bool = False,
    ) -> int:
        pairs = check_streams(streams)
        if not pairs:
            return 0
        moment = aware_utc(at, "at") if at is not None else None
        return await self.driver.plan_cursor_ensure(pairs, moment, revive=bool(revive))

    async def occurrence_claim(
        self,
        instance_id: str,
        tasks: Collection[str],
        limit: int,
        lease_ttl: timedelta,
        now: datetime | None = None,
        *,
        allow_only: bool = False,
    ) -> list[Occurrence]:
        names, ttl = check_tasks(tasks), positive_ttl(lease_ttl, "lease_ttl")
        limit = check_limit(limit)
        if limit <= 0 or not names:
            return []
        at = self._at(now)
        if allow_only:
            return await self.driver.occurrence_claim(
                instance_id, names, limit, ttl, at, allow_only=True
            )
        # The default claim is the call a driver written before allow_only understands.
        return await self.driver.occurrence_claim(instance_id, names, limit, ttl, at)

    async def lease_renew(
        self,
        instance_id: str,
        claims: Sequence[Claimed],
        lease_ttl: timedelta,
        now: datetime | None = None,
    ) -> Renewed:
        ttl = positive_ttl(lease_ttl, "lease_ttl")
        if not claims:
            return Renewed()
        renewed = await self.driver.lease_renew(instance_id, claims, ttl, self._at(now))
        # A driver written before cancellation answers a plain set: none was requested.
        return renewed if isinstance(renewed, Renewed) else Renewed(renewed)

    async def occurrence_complete(
        self, instance_id: str, outcomes: Sequence[Outcome], now: datetime | None = None
    ) -> set[str]:
        if not outcomes:
            return set()
        checked_outcomes = check_outcomes(outcomes)
        return await self.driver.occurrence_complete(instance_id, checked_outcomes, self._at(now))

    async def lease_release(
        self, instance_id: str, claims: Sequence[Claimed], now: datetime | None = None
    ) -> set[str]:
        if not claims:
            return set()
        return await self.driver.lease_release(instance_id, claims, self._at(now))

    async def occurrence_reap(self, now: datetime | None = None) -> list[Occurrence]:
        return await self.driver.occurrence_reap(self._at(now))

    async def occurrence_cancel(
        self, occurrence_id: str, now: datetime | None = None
    ) -> tuple[Occurrence, bool] | None:
        if not isinstance(occurrence_id, str) or not occurrence_id:
            raise ConfigError(
                f"invalid occurrence id {occurrence_id!r}: expected a non-empty string"
            )
        return await self.driver.occurrence_cancel(occurrence_id, self._at(now))

    async def occurrence_next_due(
        self, tasks: Collection[str], now: datetime | None = None
    ) -> datetime | None:
        names = check_tasks(tasks)
        if not names:
            return None
        return await self.driver.occurrence_next_due(names, self._at(now))

    async def occurrence_get(self, occurrence_id: str) -> Occurrence | None:
        return await self.driver.occurrence_get(occurrence_id)

    async def occurrence_list(
        self,
        *,
        job: str | None = None,
        state: State | None = None,
        limit: int = 100,
    ) -> list[Occurrence]:
        wanted, limit = check_state(state), check_limit(limit)
        if limit <= 0:
            return []
        return await self.driver.occurrence_list(job=job, state=wanted, limit=limit)

    async def occurrence_counts(
        self, now: datetime | None = None, *, jobs: Collection[str] | None = None
    ) -> OccurrenceCounts:
        """The protocol's counts; with ``jobs``, only those jobs' pairs, and every other
        job's occurrences by state in ``others`` (see :class:`OccurrenceCounts`): one
        round trip whose answer does not grow with the number of jobs on a store that
        counts jobs (``counts_jobs``); on another, the protocol's counts summed here."""
        if jobs is None:
            return await self.driver.occurrence_counts(self._at(now))
        wanted = check_jobs(jobs)
        if self.capabilities.counts_jobs:
            return await cast(CountsJobs, self.driver).occurrence_counts_of(wanted, self._at(now))
        return split_counts(await self.driver.occurrence_counts(self._at(now)), wanted)

    async def occurrence_attempts(self, occurrence_id: str) -> list[Attempt]:
        return await self.driver.occurrence_attempts(occurrence_id)

    @property
    def retention(self) -> Retention | None:
        """The history bounds the store's URL sets (``history_max``, ``history_age``), to
        which the runtime prunes it; None for a store without any (memory)."""
        found = getattr(self.driver, "retention", None)
        return found if isinstance(found, Retention) else None

    async def history_prune(
        self,
        before: datetime | None,
        keep: int | None,
        limit: int,
        *,
        dry_run: bool = False,
    ) -> int:
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 0):
            raise ConfigError(f"invalid keep {keep!r}: expected a whole number >= 0 or None")
        keep = min(keep, MAX_LIMIT) if keep is not None else None
        moment = aware_utc(before, "before") if before is not None else None
        limit = check_limit(limit)
        if limit <= 0 or (moment is None and keep is None):
            return 0
        return await self.driver.history_prune(moment, keep, limit, dry_run=bool(dry_run))

    # -- jobs -------------------------------------------------------------------------------
    async def job_upsert(self, records: Sequence[JobRecord]) -> None:
        if not records:
            return
        await self.driver.job_upsert([check_job(record) for record in records])

    async def job_add(self, record: JobRecord) -> None:
        await self.driver.job_add(check_job(record))

    async def job_get(self, name: str) -> JobRecord | None:
        return await self.driver.job_get(name)

    async def job_list(self) -> list[JobRecord]:
        return await self.driver.job_list()

    async def job_delete(self, name: str) -> bool:
        return await self.driver.job_delete(name)

    async def job_set_paused(self, name: str, paused: bool) -> bool:
        return await self.driver.job_set_paused(name, bool(paused))

    async def job_page(self, query: JobQuery | None = None) -> JobPage:
        """One page of jobs with their last outcomes (see :mod:`soloist.stores.pages`),
        in one query on a store that pages jobs; a store that does not reads every job
        and the history of the jobs it examines (slow, but the same page)."""
        query = check_query(query if query is not None else JobQuery())
        if self.capabilities.pages_jobs:
            return await cast(PagesJobs, self.driver).job_page(query)
        records = [r for r in await self.driver.job_list() if query.contains(r.name)]
        return await page_in_python(records, query, self._lasts)

    async def _lasts(self, names: list[str]) -> dict[str, LastOutcome | None]:
        """The last outcome of each job of ``names``, read from its history (a store
        without ``pages_jobs``): the newest rows first, more of them until a finished
        one or the end."""
        found: dict[str, LastOutcome | None] = {}
        for name in names:
            limit, last = 8, None
            while True:
                rows = await self.driver.occurrence_list(job=name, limit=limit)
                last = next((o for o in rows if o.state.is_terminal), None)
                if last is not None or len(rows) < limit or limit >= MAX_LIMIT:
                    break
                limit = min(limit * 8, MAX_LIMIT)
            found[name] = LastOutcome.of(last) if last is not None else None
        return found

    async def job_counts(self, prefix: str = "") -> JobCounts:
        """How many jobs have names starting with ``prefix``, and how many are paused
        (None where the store cannot tell without reading every job), in one round trip
        on a store that pages jobs (else from every job)."""
        prefix = check_prefix(prefix)
        if self.capabilities.pages_jobs:
            return await cast(PagesJobs, self.driver).job_counts(prefix)
        records = [r for r in await self.driver.job_list() if r.name.startswith(prefix)]
        return JobCounts(len(records), sum(r.paused for r in records))

    # -- leader election ----------------------------------------------------------------------
    async def leader_attempt_elect(
        self, name: str, instance_id: str, ttl: timedelta, now: datetime | None = None
    ) -> LeaderLease | None:
        ttl = positive_ttl(ttl)
        return await self.driver.leader_attempt_elect(name, instance_id, ttl, self._at(now))

    async def leader_renew(
        self,
        name: str,
        instance_id: str,
        epoch: int,
        ttl: timedelta,
        now: datetime | None = None,
    ) -> LeaderLease | None:
        ttl = positive_ttl(ttl)
        return await self.driver.leader_renew(name, instance_id, epoch, ttl, self._at(now))

    async def leader_resign(
        self, name: str, instance_id: str, epoch: int, now: datetime | None = None
    ) -> bool:
        return await self.driver.leader_resign(name, instance_id, epoch, self._at(now))

    async def leader_get(self, name: str, now: datetime | None = None) -> LeaderLease | None:
        return await self.driver.leader_get(name, self._at(now))

    # -- planning partitions ----------------------------------------------------------------
    async def partition_sync(
        self,
        instance_id: str,
        want: Collection[int],
        ttl: timedelta,
        now: datetime | None = None,
    ) -> list[PartitionLease]:
        wanted, ttl = check_partitions(want), positive_ttl(ttl)
        return await self.driver.partition_sync(instance_id, wanted, ttl, self._at(now))

    async def partition_list(self, now: datetime | None = None) -> list[PartitionLease]:
        return await self.driver.partition_list(self._at(now))

    # -- instances --------------------------------------------------------------------------
    async def instance_heartbeat(
        self, info: InstanceInfo, ttl: timedelta, now: datetime | None = None
    ) -> None:
        ttl = positive_ttl(ttl)
        await self.driver.instance_heartbeat(check_info(info), ttl, self._at(now))

    async def instance_list(self, now: datetime | None = None) -> list[InstanceInfo]:
        return await self.driver.instance_list(self._at(now))

    async def instance_remove(self, instance_id: str) -> None:
        await self.driver.instance_remove(instance_id)


def split_counts(counts: OccurrenceCounts, jobs: Collection[str]) -> OccurrenceCounts:
    """``counts`` of every job as ``occurrence_counts(jobs=jobs)`` answers: the pairs of
    ``jobs``, and all the others summed by state in ``others``."""
    named = set(jobs)
    pairs: dict[tuple[str, State], int] = {}
    others: dict[State, int] = {}
    for (job, state), count in counts.by_job_state.items():
        if job in named:
            pairs[(job, state)] = count
        else:
            others[state] = others.get(state, 0) + count
    return OccurrenceCounts(by_job_state=pairs, due=counts.due, others=others)
