"""The executor claims due occurrences and runs their handlers.

Claims take as many occurrences as there are free slots in one store call, plus a few
claimed ahead while handlers are short (see "Claiming ahead" below). Sync handlers
run in a thread pool, async handlers on the event loop; ``timeout`` cancels an async
handler (a sync handler cannot be interrupted: its run is recorded as ``timeout`` and its
late result is ignored). Every outcome is written fenced by the fencing token: if the
lease was lost meanwhile, the write is rejected by the store and only logged here.
Outcomes are written in batches by a :class:`~soloist.runtime.completer.Completer` (one
store call for all the runs that finished during the previous call), and each run still
learns whether its own write applied.

When idle, the executor waits for whichever comes first: the next due occurrence, a
wake-up from the store (:meth:`Store.work_wait`: PostgreSQL's LISTEN/NOTIFY tells it at once
when another instance makes work due), work created in this process (enqueue, trigger,
planning, a reaped lease), or ``poll_interval`` at most (stores that cannot notify).

**Cancellation.** A lease renewal also reports the runs whose cancellation was requested
(:meth:`Store.occurrence_cancel`): :meth:`Executor.cancel` then cancels an async handler,
sets ``ctx.cancelled`` for a sync one (which cannot be interrupted), and records a run
still waiting for a slot without starting it; such a run is recorded ``dead`` with
``cancelled`` however it ends, never retried.

The per-run path is kept short for many small tasks: log records are only built when
their level is enabled, and async handlers run on the loop without a thread hop.

**Claiming ahead.** With the default ``concurrency=10`` a claim per batch of free slots
costs a store round trip per ten runs of a short task: the slots sit idle while the claim
is answered. So while handlers are short, the executor also claims up to
:data:`AHEAD_MAX` times ``concurrency`` occurrences ahead of its free slots; they wait here
(``waiting``, leases held and renewed like running ones) and start the moment a slot
frees, with no round trip; the line is topped up, in one claim, once it is down to half.
How many is bounded by the time they would wait: no more than the slots start within
:data:`AHEAD_WAIT` at the recent duration of handlers (none while handlers take longer
than that, while any running handler has run longer than that, or while outcome writes
are stalled or retried). A claim ahead takes only occurrences with overlap ``allow``
(``allow_only``): a run of a ``skip`` or ``queue`` group is shown running by the store from
its claim, which would hold its group's next instant back while it waited here. The free
slots are claimed for any due work: at once when no run waits, and every
:data:`FULL_CLAIM_EVERY` at most while runs wait, so that the line never holds back due
work of other kinds. What may go wrong, and what is done about it:

* slots stay busy after all (longer handlers came in): a run that has waited
  :data:`AHEAD_HANDBACK` is handed back (:meth:`Store.lease_release`: claimable at once by
  any instance, its attempt not spent; its audit log shows ``released``), as are all
  waiting runs at a graceful stop, before the grace period, and the runs of a task this
  instance no longer claims (a leader that stepped down);
* a hand-back whose answer is lost may have applied: its runs never start here (they
  expire and are reaped, a crash), so that none runs twice;
* a waiting run whose lease this instance stops trusting (renewals failed, the process
  was frozen) is dropped, not started: it runs again once reaped;
* the instance dies: waiting runs are reaped with the running ones when their leases
  expire, each counting one crash against ``max_crashes`` though it never started.

The store's ``started_at`` of a run claimed ahead is the claim's time (typically a few
milliseconds before the handler starts); the lateness metric adds the wait here.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from soloist.config import lease_margin
from soloist.context import JobContext
from soloist.errors import LeaseLostError, StoreError
from soloist.models import Claimed, ErrorCode, Occurrence, Outcome, Renewed, State
from soloist.payload import summarise_result
from soloist.registry import Registry, TaskDef
from soloist.runtime.completer import MIN_CALL_TIMEOUT, Completer
from soloist.runtime.pool import DaemonThreadPool
from soloist.runtime.service import Service, ServiceBundle
from soloist.stores.base import Store

#: How soon to look again when due work exists that could not be claimed (overlap=queue).
BLOCKED_RECHECK = 0.2
#: Work that came due this recently was probably not due yet for the claim just made
#: (which read the store's clock a moment earlier; on etcd each instance reads the
#: member's clock to a few milliseconds): it is looked at again this soon instead.
JUST_DUE = 0.05
JUST_DUE_RECHECK = 0.005
#: How many lease TTLs an outcome's write is retried for at most, even while its lease is
#: renewed (a store that answers renewals but refuses that write).
RECORD_BUDGET = 2
#: Claiming ahead: the longest a run claimed ahead is expected to wait for a slot (it sets
#: how many are claimed ahead); past AHEAD_HANDBACK of waiting it is handed back.
AHEAD_WAIT = 0.02
AHEAD_HANDBACK = 1.0
#: At most this many times ``concurrency`` runs are held claimed ahead.
AHEAD_MAX = 10
#: While runs wait, the free slots are claimed for any due work this often at most.
FULL_CLAIM_EVERY = 0.05
#: Weight of the newest run in the running average of handler durations.
DURATION_WEIGHT = 0.2


INFO = logging.INFO
_CLAIMED = {"action": "claimed"}


class _TimedOut(TimeoutError):
    """A handler cut by its task's ``timeout=`` (not a TimeoutError the handler raised)."""


