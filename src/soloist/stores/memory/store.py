"""The memory store: every method one critical section under one lock."""

from __future__ import annotations

import bisect
import copy
import itertools
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from soloist.clock import Clock, SystemClock
from soloist.errors import DuplicateJobError, StoreError
from soloist.models import (
    CLAIMABLE_STATES,
    RELEASED,
    Attempt,
    Claimed,
    DueBatch,
    DueStream,
    InstanceInfo,
    JobRecord,
    LeaderLease,
    NewOccurrence,
    Occurrence,
    OccurrenceCounts,
    Outcome,
    Overlap,
    PartitionLease,
    PlanAdvance,
    PlanCursor,
    Renewed,
    State,
    stream_slot,
)
from soloist.payload import validate_payload
from soloist.stores import rows
from soloist.stores.core import Capabilities
from soloist.stores.memory.coordination import Elections, Instances
from soloist.stores.pages import JobCounts, JobPage, JobQuery, LastOutcome, page_in_python

__all__ = ["MemoryStore"]


@dataclass(frozen=True)
class _Row:
    """A stored occurrence plus its insertion sequence (the final tie-breaker of orders)."""

    seq: int
    occ: Occurrence


def _history_order(row: _Row) -> tuple[datetime, datetime, int]:
    """Where a row stands in the history's order (newest plan time, then newest created,
    then newest inserted, last)."""
    return (row.occ.plan_time, row.occ.created_at, row.seq)


