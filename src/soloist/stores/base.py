"""The Store protocol: all state that instances share lives behind these methods.

Design (read this before writing a store):

* Exactly-once comes from the store, not from hoping one process is awake. Every occurrence
  has a unique ``dedupe_key``; inserting an existing key is a no-op. Planning advances a
  per-(job, scope) cursor with compare-and-set, inserting the new occurrences in the same
  atomic step, so two planners never both plan the same stretch.
* A claim is one atomic statement (or transaction) that moves due, claimable occurrences
  to ``running``, sets the runner, a lease expiry and a new fencing token
  (``fencing_token + 1``), and increments ``attempt``.
* Every write by a runner (lease renewal, outcome, release) is fenced: it applies only if
  the row is still ``running`` with the same ``fencing_token`` and ``instance_id``. A runner
  whose lease expired and was reaped/re-claimed cannot overwrite anything.
* Time: methods that depend on time take ``now=None``; ``None`` means the store's own
  clock (:meth:`Store.now`), which for server stores is the server's clock, so instance
  clock skew does not matter. Tests pass ``now`` or give the store a fake clock.
* All datetimes crossing this boundary are aware UTC datetimes with microsecond precision.
* Driver exceptions are translated to :class:`soloist.errors.StoreError` here, at the
  boundary; the core never imports a store driver.

Two layers. A store class implements this protocol for one dialect (SQL, Lua, dicts) and
only translates. The core (:class:`soloist.stores.core.CheckedStore`, applied by
:func:`soloist.stores.open_store`, by ``Scheduler(store=...)`` and by the conformance
suite) checks every call before the store sees it, so a store may rely on this:

* every datetime argument, item time and ``now`` given is an aware UTC datetime;
  ``now=None`` means the store's own clock (a test clock given to the store, else the
  server's), read at the moment of the write: inside the statement, after any lock;
* lease and election TTLs are positive; ``limit`` is a positive integer; ``tasks`` is a
  non-empty sorted list of distinct names; ``state`` filters are :class:`State` values;
  outcome states are ``succeeded``, ``failed`` or ``dead``;
* the sequences of ``occurrence_insert_many``, ``lease_renew``, ``occurrence_complete``,
  ``lease_release``, ``job_upsert``, ``plan_advance_many`` and ``plan_cursor_ensure``
  are never empty (a plan step may have no items: the cursor still moves); ``plan_due``
  gets at least one slot range when it gets any, each within ``[0, SLOTS]``;
* a plan step's ``new_last`` is None only when its ``expected_last`` is.

Extras beyond the protocol (waking idle instances, inserting at the store's now, a
read-only schema check, pages of jobs with their last outcome for the operator's views:
:mod:`soloist.stores.pages`) are declared by a class attribute ``capabilities``
(:class:`soloist.stores.core.Capabilities`). ``docs/howto/write-a-store.md`` walks
through writing one, and ``soloist.testing.conformance`` checks it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

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


@runtime_checkable
class Store(Protocol):
    """Shared state of all instances of one app. Every method is a contract; see module doc."""

    url: str

    # -- life cycle -------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        """Bring the schema to the newest version; return the versions this call applied,
        in order (none: it was up to date; a store without a schema applies none).
        Idempotent; safe when several instances call it at once (one of them applies each
        version). Raises StoreUnavailableError when the store cannot be reached."""
        ...

    async def close(self) -> None:
        """Release connections. Safe to call twice. Afterwards the store refuses calls:
        each raises StoreError saying it is closed (it does not reconnect)."""
        ...

    async def now(self) -> datetime:
        """The store's clock (aware UTC)."""
        ...

    # -- occurrences ------------------------------------------------------------------------
    async def occurrence_insert(self, item: NewOccurrence) -> tuple[Occurrence, bool]:
        """Insert ``item`` unless its ``dedupe_key`` exists. Returns the stored occurrence
        (the existing one on a duplicate) and whether it was created. New rows start
        ``scheduled`` with attempt 0, fencing_token 0, created_at = now."""
        ...

    async def occurrence_insert_many(self, items: Sequence[NewOccurrence]) -> int:
        """Insert many occurrences in one atomic step (one statement or transaction where the
        store allows), ignoring existing dedupe keys. Returns how many were created."""
        ...

    async def work_wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a sign that work may have become due (an
        insert, a retry, a release or a reap by any instance). Returns True on such a sign,
        False on timeout. Stores that cannot notify (memory, SQLite) just wait ``timeout``
        on their clock and return False; callers must poll anyway, this only shortens the
        wait. Cancelling the wait is safe."""
        ...

    async def plan_cursor_get(self, job: str, scope: str) -> PlanCursor | None:
        """The planning cursor of (job, scope), or None if there is none."""
        ...

    async def plan_advance(self, advance: PlanAdvance) -> bool:
        """One step of :meth:`plan_advance_many`: ``(await plan_advance_many([advance]))[0]``."""
        ...

    async def plan_advance_many(self, steps: Sequence[PlanAdvance]) -> list[bool]:
        """Apply each step, all in one round trip; return, in order, whether each applied.

        A step compares-and-sets the cursor of (``job``, ``scope``) and inserts its
        ``items``, atomically. It applies only if the cursor's ``last_plan_time`` equals
        ``expected_last``; ``None`` matches no cursor and a cursor never planned (one made
        by :meth:`plan_cursor_ensure` or :meth:`job_add`). With a ``fence``, it applies
        only if that partition's lease still has the fence's epoch and has not expired
        (see :meth:`partition_sync`). Then the cursor (created if missing) gets
        ``last_plan_time = new_last``, ``planned_count`` increased by ``added_count``,
        ``next_plan_time`` as given (None takes the stream out of the index) and its slot
        (:func:`soloist.models.stream_slot`); the items are inserted, existing dedupe keys
        ignored. A step that does not apply changes nothing; the others still apply."""
        ...

    async def plan_due(
        self,
        before: datetime,
        limit: int,
        slots: Sequence[tuple[int, int]] | None = None,
    ) -> DueBatch:
        """The planning index: at most ``limit`` cursors whose ``next_plan_time`` is at or
        before ``before``, earliest first (ties by job, then scope), each with its job's
        record (None if the job has none); with ``slots``, only cursors whose slot is in
        one of the half-open ranges ``[lo, hi)``. ``next_at`` is the earliest
        ``next_plan_time`` after ``before`` among the cursors asked about. Cursors whose
        ``next_plan_time`` is None are never returned. Costs what the due cursors cost,
        whatever the number of cursors: an index on ``next_plan_time`` or a sorted set."""
        ...

    async def plan_cursor_ensure(
        self,
        streams: Sequence[tuple[str, str]],
        at: datetime | None = None,
        *,
        revive: bool = False,
    ) -> int:
        """Make sure each (job, scope) stream has a cursor in the planning index: a
        missing one is created never planned (``last_plan_time`` None, count 0) with
        ``next_plan_time = at`` (None: the store's now), and one written by an older
        version of soloist (without a slot) gets its slot and ``at``. With ``revive``, an
        existing cursor whose ``next_plan_time`` is None or later than ``at`` gets ``at``
        too (so that it is planned again at once: its schedule may have changed). Other
        cursors are left alone. Returns how many cursors were created or changed."""
        ...

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
        """Atomically claim up to ``limit`` occurrences for ``instance_id``.

        Candidates: state ``scheduled`` or ``failed``, ``due_at <= now``, ``task`` in
        ``tasks``, ordered by ``due_at`` then ``plan_time``. Claimed rows become
        ``running`` with attempt + 1, fencing_token + 1, instance_id, started_at = now,
        lease_expires_at = now + lease_ttl, finished_at/error cleared. Returns the claimed
        rows as updated.

        Overlap groups: the occurrences of one (job, scope, task). (A job always runs the
        same task, except in ``local`` mode, where each instance runs its own copy of a job
        under a task name of its own: the task in the group keeps one instance's running
        copy from holding back another's.) A candidate whose overlap is ``skip`` or
        ``queue`` is not claimed when its group

        * already has a ``running`` occurrence, or one claimed earlier in this same batch
          (which counts as started at now); or
        * has an earlier candidate (by the order above) that this claim does not take,
          whatever the reason: another claimer holds its row at this moment, or the batch
          is full. Only the earliest candidate of a group may start, so two concurrent
          claimers never both start one group, and its instants start in order.

        A ``queue`` candidate not claimed stays as it is. A ``skip`` candidate blocked by a
        running sibling becomes ``skipped`` with error_code ``overlap`` and finished_at =
        now only if such a sibling started before the candidate was due (``started_at <
        due_at``: the handler is slower than the schedule); if every one started at or
        after its due time (both were late: claims fell behind), it stays as it is and
        waits like ``queue``, so late instants run one after the other, in order, instead
        of being lost.

        ``allow_only``: only occurrences whose overlap is ``allow`` are candidates (the
        executor claiming ahead of its free slots: a run of an overlap group that waits
        locally would show in the store as running and hold back or skip its group's
        next instants on every instance). Rows with overlap ``skip`` or ``queue`` are then
        left exactly as they are: neither claimed nor skipped, and they hold nothing
        back; ``limit`` counts the ``allow`` rows only. The rest of the claim is the
        same."""
        ...

    async def lease_renew(
        self,
        instance_id: str,
        claims: Sequence[Claimed],
        lease_ttl: timedelta,
        now: datetime | None = None,
    ) -> Renewed:
        """Extend to now + lease_ttl the leases still held (running, same instance and
        token). Returns the ids renewed (the others are lost), with ``cancel_requested``:
        those renewed whose cancellation was requested (:meth:`occurrence_cancel`), in the
        same round trip. (A plain set is taken to mean none was: the core converts it.)"""
        ...

    async def occurrence_complete(
        self, instance_id: str, outcomes: Sequence[Outcome], now: datetime | None = None
    ) -> set[str]:
        """Record attempt outcomes, fenced. Each applies only if its row is ``running`` with
        the same instance and token. ``succeeded``/``dead``: terminal, finished_at = now.
        ``failed``: retry pending, due_at = retry_at (or now), lease cleared. error_code,
        error_message and result are stored. Returns the ids whose write applied.

        A row whose cancellation was requested is never retried: a ``failed`` outcome
        becomes ``dead`` with error_code ``cancelled`` (the message as given), and its
        attempt record says so."""
        ...

    async def lease_release(
        self, instance_id: str, claims: Sequence[Claimed], now: datetime | None = None
    ) -> set[str]:
        """Give back occurrences this runner holds but will not finish (graceful shutdown):
        fenced like a completion; they become claimable at once (``scheduled`` if their
        attempt was the first, else ``failed``), attempt - 1 (the attempt is not spent),
        lease cleared, error_code ``cancelled``. Returns the ids released.

        A row whose cancellation was requested is not given back: it becomes ``dead``
        with error_code ``cancelled``, finished_at = now (attempt record ``dead``)."""
        ...

    async def occurrence_reap(self, now: datetime | None = None) -> list[Occurrence]:
        """Expired leases: every ``running`` row with lease_expires_at <= now was left by a
        runner that died, froze or lost the store. A crash is not a failure of the handler:
        it spends no attempt, but counts against ``max_crashes``.

        * If ``crashes < max_crashes``: crashes + 1, attempt - 1 (the attempt is not
          spent), state ``scheduled`` if the attempt was the first, else ``failed``;
          due_at unchanged (so a backlog keeps its order), lease cleared, error_code
          ``lease_expired``; claimable again at once. Attempt record: ``crashed``.
        * Else: crashes + 1, ``dead`` with error_code ``crash_loop``, finished_at = now.
          Attempt record: ``dead``.

        * A row whose cancellation was requested does not run again, whatever its crash
          budget: crashes + 1, ``dead`` with error_code ``cancelled``, finished_at = now.
          Attempt record: ``dead``.

        The error message names the runner and the crash count. Returns the reaped rows as
        updated, by plan_time. Safe to run on every instance at once."""
        ...

    async def occurrence_cancel(
        self, occurrence_id: str, now: datetime | None = None
    ) -> tuple[Occurrence, bool] | None:
        """Cancel an occurrence, in one atomic step that no claim can interleave with:
        either the claim came first (then the row is running) or the cancel did (then no
        claim takes it).

        * ``scheduled`` or ``failed`` (a retry pending): it becomes ``dead`` with
          error_code ``cancelled``, error_message :data:`~soloist.models.CANCELLED_MESSAGE`,
          finished_at = now, ``cancel_requested`` set; it is never claimed. No attempt
          record (no attempt ended).
        * ``running`` (also a run claimed ahead, waiting in its runner): only
          ``cancel_requested`` is set; its lease, runner and token are unchanged. The
          runner learns it from :meth:`lease_renew`; from then on the row never becomes
          claimable again (see :meth:`occurrence_complete`, :meth:`lease_release` and
          :meth:`occurrence_reap`).
        * finished (``succeeded``, ``dead``, ``skipped``): unchanged.

        Returns the occurrence as it is after the call and whether this call changed it
        (False: finished already, or its cancellation was requested before), or None when
        no occurrence has that id."""
        ...

    async def occurrence_next_due(
        self, tasks: Collection[str], now: datetime | None = None
    ) -> datetime | None:
        """Earliest ``due_at`` of claimable occurrences of ``tasks`` (may be in the past),
        or None. Used to sleep exactly until work is due."""
        ...

    async def occurrence_get(self, occurrence_id: str) -> Occurrence | None:
        """One occurrence by id."""
        ...

    async def occurrence_list(
        self,
        *,
        job: str | None = None,
        state: State | None = None,
        limit: int = 100,
    ) -> list[Occurrence]:
        """Occurrences, newest plan_time first (ties: newest created first), filtered by
        job and state, at most ``limit``."""
        ...

    async def occurrence_counts(self, now: datetime | None = None) -> OccurrenceCounts:
        """Occurrences by (job, state), only pairs with a count above zero, and the number
        of claimable occurrences (``scheduled`` or ``failed``) with due_at <= now. One
        consistent read where the store allows; used at most every few seconds."""
        ...

    async def occurrence_attempts(self, occurrence_id: str) -> list[Attempt]:
        """The audit log of an occurrence's attempts, oldest first (by fencing token).

        Every write that ends an attempt appends one record in the same atomic step:
        ``occurrence_complete`` (outcome = the outcome's state, finished_at = now),
        ``occurrence_reap`` (``failed`` or ``dead``, error_code ``lease_expired``) and
        ``lease_release`` (``released``, error_code ``cancelled``). A write rejected by the
        fence appends nothing. The record carries the attempt number, token, runner and
        started_at the attempt ran with."""
        ...

    async def history_prune(
        self,
        before: datetime | None,
        keep: int | None,
        limit: int,
        *,
        dry_run: bool = False,
    ) -> int:
        """Delete at most ``limit`` finished occurrences (``finished_at`` set: succeeded,
        dead, skipped), oldest ``finished_at`` first, with their attempt records: those
        finished before ``before``, and those beyond the newest ``keep`` finished ones
        (None: no such bound; both None deletes nothing). Never touches a ``scheduled``,
        ``running`` or ``failed`` (retry pending) occurrence, nor plan cursors or jobs.
        A deleted occurrence's dedupe key is free again (an ``enqueue(key=...)`` is
        idempotent while its occurrence is kept; a plan cursor only moves forward, so
        planned instants do not come back). SQL stores (and memory) also keep the newest
        finished occurrence of each job, which status shows as its last outcome. With
        ``dry_run``, deletes nothing and returns how many it would delete. Returns how
        many were deleted. Each call is one short atomic step, so that callers prune in
        batches without holding back claims; deletes are idempotent, any instance may
        prune."""
        ...

    # -- jobs (code-defined and dynamic schedules) -------------------------------------------
    async def job_upsert(self, records: Sequence[JobRecord]) -> None:
        """Register code-defined jobs: insert, or update task/schedule/payload/metadata of
        an existing one while keeping its ``paused`` flag and created_at."""
        ...

    async def job_add(self, record: JobRecord) -> None:
        """Insert a dynamic schedule, and its stream's cursor (scope ``""``) never planned,
        due in the planning index at the record's ``created_at`` (the store's now), in the
        same atomic step; raises DuplicateJobError if the name exists."""
        ...

    async def job_get(self, name: str) -> JobRecord | None:
        """One job by name."""
        ...

    async def job_list(self) -> list[JobRecord]:
        """All jobs, by name."""
        ...

    async def job_delete(self, name: str) -> bool:
        """Delete a job and its planning cursors (its occurrences stay as history).
        Returns whether it existed."""
        ...

    async def job_set_paused(self, name: str, paused: bool) -> bool:
        """Set the pause flag. Returns whether the job exists."""
        ...

    # -- leader election -----------------------------------------------------------------------
    # One lease row per election ``name``. The epoch is the leadership's fencing token: it
    # increases by one every time the lease passes to a different holder (or to the same
    # holder after it lapsed or was resigned), and the row keeps its epoch when the lease
    # expires or is resigned, so epochs never repeat. Expiry is on the store's clock.

    async def leader_attempt_elect(
        self, name: str, instance_id: str, ttl: timedelta, now: datetime | None = None
    ) -> LeaderLease | None:
        """Atomically take the lease of ``name`` for ``instance_id`` if it is free: no row,
        or expires_at <= now. Then epoch = previous epoch + 1 (1 for a new row),
        elected_at = now, expires_at = now + ttl. If ``instance_id`` already holds an
        unexpired lease, it is extended (same epoch), as by :meth:`leader_renew`. Returns
        the lease if ``instance_id`` holds it after the call, else None."""
        ...

    async def leader_renew(
        self,
        name: str,
        instance_id: str,
        epoch: int,
        ttl: timedelta,
        now: datetime | None = None,
    ) -> LeaderLease | None:
        """Extend the lease to now + ttl if ``instance_id`` holds it with ``epoch`` and it has
        not expired (expires_at > now). Returns the renewed lease, or None: leadership is
        lost and the caller must stop acting as leader."""
        ...

    async def leader_resign(
        self, name: str, instance_id: str, epoch: int, now: datetime | None = None
    ) -> bool:
        """Give the lease up at once (expires_at = now) if ``instance_id`` holds it with
        ``epoch``; the epoch stays, so the next holder gets epoch + 1. Returns whether it
        was held."""
        ...

    async def leader_get(self, name: str, now: datetime | None = None) -> LeaderLease | None:
        """The current unexpired lease of ``name``, or None if nobody leads."""
        ...

    # -- planning partitions -----------------------------------------------------------------
    # One lease per partition number, kept apart from the leader leases: holder, epoch and
    # expiry on the store's clock. Epochs rise by one at each change of holder (or after a
    # lapse or a release) and never repeat; they fence plan writes (PlanAdvance.fence).

    async def partition_sync(
        self,
        instance_id: str,
        want: Collection[int],
        ttl: timedelta,
        now: datetime | None = None,
    ) -> list[PartitionLease]:
        """In one atomic step: for each partition in ``want``, extend ``instance_id``'s
        unexpired lease to now + ttl (same epoch), or take the partition if it is free (no
        lease, or expired: epoch + 1, 1 for a new one), or leave it to its other holder;
        and release (expires_at = now, epoch kept) every unexpired lease ``instance_id``
        holds outside ``want``. Returns every unexpired partition lease after the step,
        by partition."""
        ...

    async def partition_list(self, now: datetime | None = None) -> list[PartitionLease]:
        """Every unexpired partition lease, by partition. Read-only."""
        ...

    # -- instances --------------------------------------------------------------------------
    async def instance_heartbeat(
        self, info: InstanceInfo, ttl: timedelta, now: datetime | None = None
    ) -> None:
        """Upsert ``info`` with last_seen = now and expires_at = now + ttl (the other fields
        as given; started_at is kept from the first heartbeat)."""
        ...

    async def instance_list(self, now: datetime | None = None) -> list[InstanceInfo]:
        """Instances whose expires_at > now, by instance_id. Rows long expired (older than
        an hour) may be deleted by this call."""
        ...

    async def instance_remove(self, instance_id: str) -> None:
        """Forget an instance (graceful shutdown). Safe if it is unknown."""
        ...