async def _within(work: Awaitable[Any], seconds: float) -> Any:
    """``await work`` for at most ``seconds``; :class:`_TimedOut` when that time runs out.
    A TimeoutError that ``work`` raises itself passes through as it is, although one from
    the handler's own ``asyncio.timeout()`` looks like wait_for's (a TimeoutError from a
    CancelledError): only the object tells them apart."""
    raised: list[BaseException] = []

    async def watched() -> Any:
        try:
            return await work
        except BaseException as exc:
            raised.append(exc)
            raise

    try:
        return await asyncio.wait_for(watched(), seconds)
    except (asyncio.TimeoutError, TimeoutError) as exc:
        if raised and raised[0] is exc:
            raise
        raise _TimedOut(f"timed out after {seconds}s") from exc


@dataclass
class Run:
    """One attempt this instance is running."""

    occ: Occurrence
    ctx: JobContext
    lease_deadline: float
    task: asyncio.Task[None] | None = None
    released: bool = False
    #: The outcome has been handed to the completer: the run is no longer released on stop.
    recorded: bool = False
    cancelled_for_lease: bool = False
    #: Monotonic time the handler started (or, while ``waiting``, the claim was sent).
    started: float = 0.0
    #: Claimed ahead of a free slot: the handler has not started (see the module docstring).
    waiting: bool = False
    #: Monotonic time the claim was sent (the lease's start).
    claimed_at: float = 0.0
    #: The handler was called (a run cancelled while it waited never is).
    invoked: bool = False

    @property
    def claim(self) -> Claimed:
        return Claimed(self.occ.id, self.occ.fencing_token)