class _Guard:
    """The store's one lock, which cannot be taken once the store is closed: a closed store
    answers no call (as a closed connection pool would not), so that a caller still using
    it learns so instead of working on data nobody else sees."""

    def __init__(self, url: str) -> None:
        self._lock = threading.Lock()
        self._url = url
        self.closed = False

    def check(self) -> None:
        if self.closed:
            raise StoreError(f"memory store {self._url} is closed")

    def __enter__(self) -> None:
        self.check()
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class MemoryStore:
    """A :class:`soloist.stores.base.Store` in process memory (``memory://``): a driver
    that trusts the checks of :class:`soloist.stores.core.CheckedStore`."""

    capabilities = Capabilities(pages_jobs=True, reach="process")

    def __init__(
        self,
        url: str = "memory://",
        *,
        clock: Clock | None = None,
        lease_ttl: float | timedelta | None = None,
    ) -> None:
        """``lease_ttl`` is accepted like every store's, and unused: nothing here can hang."""
        self.url = url
        self._clock: Clock = clock or SystemClock()
        self._lock = _Guard(url)
        self._seq = itertools.count(1)
        self._rows: dict[str, _Row] = {}
        self._by_key: dict[str, str] = {}
        self._cursors: dict[tuple[str, str], PlanCursor] = {}
        #: The planning index: (next_plan_time, job, scope) of every cursor that has one,
        #: sorted, kept by _put_cursor and _drop_cursor.
        self._index: list[tuple[datetime, str, str]] = []
        self._jobs: dict[str, JobRecord] = {}
        self._attempts: dict[str, list[Attempt]] = {}
        self._elections = Elections()
        self._partitions: dict[int, PartitionLease] = {}
        self._instances = Instances()

    # -- life cycle -------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        """Nothing to migrate: the schema is these dicts."""
        return []

    async def close(self) -> None:
        """Nothing to release; safe to call twice. Every call after it raises StoreError."""
        self._lock.closed = True

    async def now(self) -> datetime:
        self._lock.check()
        return self._clock.now()

    def _now(self, now: datetime | None) -> datetime:
        return now if now is not None else self._clock.now()

    # -- occurrences ------------------------------------------------------------------------
    async def occurrence_insert(self, item: NewOccurrence) -> tuple[Occurrence, bool]:
        new = rows.new_occurrence(item, self._clock.now())
        with self._lock:
            existing = self._by_key.get(item.dedupe_key)
            if existing is not None:
                return rows.out(self._rows[existing].occ), False
            self._add(new)
            return rows.out(new), True

    async def occurrence_insert_many(self, items: Sequence[NewOccurrence]) -> int:
        created = self._clock.now()
        news = [rows.new_occurrence(item, created) for item in items]
        count = 0
        with self._lock:
            for new in news:
                if new.dedupe_key not in self._by_key:
                    self._add(new)
                    count += 1
        return count

    async def work_wait(self, timeout: float) -> bool:
        """Nothing notifies in one process's dicts: wait ``timeout`` on the store's clock."""
        self._lock.check()
        await self._clock.sleep(timeout)
        return False

    def _add(self, occ: Occurrence) -> None:
        self._rows[occ.id] = _Row(next(self._seq), occ)
        self._by_key[occ.dedupe_key] = occ.id

    def _set(self, occ: Occurrence) -> None:
        self._rows[occ.id] = replace(self._rows[occ.id], occ=occ)

    async def plan_cursor_get(self, job: str, scope: str) -> PlanCursor | None:
        with self._lock:
            return self._cursors.get((job, scope))

    async def plan_advance(self, advance: PlanAdvance) -> bool:
        return (await self.plan_advance_many([advance]))[0]

    async def plan_advance_many(self, steps: Sequence[PlanAdvance]) -> list[bool]:
        created = self._clock.now()
        news = [[rows.new_occurrence(item, created) for item in s.items] for s in steps]
        with self._lock:
            return [self._advance(step, items) for step, items in zip(steps, news, strict=True)]

    def _advance(self, step: PlanAdvance, news: list[Occurrence]) -> bool:
        key = (step.job, step.scope)
        cursor = self._cursors.get(key)
        if (cursor.last_plan_time if cursor is not None else None) != step.expected_last:
            return False
        if step.fence is not None:
            lease = self._partitions.get(step.fence.partition)
            if lease is None or lease.epoch != step.fence.epoch:
                return False
            if lease.expires_at <= self._clock.now():
                return False
        count = (cursor.planned_count if cursor is not None else 0) + step.added_count
        self._put_cursor(
            PlanCursor(step.job, step.scope, step.new_last, count, step.next_plan_time)
        )
        for new in news:
            if new.dedupe_key not in self._by_key:
                self._add(new)
        return True

    async def plan_due(
        self,
        before: datetime,
        limit: int,
        slots: Sequence[tuple[int, int]] | None = None,
    ) -> DueBatch:
        """From the sorted index: what the due entries cost, plus the entries of other
        slots passed over."""
        with self._lock:
            streams: list[DueStream] = []
            at = 0
            index = self._index
            while at < len(index) and index[at][0] <= before and len(streams) < limit:
                _, job, scope = index[at]
                cursor = self._cursors[(job, scope)]
                if _in_slots(cursor.slot, slots):
                    streams.append(DueStream(cursor, copy.deepcopy(self._jobs.get(job))))
                at += 1
            at = bisect.bisect_right(index, (before, "\U0010ffff", "\U0010ffff"), lo=at)
            next_at = None
            for moment, job, scope in itertools.islice(index, at, None):
                if _in_slots(stream_slot(job, scope), slots):
                    next_at = moment
                    break
            return DueBatch(streams, next_at)

    def _put_cursor(self, cursor: PlanCursor) -> None:
        """Store ``cursor`` and move its index entry (under the lock)."""
        key = (cursor.job, cursor.scope)
        self._drop_cursor(key)
        self._cursors[key] = cursor
        if cursor.next_plan_time is not None:
            bisect.insort(self._index, (cursor.next_plan_time, *key))

    def _drop_cursor(self, key: tuple[str, str]) -> None:
        old = self._cursors.pop(key, None)
        if old is not None and old.next_plan_time is not None:
            entry = (old.next_plan_time, *key)
            at = bisect.bisect_left(self._index, entry)
            del self._index[at]

    async def plan_cursor_ensure(
        self,
        streams: Sequence[tuple[str, str]],
        at: datetime | None = None,
        *,
        revive: bool = False,
    ) -> int:
        changed = 0
        with self._lock:
            moment = at if at is not None else self._clock.now()
            for job, scope in streams:
                cursor = self._cursors.get((job, scope))
                if cursor is None:
                    self._put_cursor(PlanCursor(job, scope, None, 0, moment))
                elif revive and (cursor.next_plan_time is None or cursor.next_plan_time > moment):
                    self._put_cursor(replace(cursor, next_plan_time=moment))
                else:
                    continue
                changed += 1
        return changed

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
        now = self._now(now)
        task_set = set(tasks)
        claimed: list[Occurrence] = []
        with self._lock:
            candidates = sorted(
                (
                    row
                    for row in self._rows.values()
                    if row.occ.state in CLAIMABLE_STATES
                    and row.occ.due_at <= now
                    and row.occ.task in task_set
                    and (not allow_only or row.occ.overlap == Overlap.ALLOW)
                ),
                key=lambda row: (row.occ.due_at, row.occ.plan_time, row.seq),
            )
            # Earliest start of the running occurrences of each (job, scope, task); a claim
            # made in this batch counts as started at ``now``.
            busy: dict[tuple[str, str, str], datetime] = {}
            for r in self._rows.values():
                if rows.running(r.occ):
                    key = (r.occ.job, r.occ.scope, r.occ.task)
                    started = r.occ.started_at or now
                    busy[key] = min(busy.get(key, started), started)
            for row in candidates:
                if len(claimed) >= limit:
                    break
                occ = row.occ
                key = (occ.job, occ.scope, occ.task)
                if occ.overlap != Overlap.ALLOW and key in busy:
                    # skip: only if a sibling was already running when this one was due;
                    # otherwise both are late and this one waits its turn, like queue.
                    if occ.overlap == Overlap.SKIP and busy[key] < occ.due_at:
                        self._set(rows.skipped(occ, now))
                    continue
                busy.setdefault(key, now)
                taken = replace(
                    occ,
                    state=State.RUNNING,
                    attempt=occ.attempt + 1,
                    fencing_token=occ.fencing_token + 1,
                    instance_id=instance_id,
                    started_at=now,
                    lease_expires_at=now + lease_ttl,
                    finished_at=None,
                    error_code=None,
                    error_message=None,
                    result=None,
                )
                self._set(taken)
                claimed.append(rows.out(taken))
        return claimed

    def _held(self, instance_id: str, claim: Claimed) -> Occurrence | None:
        """The row of ``claim`` if this runner still holds its lease (the fence)."""
        row = self._rows.get(claim.id)
        if row is None or not rows.running(row.occ):
            return None
        occ = row.occ
        if occ.instance_id != instance_id or occ.fencing_token != claim.fencing_token:
            return None
        return occ

    async def lease_renew(
        self,
        instance_id: str,
        claims: Sequence[Claimed],
        lease_ttl: timedelta,
        now: datetime | None = None,
    ) -> Renewed:
        expires = self._now(now) + lease_ttl
        renewed: list[str] = []
        cancel: list[str] = []
        with self._lock:
            for claim in claims:
                occ = self._held(instance_id, claim)
                if occ is not None:
                    self._set(replace(occ, lease_expires_at=expires))
                    renewed.append(occ.id)
                    if occ.cancel_requested:
                        cancel.append(occ.id)
        return Renewed(renewed, cancel)

    async def occurrence_cancel(
        self, occurrence_id: str, now: datetime | None = None
    ) -> tuple[Occurrence, bool] | None:
        now = self._now(now)
        with self._lock:
            row = self._rows.get(occurrence_id)
            if row is None:
                return None
            changed = rows.cancelled(row.occ, now)
            if changed is None:
                return rows.out(row.occ), False
            self._set(changed)
            return rows.out(changed), True

    async def occurrence_complete(
        self, instance_id: str, outcomes: Sequence[Outcome], now: datetime | None = None
    ) -> set[str]:
        now = self._now(now)
        checked = [(o, rows.result(o.result), rows.retry_at(o, now)) for o in outcomes]
        applied: set[str] = set()
        with self._lock:
            for outcome, result, retry_at in checked:
                occ = self._held(instance_id, Claimed(outcome.id, outcome.fencing_token))
                if occ is None:
                    continue
                state, code = rows.completed_as(occ, outcome)
                retry = state == State.FAILED
                self._log(occ, now, state.value, code, outcome.error_message)
                self._set(
                    replace(
                        occ,
                        state=state,
                        due_at=retry_at if retry else occ.due_at,
                        lease_expires_at=None,
                        finished_at=None if retry else now,
                        error_code=code,
                        error_message=outcome.error_message,
                        result=result,
                    )
                )
                applied.add(occ.id)
        return applied

    async def lease_release(
        self, instance_id: str, claims: Sequence[Claimed], now: datetime | None = None
    ) -> set[str]:
        now = self._now(now)
        released: set[str] = set()
        with self._lock:
            for claim in claims:
                occ = self._held(instance_id, claim)
                if occ is None:
                    continue
                back = rows.released(occ)
                if back.state == State.DEAD:  # its cancellation was requested
                    back = replace(back, finished_at=now)
                    self._log(occ, now, State.DEAD.value, back.error_code, back.error_message)
                else:
                    self._log(occ, now, RELEASED, back.error_code, back.error_message)
                self._set(back)
                released.add(occ.id)
        return released

    async def occurrence_reap(self, now: datetime | None = None) -> list[Occurrence]:
        now = self._now(now)
        reaped: list[Occurrence] = []
        with self._lock:
            expired = [
                row
                for row in self._rows.values()
                if rows.running(row.occ)
                and row.occ.lease_expires_at is not None
                and row.occ.lease_expires_at <= now
            ]
            for row in sorted(expired, key=lambda r: (r.occ.plan_time, r.seq)):
                occ = row.occ
                updated, outcome = rows.reaped(occ, now)
                self._log(occ, now, outcome, updated.error_code, updated.error_message)
                self._set(updated)
                reaped.append(rows.out(updated))
        return reaped

    async def occurrence_attempts(self, occurrence_id: str) -> list[Attempt]:
        with self._lock:
            return list(self._attempts.get(occurrence_id, []))

    def _log(
        self, occ: Occurrence, now: datetime, outcome: str, code: str | None, message: str | None
    ) -> None:
        """Append the audit record of the attempt ``occ`` (still running) ends with."""
        self._attempts.setdefault(occ.id, []).append(
            Attempt(
                occurrence_id=occ.id,
                attempt=occ.attempt,
                fencing_token=occ.fencing_token,
                instance_id=occ.instance_id,
                started_at=occ.started_at,
                finished_at=now,
                outcome=outcome,
                error_code=code,
                error_message=message,
            )
        )

    async def occurrence_next_due(
        self, tasks: Collection[str], now: datetime | None = None
    ) -> datetime | None:
        task_set = set(tasks)
        with self._lock:
            dues = [
                row.occ.due_at
                for row in self._rows.values()
                if row.occ.state in CLAIMABLE_STATES and row.occ.task in task_set
            ]
        return min(dues, default=None)

    async def occurrence_get(self, occurrence_id: str) -> Occurrence | None:
        with self._lock:
            row = self._rows.get(occurrence_id)
            return rows.out(row.occ) if row is not None else None

    async def occurrence_list(
        self,
        *,
        job: str | None = None,
        state: State | None = None,
        limit: int = 100,
    ) -> list[Occurrence]:
        with self._lock:
            found = [
                row
                for row in self._rows.values()
                if (job is None or row.occ.job == job) and (state is None or row.occ.state == state)
            ]
            found.sort(key=lambda r: (r.occ.plan_time, r.occ.created_at, r.seq), reverse=True)
            return [rows.out(row.occ) for row in found[:limit]]

    async def occurrence_counts(self, now: datetime | None = None) -> OccurrenceCounts:
        at = self._now(now)
        counts: dict[tuple[str, State], int] = {}
        due = 0
        with self._lock:
            for row in self._rows.values():
                occ = row.occ
                pair = (occ.job, occ.state)
                counts[pair] = counts.get(pair, 0) + 1
                if occ.state in CLAIMABLE_STATES and occ.due_at <= at:
                    due += 1
        return OccurrenceCounts(by_job_state=counts, due=due)

    async def history_prune(
        self,
        before: datetime | None,
        keep: int | None,
        limit: int,
        *,
        dry_run: bool = False,
    ) -> int:
        with self._lock:
            done = sorted(
                (r for r in self._rows.values() if r.occ.finished_at is not None),
                key=lambda r: (r.occ.finished_at, r.seq),
            )
            # The newest finished occurrence of each job stays (its last outcome).
            latest: dict[str, datetime] = {}
            for row in done:
                assert row.occ.finished_at is not None
                latest[row.occ.job] = row.occ.finished_at
            over = len(done) - keep if keep is not None else 0
            doomed = [
                row
                for rank, row in enumerate(done)
                if row.occ.state not in (State.SCHEDULED, State.RUNNING, State.FAILED)
                and (
                    rank < over
                    or (
                        before is not None
                        and row.occ.finished_at is not None
                        and row.occ.finished_at < before
                    )
                )
                and row.occ.finished_at != latest[row.occ.job]
            ][:limit]
            if dry_run:
                return len(doomed)
            for row in doomed:
                del self._rows[row.occ.id]
                if self._by_key.get(row.occ.dedupe_key) == row.occ.id:
                    del self._by_key[row.occ.dedupe_key]
                self._attempts.pop(row.occ.id, None)
            return len(doomed)

    # -- jobs -------------------------------------------------------------------------------
    async def job_upsert(self, records: Sequence[JobRecord]) -> None:
        now = self._clock.now()
        checked = [rows.job(record, now) for record in records]
        with self._lock:
            for record in checked:
                old = self._jobs.get(record.name)
                if old is not None:
                    record = replace(
                        record, paused=old.paused, created_at=old.created_at, dynamic=old.dynamic
                    )
                self._jobs[record.name] = record

    async def job_add(self, record: JobRecord) -> None:
        checked = rows.job(record, self._clock.now())
        with self._lock:
            if checked.name in self._jobs:
                raise DuplicateJobError(f"a job named {checked.name!r} already exists")
            self._jobs[checked.name] = checked
            key = (checked.name, "")
            self._put_cursor(PlanCursor(*key, None, 0, checked.created_at))

    async def job_get(self, name: str) -> JobRecord | None:
        with self._lock:
            record = self._jobs.get(name)
            return copy.deepcopy(record) if record is not None else None

    async def job_list(self) -> list[JobRecord]:
        with self._lock:
            return [copy.deepcopy(self._jobs[name]) for name in sorted(self._jobs)]

    async def job_delete(self, name: str) -> bool:
        with self._lock:
            for key in [key for key in self._cursors if key[0] == name]:
                self._drop_cursor(key)
            return self._jobs.pop(name, None) is not None

    async def job_set_paused(self, name: str, paused: bool) -> bool:
        with self._lock:
            record = self._jobs.get(name)
            if record is None:
                return False
            self._jobs[name] = replace(record, paused=paused)
            return True

    async def job_page(self, query: JobQuery) -> JobPage:
        """The capability ``pages_jobs``: one critical section reads the jobs of the range
        (``query.scan + 1`` at most) and the newest finished occurrence of each."""
        start, inclusive = query.start
        with self._lock:
            names = sorted(self._jobs)
            at = (bisect.bisect_left if inclusive else bisect.bisect_right)(names, start)
            chosen = [n for n in names[at : at + query.scan + 1] if query.contains(n)]
            records = [copy.deepcopy(self._jobs[name]) for name in chosen]
            newest: dict[str, _Row] = {}
            wanted = set(chosen)
            for row in self._rows.values():
                if row.occ.job in wanted and row.occ.state.is_terminal:
                    best = newest.get(row.occ.job)
                    if best is None or _history_order(row) > _history_order(best):
                        newest[row.occ.job] = row
        lasts = {job: LastOutcome.of(row.occ) for job, row in newest.items()}

        async def known(names: list[str]) -> dict[str, LastOutcome | None]:
            return {name: lasts.get(name) for name in names}

        return await page_in_python(records, query, known)

    async def job_counts(self, prefix: str) -> JobCounts:
        with self._lock:
            found = [r for name, r in self._jobs.items() if name.startswith(prefix)]
        return JobCounts(len(found), sum(r.paused for r in found))

    # -- leader election ----------------------------------------------------------------------
    async def leader_attempt_elect(
        self, name: str, instance_id: str, ttl: timedelta, now: datetime | None = None
    ) -> LeaderLease | None:
        now = self._now(now)
        with self._lock:
            return self._elections.attempt_elect(name, instance_id, ttl, now)

    async def leader_renew(
        self,
        name: str,
        instance_id: str,
        epoch: int,
        ttl: timedelta,
        now: datetime | None = None,
    ) -> LeaderLease | None:
        now = self._now(now)
        with self._lock:
            return self._elections.renew(name, instance_id, epoch, ttl, now)

    async def leader_resign(
        self, name: str, instance_id: str, epoch: int, now: datetime | None = None
    ) -> bool:
        now = self._now(now)
        with self._lock:
            return self._elections.resign(name, instance_id, epoch, now)

    async def leader_get(self, name: str, now: datetime | None = None) -> LeaderLease | None:
        now = self._now(now)
        with self._lock:
            return self._elections.get(name, now)

    # -- planning partitions ----------------------------------------------------------------
    async def partition_sync(
        self,
        instance_id: str,
        want: Collection[int],
        ttl: timedelta,
        now: datetime | None = None,
    ) -> list[PartitionLease]:
        now = self._now(now)
        with self._lock:
            leases = self._partitions
            for number, lease in list(leases.items()):
                mine = lease.holder == instance_id and lease.expires_at > now
                if mine and number not in want:
                    leases[number] = replace(lease, expires_at=now)
            for number in want:
                current = leases.get(number)
                if current is not None and current.expires_at > now:
                    if current.holder == instance_id:
                        leases[number] = replace(current, expires_at=now + ttl)
                    continue
                epoch = current.epoch + 1 if current is not None else 1
                leases[number] = PartitionLease(number, instance_id, epoch, now + ttl)
            return self._partition_view(now)

    async def partition_list(self, now: datetime | None = None) -> list[PartitionLease]:
        now = self._now(now)
        with self._lock:
            return self._partition_view(now)

    def _partition_view(self, now: datetime) -> list[PartitionLease]:
        return [lease for _, lease in sorted(self._partitions.items()) if lease.expires_at > now]

    # -- instances --------------------------------------------------------------------------
    async def instance_heartbeat(
        self, info: InstanceInfo, ttl: timedelta, now: datetime | None = None
    ) -> None:
        now = self._now(now)
        what = f"metadata of instance {info.instance_id!r}"
        checked = replace(info, metadata=validate_payload(info.metadata, what=what))
        with self._lock:
            self._instances.heartbeat(checked, ttl, now)

    async def instance_list(self, now: datetime | None = None) -> list[InstanceInfo]:
        now = self._now(now)
        with self._lock:
            return self._instances.live(now)

    async def instance_remove(self, instance_id: str) -> None:
        with self._lock:
            self._instances.remove(instance_id)


def _in_slots(slot: int, slots: Sequence[tuple[int, int]] | None) -> bool:
    return slots is None or any(lo <= slot < hi for lo, hi in slots)