class Executor(Service):
    name = "executor"

    def __init__(
        self,
        bundle: ServiceBundle,
        store: Store,
        registry: Registry,
        *,
        concurrency: int,
        lease_ttl: timedelta,
        poll_interval: timedelta,
        claimable: Callable[[], list[str]] | None = None,
        on_notified: Callable[[], None] = lambda: None,
        call_timeout: timedelta | None = None,
        on_short_lease: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(bundle)
        self.store = store
        self.registry = registry
        #: Which tasks this instance claims now (in leader mode followers claim only queue
        #: tasks, the leader everything); default: every registered task.
        self.claimable = claimable or (lambda: list(registry.tasks))
        #: Called when the store signals that something changed (work or schedules).
        self.on_notified = on_notified
        #: Called when a run starts whose lease deadline is nearer than one heartbeat
        #: (its claim was answered late): the heartbeater must wake for it.
        self.on_short_lease = on_short_lease
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self._ttl = lease_ttl.total_seconds()
        #: A runner trusts its lease until ``renewal sent + ttl - margin``.
        self.lease_margin = lease_margin(self._ttl)
        #: The longest wait for one store call on the lease path (renewal, outcome): a hung
        #: connection must not hold the heartbeat or an outcome past the lease.
        self.call_timeout = (call_timeout or lease_ttl / 3).total_seconds()
        self.poll_interval = poll_interval.total_seconds()
        self.active: dict[str, Run] = {}
        #: Runs claimed ahead, oldest first, not started yet (they are in ``active`` too).
        self.waiting: deque[Run] = deque()
        #: Running average of handler durations (s), None before the first run ends.
        self.duration: float | None = None
        #: Runs claimed ahead and runs handed back from the waiting line, ever (counters).
        self.claimed_ahead = 0
        self.handed_back = 0
        self._next_hand_back_look = 0.0
        self._next_full_claim = 0.0
        #: A waiting run's task is no longer claimed here: hand it back at the next tick.
        self._unclaimable = False
        self.claiming = True
        self.pool = DaemonThreadPool(concurrency, "soloist-worker", clock=self.clock)
        self.completer = Completer(
            bundle, store, call_timeout=self.call_timeout, hold=self._outcomes_coming
        )
        outcomes = ("succeeded", "failed", "dead", "cancelled", "fenced", "lease_lost")
        self.counts = {state: 0 for state in (*outcomes, "unrecorded")}
        #: Runs whose handler is done and whose outcome is being written: they keep their
        #: lease until the write, but no longer use a slot (see :meth:`free_slots`).
        self.recording = 0
        #: Whether the last tick found less work than free slots: only then is a wake-up
        #: from the store worth waiting for (a full executor waits for its own runs).
        self._starved = False
        self._notify_failed = False

    async def tick(self) -> float:
        self._starved = False
        if not self.claiming:
            return self.poll_interval
        tasks = self.claimable()
        if self.waiting:
            await self._hand_back_waiting(tasks)
            if not self.claiming:  # a stop began meanwhile
                return self.poll_interval
        if not tasks:
            return self._until_hand_back()
        # The free slots: due work of any task (overlap groups included), claimed at once
        # when no run waits here, and while runs wait every FULL_CLAIM_EVERY at most, so
        # that a long line of runs claimed ahead never holds back due work of other kinds
        # (claims ahead take only occurrences with overlap "allow"). These start first.
        full: int | None = None
        free = self.free_slots()
        if free > 0 and (not self.waiting or self.clock.monotonic() >= self._next_full_claim):
            full = await self._claim_free(tasks, free)
        self._launch_waiting(tasks)
        if full is None and self.claiming and self.free_slots() > 0:  # the line ran dry
            free = self.free_slots()
            full = await self._claim_free(tasks, free)
            self._launch_waiting(tasks)
        if not self.claiming:
            return self.poll_interval
        # Then the line: topped up once it has fallen to half its target, not a run at a
        # time, with occurrences that no overlap group holds; not when the claim for the
        # free slots just found less than it asked for (nothing more is due).
        target = self.ahead_target()
        ahead = target - len(self.waiting) if len(self.waiting) <= target // 2 else 0
        got: int | None = None
        if ahead > 0 and (full is None or full == free):
            sent = self.clock.monotonic()
            claimed = await self.store.occurrence_claim(
                self.instance_id, tasks, ahead, self.lease_ttl, allow_only=True
            )
            runs = [run for occ in claimed if (run := self._claimed(occ, sent)) is not None]
            self.waiting.extend(runs)
            self.claimed_ahead += len(runs)
            got = len(claimed)
            self._launch_waiting(tasks)
        if (full is not None and full == free) or (got is not None and got == ahead):
            return 0.0  # more may be due right now
        if self.free_slots() <= 0 or (full is None and got is None):
            # Every slot is busy (a finishing run wakes us) or nothing was asked.
            return self._until_hand_back()
        self._starved = True
        next_due = await self.store.occurrence_next_due(tasks)
        if next_due is None:
            return self._until_hand_back()
        delay = idle_delay((next_due - await self.store.now()).total_seconds(), self.poll_interval)
        return min(delay, self._until_hand_back())

    async def _claim_free(self, tasks: list[str], free: int) -> int:
        """Claim up to ``free`` occurrences of any due work for the free slots (they go to
        the front of the line); how many came."""
        sent = self.clock.monotonic()
        claimed = await self.store.occurrence_claim(self.instance_id, tasks, free, self.lease_ttl)
        self._next_full_claim = sent + FULL_CLAIM_EVERY
        runs = [run for occ in claimed if (run := self._claimed(occ, sent)) is not None]
        self.waiting.extendleft(reversed(runs))  # the front of the line, in claim order
        return len(claimed)

    async def wait(self, seconds: float) -> None:
        """Wait as :meth:`Service.wait` does, and also for a wake-up from the store when the
        last tick was short of work."""
        wake = self._wake
        if not self._starved or wake is None or wake.is_set() or seconds <= 0:
            await super().wait(seconds)
            return
        notify = asyncio.ensure_future(self.store.work_wait(seconds))
        waits: set[asyncio.Future[Any]] = {
            asyncio.ensure_future(self.clock.sleep(seconds)),
            asyncio.ensure_future(wake.wait()),
            notify,
        }
        try:
            while waits:
                done, waits = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if done != {notify} or notify.cancelled() or notify.exception() is None:
                    if (
                        notify in done
                        and not notify.cancelled()
                        and notify.exception() is None
                        and notify.result()
                    ):
                        self.on_notified()  # e.g. a new schedule: the planner looks too
                    break
                # The store cannot notify right now: fall back on the timer and local wakes.
                self._log_notify_failure(notify.exception())
        finally:
            for waiter in waits:
                waiter.cancel()
        wake.clear()

    def _log_notify_failure(self, exc: BaseException | None) -> None:
        if self._notify_failed:
            return
        self._notify_failed = True  # once per instance: the tick's own errors say the rest
        self.log(
            logging.WARNING,
            "waiting for store wake-ups failed (%s); polling every %.1fs instead",
            exc,
            self.poll_interval,
            action="notify_failed",
        )

    def _outcomes_coming(self) -> bool:
        """Whether outcomes of short ``def`` handlers are about to come back from the
        worker threads (the completer then waits a moment for them: one write for all):
        calls are in the threads, handlers are short and none has run longer than that
        (the condition of claiming ahead)."""
        return self.pool.in_flight > 0 and self.ahead_target() > 0

    def ahead_target(self) -> int:
        """How many runs to hold claimed ahead of a free slot now (see the module
        docstring): as many as the slots start within AHEAD_WAIT at the recent handler
        duration, at most ``AHEAD_MAX * concurrency``; none while a handler runs longer
        than that, nor while outcomes wait for a store that refuses them."""
        duration = self.duration
        if duration is None or not self.claiming or self.completer.stalled():
            return 0
        target = min(
            AHEAD_MAX * self.concurrency, int(AHEAD_WAIT * self.concurrency / max(duration, 1e-6))
        )
        if target <= 0:
            return 0
        since = self.clock.monotonic() - AHEAD_WAIT
        for run in self.active.values():
            if run.started < since and not run.waiting and not run.recorded:
                return 0  # a longer handler holds a slot: runs would wait behind it
        return target

    def _launch_waiting(self, tasks: list[str]) -> None:
        """Start waiting runs in the free slots, from the front of the line (runs claimed
        for free slots, then the oldest claimed ahead); none once a stop began
        (:meth:`drain` hands them back). A run whose lease this instance no longer trusts
        is dropped instead (:meth:`lose`): it runs again once reaped. A run of a task no
        longer in ``tasks`` (a leader that stepped down) is left for the hand-back."""
        if not self.claiming:
            return
        now = self.clock.monotonic()
        skipped: list[Run] = []
        claimable: set[str] | None = None
        while self.waiting and self.free_slots() > 0:
            run = self.waiting.popleft()
            if now >= run.lease_deadline or run.ctx.lease_lost:
                run.waiting = False  # off the line already: lose() drops it from active
                self.lose(run)
                if self.active.get(run.occ.id) is run:  # (lost earlier: lose() returned)
                    del self.active[run.occ.id]
                continue
            if claimable is None:
                claimable = set(tasks)
            if run.occ.task not in claimable:
                skipped.append(run)
                continue
            run.waiting = False
            self._launch(run)
        if skipped:
            self.waiting.extendleft(reversed(skipped))
            self._next_hand_back_look = 0.0  # hand them back at the next tick, at once
            self._unclaimable = True

    def _until_hand_back(self) -> float:
        """Seconds until the next waiting run is due to be handed back (or the poll
        interval when none waits)."""
        if not self.waiting:
            return self.poll_interval
        if self._unclaimable:
            return 0.0
        now = self.clock.monotonic()
        due = min(run.claimed_at for run in self.waiting) + AHEAD_HANDBACK
        due = max(due, self._next_hand_back_look)
        return max(0.0, min(self.poll_interval, due - now))

    async def _hand_back_waiting(self, claimable: Sequence[str]) -> None:
        """Hand back the waiting runs that waited too long (AHEAD_HANDBACK) or whose task
        this instance no longer claims (a leader that stepped down)."""
        now = self.clock.monotonic()
        if now < self._next_hand_back_look:
            return  # looked a moment ago (a tick comes with every finished run)
        self._next_hand_back_look = now + AHEAD_HANDBACK / 20
        self._unclaimable = False
        tasks = set(claimable)
        stale = [
            run
            for run in self.waiting
            if now - run.claimed_at >= AHEAD_HANDBACK or run.occ.task not in tasks
        ]
        if stale:
            await self.hand_back(stale, "every slot is busy with longer handlers")

    async def hand_back(self, runs: Sequence[Run], why: str) -> None:
        """Give waiting runs back to the store (:meth:`Store.lease_release`): claimable at
        once by any instance, their attempt not spent. They leave the line and ``active``
        before the call, so they never start here: if the call fails, whether it applied is
        unknown, so they are left to expire and be reaped (a crash), never run here too."""
        for run in runs:
            run.released = True
            run.waiting = False
            self.waiting.remove(run)
            if self.active.get(run.occ.id) is run:
                del self.active[run.occ.id]
        try:
            released = await asyncio.wait_for(
                self.store.lease_release(self.instance_id, [r.claim for r in runs]),
                self.call_timeout,
            )
        except Exception as exc:
            self.logger.warning(
                "could not hand back %d occurrence(s) claimed ahead (%s); they run again "
                "once their leases expire",
                len(runs),
                exc,
                extra={"action": "hand_back_failed", "instance_id": self.instance_id},
            )
            return
        self.handed_back += len(released)
        self.logger.info(
            "handed back %d occurrence(s) claimed ahead (%s); any instance may claim them",
            len(released),
            why,
            extra={"action": "handed_back", "instance_id": self.instance_id},
        )

    def _claimed(self, occ: Occurrence, sent: float) -> Run | None:
        """Take a claimed occurrence in: a run whose lease runs from ``sent``, to be put in
        the line by the caller (the front for a claim for free slots, the back for a claim
        ahead); :meth:`_launch_waiting` starts it. None if it was started at once (its
        claim was answered too late to trust the lease)."""
        loop = asyncio.get_running_loop()

        async def renew() -> bool:
            # ctx.heartbeat(): a store that does not answer right now is not a lost lease;
            # only the lease deadline is (the handler is not made to fail by a blip).
            try:
                return await self.renew([run])
            except Exception:
                self.check_leases()
                return not ctx.lease_lost

        ctx = JobContext.for_occurrence(occ, self.instance_id, self.logger, renew, loop)
        deadline = sent + self._ttl - self.lease_margin
        run = Run(occ, ctx, deadline, started=sent, waiting=True, claimed_at=sent)
        if occ.cancel_requested:
            # Claimable although its cancellation was requested: a runner of a release
            # before cancellation (a rolling deploy) ignored the flag and gave it back or
            # retried it. It never starts: recorded cancelled once launched.
            ctx._cancelled = True
        stale = self.active.get(occ.id)
        if stale is not None:
            # Reaped and claimed again by this instance while the lost run's (sync) handler
            # still runs: the new run takes its place; the stale one ends on its own, and
            # its fenced write is refused.
            self.lose(stale)
            if stale.recorded:
                self.recording -= 1
            if stale.waiting:
                self.waiting.remove(stale)
        self.active[occ.id] = run
        if self.logger.isEnabledFor(INFO):
            fields = ctx._fields()
            ctx._event(
                INFO,
                "claimed %s (plan %s, attempt %d, token %d)",
                (occ.job, fields["plan_time"], occ.attempt, occ.fencing_token),
                _CLAIMED,
            )
        left = deadline - self.clock.monotonic()
        if left <= 0:
            # The claim's answer came after the lease could be trusted: the handler is not
            # run (the store may reap it any moment; it runs again once reaped), and its
            # run says so at once.
            ctx.lease_lost = True
            run.waiting = False
            self._launch(run)
            return None
        if left < self.call_timeout:
            self.on_short_lease()  # the heartbeater must not sleep past this deadline
        return run

    def _launch(self, run: Run) -> None:
        """Start the handler of ``run`` now."""
        now = run.started = self.clock.monotonic()
        occ = run.occ
        if occ.attempt == 1 and occ.started_at is not None and not run.ctx.cancelled:
            # From the plan time to now: the claim's time in the store, plus the wait here.
            lateness = (occ.started_at - occ.plan_time).total_seconds() + now - run.claimed_at
            self.metrics.run_started(occ.job, lateness if lateness > 0 else 0.0)
        task = run.task = asyncio.get_running_loop().create_task(
            self._run(run), name=f"soloist-run-{occ.id}"
        )
        task.add_done_callback(functools.partial(self._finished, run))

    def free_slots(self) -> int:
        """How many more handlers may start now.

        A slot is freed when its handler finishes, not when its outcome has been written,
        so that the next claim overlaps the write of the previous batch's outcomes. At most
        ``AHEAD_MAX * concurrency`` finished runs wait for their write (so that one write
        carries every outcome of the runs that finished during the one before), only
        ``concurrency`` while the store refuses writes (runs waiting for a slot aside)."""
        started = len(self.active) - len(self.waiting)
        running = started - self.recording
        backlog = self.concurrency if self.completer.stalled() else AHEAD_MAX * self.concurrency
        return min(self.concurrency - running, self.concurrency + backlog - started)

    def _finished(self, run: Run, _task: object = None) -> None:
        if self.active.get(run.occ.id) is run:
            del self.active[run.occ.id]
            if run.recorded:
                self.recording -= 1
        self.wake()

    async def _run(self, run: Run) -> None:
        occ, ctx = run.occ, run.ctx
        task = self.registry.task(occ.task)
        code: ErrorCode | None = None
        message: str | None = None
        result: Any = None
        cancelled = False
        refused: str | None = None  # why retry_on / no_retry_on refuse another attempt
        try:
            if ctx.lease_lost:  # lost before it started (a claim answered too late, or
                # a renewal refused between its launch and this first step)
                raise LeaseLostError("the lease was lost before the handler started")
            if not ctx.cancelled:  # (cancelled while it waited for a slot: never started)
                run.invoked = True
                result = await self._invoke(task, ctx, occ)
        except LeaseLostError as exc:
            code, message = ErrorCode.LEASE_LOST, str(exc)
        except _TimedOut:  # soloist's own timeout=: retried while attempts remain
            code, message = ErrorCode.TIMEOUT, f"timed out after {task.timeout}"
        except (asyncio.TimeoutError, TimeoutError) as exc:
            # The handler's own (its asyncio.timeout(), a socket's): retry_on decides.
            code, message = ErrorCode.TIMEOUT, repr(exc)
            refused = task.retry.refuses(exc)
        except asyncio.CancelledError:
            if run.released:
                return  # graceful shutdown: the lease was handed back
            if run.cancelled_for_lease:  # (any other exit after that is classified below)
                code, message = ErrorCode.LEASE_LOST, "lease lost while running; cancelled"
            else:  # cancelled by the handler itself or by the event loop closing
                code, message, cancelled = ErrorCode.CANCELLED, "cancelled", True
        except Exception as exc:
            code = ErrorCode.HANDLER_ERROR
            message = _describe(exc)
            refused = task.retry.refuses(exc)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt raised by a handler
            code = ErrorCode.HANDLER_PANIC
            message = _describe(exc)
            refused = task.retry.refuses(exc)
        if run.cancelled_for_lease and code is not None:
            # Whatever the handler raised while being cancelled for its lease (a cleanup
            # that failed, a library wrapping the cancellation), the lease is gone.
            code, message = ErrorCode.LEASE_LOST, "lease lost while running; cancelled"
        if ctx.cancelled and code is not ErrorCode.LEASE_LOST:
            # Its cancellation was requested and reached this run: recorded cancelled (not
            # retried), however the handler ended; a result it returned is kept.
            code, message = ErrorCode.CANCELLED, _cancelled_message(run, code, message)
            cancelled = False  # this runtime cancelled it: nothing to pass on
        if run.released:
            return
        await self._record(run, task, code, message, result, refused)
        if cancelled:
            raise asyncio.CancelledError

    async def _invoke(self, task: TaskDef, ctx: JobContext, occ: Occurrence) -> Any:
        # ctx.payload: the occurrence's payload less what soloist keeps in it (tracing).
        if task.is_async:
            if task.timeout is None:
                return await task.fn(ctx, **ctx.payload)
            return await _within(task.fn(ctx, **ctx.payload), task.timeout.total_seconds())
        call = functools.partial(task.fn, ctx, **ctx.payload)
        if task.timeout is None:
            return await self.pool.run(call, name=occ.job)
        return await _within(self.pool.run(call, name=occ.job), task.timeout.total_seconds())

    async def _record(
        self,
        run: Run,
        task: TaskDef,
        code: ErrorCode | None,
        message: str | None,
        result: Any,
        refused: str | None = None,
    ) -> None:
        occ, ctx = run.occ, run.ctx
        now = self.clock.monotonic()
        duration = now - run.started
        if code is ErrorCode.LEASE_LOST:
            self._lease_lost(run, message)
            return
        if run.invoked:  # of handlers that ran (claiming ahead is sized by it)
            average = self.duration
            self.duration = (
                duration if average is None else average + DURATION_WEIGHT * (duration - average)
            )
        if code is None:
            outcome = Outcome(
                occ.id, occ.fencing_token, State.SUCCEEDED, result=summarise_result(result)
            )
        elif code is ErrorCode.CANCELLED and ctx.cancelled:  # on request: never retried
            outcome = Outcome(
                occ.id, occ.fencing_token, State.DEAD, code.value, message, summarise_result(result)
            )
        elif occ.attempt < occ.max_attempts and refused is None:
            # The store's time now, without asking it: its time at the claim plus the time
            # elapsed since on this instance's monotonic clock (no local wall clock).
            store_now = (occ.started_at or occ.due_at) + timedelta(seconds=now - run.claimed_at)
            retry_at = store_now + task.retry.delay(occ.attempt)
            outcome = Outcome(
                occ.id, occ.fencing_token, State.FAILED, code.value, message, retry_at=retry_at
            )
        else:
            if refused is not None and occ.attempt < occ.max_attempts:
                message = f"{message} (not retried: {refused})"
            outcome = Outcome(occ.id, occ.fencing_token, State.DEAD, code.value, message)
        if run.released:
            return
        # No await between the check above and the hand-over: drain() sees either a
        # released run or a recorded one. The lease is renewed until the write is done.
        run.recorded = True
        if self.active.get(occ.id) is run:
            self.recording += 1
        self.wake()  # its slot is free
        # Retried until the lease deadline, and at most RECORD_BUDGET leases in all: an
        # outcome the store refuses for good must not hold its lease (and a shutdown)
        # forever; given up, the occurrence is reaped and runs again, as after a crash.
        give_up = self.clock.monotonic() + RECORD_BUDGET * self._ttl
        try:
            applied = await self.completer.complete(
                outcome, lambda: min(run.lease_deadline, give_up)
            )
        except Exception as exc:
            self.counts["unrecorded"] += 1
            self.metrics.run_finished(occ.job, "unrecorded", duration)
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            if isinstance(cause, (StoreError, TimeoutError)):
                self.metrics.store_error("occurrence_complete")
            ctx.logger.error(
                "could not record the outcome (%s) of %s (plan %s) before its lease ran "
                "out: %s; the lease expires and the occurrence runs again (a crash, not a "
                "failure)",
                outcome.state.value,
                occ.job,
                occ.plan_time.isoformat(),
                exc,
                extra={"action": "record_failed"},
            )
            return
        if not applied:
            self.counts["fenced"] += 1
            self.metrics.run_finished(occ.job, "fenced", duration)
            ctx.logger.warning(
                "lease of %s (plan %s) was lost: result %s fenced out",
                occ.job,
                occ.plan_time.isoformat(),
                outcome.state.value,
                extra={"action": "fenced", "error_code": ErrorCode.LEASE_LOST.value},
            )
            return
        on_request = code is ErrorCode.CANCELLED and ctx.cancelled
        label = "cancelled" if on_request else outcome.state.value
        self.counts[label] += 1
        self.metrics.run_finished(occ.job, label, duration)
        if code is None:
            if self.logger.isEnabledFor(INFO):
                ctx._event(
                    INFO,
                    "succeeded %s in %.3fs",
                    (occ.job, duration),
                    {"action": "succeeded", "duration_s": round(duration, 6)},
                )
            return
        if on_request:
            ctx.logger.info(
                "cancelled %s (plan %s) on request: %s",
                occ.job,
                occ.plan_time.isoformat(),
                message,
                extra={"action": "cancelled", "duration_s": round(duration, 6)},
            )
            return
        ctx.logger.warning(
            "%s %s (%s): %s%s",
            "retrying" if outcome.state is State.FAILED else "gave up on",
            occ.job,
            code.value,
            message,
            f"; next attempt at {outcome.retry_at.isoformat()}" if outcome.retry_at else "",
            extra={
                "action": outcome.state.value,
                "duration_s": round(duration, 6),
                "error_code": code.value,
            },
        )

    def _lease_lost(self, run: Run, message: str | None) -> None:
        """The run ended because its lease was lost: write nothing. Either another
        instance has reaped the occurrence already, or it will once the lease expires on
        the store's clock; then it runs again, as after a crash (no retry is spent)."""
        self.counts["lease_lost"] += 1
        self.metrics.run_finished(run.occ.job, "lease_lost", self.clock.monotonic() - run.started)
        run.ctx.logger.warning(
            "%s (plan %s) stopped: %s; nothing recorded, the occurrence is reaped when its "
            "lease expires and runs again",
            run.occ.job,
            run.occ.plan_time.isoformat(),
            message,
            extra={"action": "lease_lost", "error_code": ErrorCode.LEASE_LOST.value},
        )

    async def renew(self, runs: Sequence[Run]) -> bool:
        """Renew the leases of ``runs`` now; mark lost ones. True if all were renewed.

        The store call has a deadline: the call timeout, and no later than the earliest
        lease deadline among them. A renewal extends the local deadline from when it was
        *sent*. Runs whose outcome is being written are renewed too (their write may have
        to be retried), but a renewal that finds their row finished means nothing: the
        fenced write says whether it applied. Runs already lost are left out."""
        runs = [r for r in runs if not r.ctx.lease_lost and not r.released]
        if not runs:
            return False
        sent = self.clock.monotonic()
        left = min(r.lease_deadline for r in runs) - sent
        renewed = await asyncio.wait_for(
            self.store.lease_renew(self.instance_id, [r.claim for r in runs], self.lease_ttl),
            max(MIN_CALL_TIMEOUT, min(self.call_timeout, left)),
        )
        deadline = sent + self._ttl - self.lease_margin
        for run in runs:
            if run.occ.id in renewed:
                run.lease_deadline = max(run.lease_deadline, deadline)
            elif not run.recorded:
                self.lose(run)
        cancel = renewed.cancel_requested if isinstance(renewed, Renewed) else None
        if cancel:  # the renewal reports requested cancellations: no call of their own
            for run in runs:
                if run.occ.id in cancel:
                    self.cancel(run)
        return len(renewed) == len(runs)

    def cancel(self, run: Run) -> None:
        """The cancellation of ``run``'s occurrence was requested: set ``ctx.cancelled``;
        cancel an async handler; a run waiting for a slot starts only to record itself
        cancelled. (Not once its outcome is being written, nor after its lease is lost: the
        store ends a lost one cancelled when it reaps it.)"""
        ctx = run.ctx
        if ctx.cancelled or ctx.lease_lost or run.recorded or run.released:
            return
        ctx._cancelled = True
        is_async = self.registry.task(run.occ.task).is_async
        ctx.logger.info(
            "cancellation of %s (plan %s) requested: %s",
            run.occ.job,
            run.occ.plan_time.isoformat(),
            "it had not started"
            if run.task is None
            else "cancelling the handler"
            if is_async
            else "a sync handler is only asked (ctx.cancelled)",
            extra={"action": "cancel_requested"},
        )
        if run.task is None:
            if run.waiting:  # claimed ahead: recorded at once, without running
                run.waiting = False
                self.waiting.remove(run)
                self._launch(run)
            return
        # An async handler that asked itself (ctx.aheartbeat() in its own task) gets
        # OccurrenceCancelledError there; a cancel of its own task would hit the outcome's
        # write instead.
        if is_async and not run.task.done() and asyncio.current_task() is not run.task:
            run.task.cancel()

    def check_leases(self) -> float | None:
        """Act on every run whose local lease deadline has passed (:meth:`lose`); return the
        earliest deadline still ahead (monotonic), or None. Runs whose outcome is being
        written are left to the completer, which gives up at the same deadline."""
        now = self.clock.monotonic()
        earliest: float | None = None
        for run in list(self.active.values()):
            if run.recorded or run.ctx.lease_lost:
                continue
            if now >= run.lease_deadline:
                self.lose(run)
            elif earliest is None or run.lease_deadline < earliest:
                earliest = run.lease_deadline
        return earliest

    def lose(self, run: Run) -> None:
        """The lease of ``run`` is gone: tell the handler, cancel it if it is async. (Not
        once its outcome is being written: that write, fenced, says whether it applied.)
        A run still waiting for a slot is dropped: it never started here."""
        if run.ctx.lease_lost or run.recorded or run.released:
            return
        run.ctx.lease_lost = True
        if run.task is None:  # claimed ahead, not started
            if run.waiting:
                run.waiting = False
                self.waiting.remove(run)
            if self.active.get(run.occ.id) is run:
                del self.active[run.occ.id]
            # Counted as the run that finds its lease lost when it starts is (_run): an
            # attempt that ended here with nothing written.
            self.counts["lease_lost"] += 1
            self.metrics.run_finished(run.occ.job, "lease_lost")
            run.ctx.logger.warning(
                "lost the lease of %s (plan %s) before its handler started; it runs again "
                "once its lease expires",
                run.occ.job,
                run.occ.plan_time.isoformat(),
                extra={"action": "lease_lost"},
            )
            return
        if not run.invoked:
            # Launched, its handler not called yet: _run sees lease_lost first, calls
            # nothing and counts the attempt lease_lost (cancelling the task now would end
            # it before its first step, counted nowhere).
            return
        run.ctx.logger.warning(
            "lost the lease of %s (plan %s)%s",
            run.occ.job,
            run.occ.plan_time.isoformat(),
            "; cancelling the handler"
            if self.registry.task(run.occ.task).is_async
            else "; a sync handler cannot be stopped: its result will be written fenced",
            extra={"action": "lease_lost"},
        )
        if self.registry.task(run.occ.task).is_async:
            run.cancelled_for_lease = True
            run.task.cancel()

    async def drain(self, grace: float) -> None:
        """Graceful stop: claim nothing more, let running handlers finish for ``grace``
        seconds, then hand the leases of the rest back so another instance runs them."""
        self.claiming = False
        await self.stop()
        # Runs claimed ahead never started: another instance may run them at once.
        if self.waiting:
            await self.hand_back(list(self.waiting), "stopping")
        pending = [r.task for r in self.active.values() if r.task is not None]
        if pending:
            sleeper = asyncio.ensure_future(self.clock.sleep(grace))
            remaining = set(pending)
            try:
                while remaining and not sleeper.done():
                    await asyncio.wait([*remaining, sleeper], return_when=asyncio.FIRST_COMPLETED)
                    remaining = {t for t in remaining if not t.done()}
            finally:
                sleeper.cancel()
        # Runs whose outcome is queued finish by themselves: write those outcomes first,
        # and release only the rest (marked released first, so none records meanwhile).
        leftovers = [r for r in self.active.values() if not r.recorded and not r.ctx.lease_lost]
        cancelled = []
        for run in leftovers:
            run.released = True
            if run.task is not None and self.registry.task(run.occ.task).is_async:
                run.task.cancel()
                cancelled.append(run.task)
        if cancelled:  # let them unwind (finally blocks) before another instance starts
            await asyncio.wait(cancelled, timeout=self.call_timeout)
        if leftovers:
            try:
                released = await asyncio.wait_for(
                    self.store.lease_release(self.instance_id, [r.claim for r in leftovers]),
                    self.call_timeout,
                )
            except Exception as exc:
                released = set()
                self.logger.warning(
                    "could not release %d running occurrence(s) (%s); they run again on "
                    "another instance once their leases expire",
                    len(leftovers),
                    exc,
                    extra={"action": "release_failed", "instance_id": self.instance_id},
                )
            for run in leftovers:
                if run.occ.id in released:
                    self.metrics.run_finished(run.occ.job, "released")
        if leftovers and released:
            self.logger.warning(
                "grace period over: released %d running occurrence(s) for another instance",
                len(released),
                extra={"action": "released", "instance_id": self.instance_id},
            )
        await self.completer.drain()  # bounded: each outcome by its lease and budget
        self.pool.shutdown(wait=False, cancel_futures=True)


def _describe(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    # NUL is the one character no store keeps in text (PostgreSQL refuses it outright).
    text = text.replace("\x00", "\\x00")
    return text if len(text) <= 2000 else text[:2000] + "..."


def _cancelled_message(run: Run, code: ErrorCode | None, message: str | None) -> str:
    """The error message of a run whose cancellation was requested, by how it ended."""
    if not run.invoked:
        return "cancelled on request before it started"
    if code is None:
        return "cancelled on request; the handler returned"
    if code is ErrorCode.CANCELLED:
        return "cancelled on request"
    return f"cancelled on request; the handler then ended with {code.value}: {message}"


def idle_delay(until_due: float, poll_interval: float) -> float:
    """How long a starved executor waits before it claims again, given the seconds until
    the earliest claimable work is due (zero or less: already due, yet not claimed)."""
    if until_due > 0:
        return min(until_due, poll_interval)
    if -until_due < JUST_DUE:
        return min(poll_interval, JUST_DUE_RECHECK)
    return min(poll_interval, BLOCKED_RECHECK)
