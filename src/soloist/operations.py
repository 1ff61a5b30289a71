"""Short operations on the shared store: enqueue, trigger, retry, pause, resume, dynamic
schedules, history and attempts. Async is the source of truth; :class:`soloist.Scheduler`
offers each as a sync call too. How the CLI and the HTTP endpoint show what the store
holds is :mod:`soloist.reports`."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

from soloist.durations import parse_duration
from soloist.errors import (
    ConfigError,
    DuplicateJobError,
    PayloadError,
    StateConflictError,
    UnknownJobError,
    UnknownOccurrenceError,
    UnknownTaskError,
)
from soloist.models import (
    DEFAULT_MAX_CRASHES,
    Attempt,
    Cancelled,
    CancelResult,
    ErrorCode,
    JobRecord,
    JSONDict,
    Kind,
    NewOccurrence,
    Occurrence,
    Overlap,
    State,
)
from soloist.payload import validate_payload
from soloist.registry import JobDef, JobPolicy, Registry, TaskDef, check_name
from soloist.schedules import Schedule
from soloist.schedules import at as at_schedule
from soloist.stores.base import Store
from soloist.stores.core import checked
from soloist.tracing import TRACE_KEY

#: How many job names the error for an unknown job lists.
UNKNOWN_JOB_NAMES = 20
#: Rows per store call of ``enqueue_many``, and how many such calls may be in flight.
ENQUEUE_BATCH = 1000
ENQUEUE_PARALLEL = 2

log = logging.getLogger("soloist")


#: Stands for the times of an item given to ``occurrence_insert_now`` (they are ignored).
_UNUSED_TIME = datetime(1970, 1, 1, tzinfo=timezone.utc)


class Operations:
    """Operations that any process may run, whether or not it runs the workers."""

    def __init__(
        self,
        store: Callable[[], Awaitable[Store]],
        registry: Registry,
        wake: Callable[[], None],
        wake_work: Callable[[timedelta], None],
    ) -> None:
        """``wake``: schedules changed here (the planner looks again, and the executor);
        ``wake_work(due_in)``: new occurrences only, due ``due_in`` from now (the executor
        looks if that is before its next look; the planner has nothing new to plan)."""
        self._store = store
        self.registry = registry
        self._wake = wake
        self._wake_work = wake_work

    # -- queue ------------------------------------------------------------------------------
    async def enqueue(
        self,
        task: str | Callable[..., Any],
        payload: dict[str, Any] | None,
        *,
        delay: object = None,
        at: object = None,
        key: str | None = None,
        trace: JSONDict | None = None,
    ) -> Occurrence:
        """Queue one run of ``task`` now, after ``delay`` or at ``at``; with ``key``, at most
        one occurrence per (task, key) is ever created (later calls return the first).
        ``trace``: the enqueue's trace context, stored with the payload (soloist.tracing)."""
        spec = self._task(task)
        data = validate_payload(payload)
        _check_binds(spec, data)
        if delay is not None and at is not None:
            raise ConfigError(f"give delay ({delay!r}) or at ({at!r}), not both")
        if key is not None:
            check_name(key, "idempotency key")
        store = await self._store()
        dedupe = f"t:{spec.name}:{key}" if key is not None else f"t:{uuid.uuid4().hex}"

        def item(due: datetime) -> NewOccurrence:
            return NewOccurrence(
                dedupe_key=dedupe,
                job=spec.name,
                task=spec.name,
                scope="",
                plan_time=due,
                due_at=due,
                kind=Kind.TASK,
                max_attempts=spec.retry.max_attempts,
                overlap=Overlap.ALLOW,
                payload=data if trace is None else {**data, TRACE_KEY: trace},
                max_crashes=spec.max_crashes,
            )

        if at is None:
            # The store's clock fixes the due time: inside the insert where the store can
            # (one round trip), else read just before it.
            wait = timedelta(0)
            if delay is not None:
                wait = parse_duration(delay, what="delay", allow_zero=True)
            occ, _created = await checked(store).occurrence_insert_now(item(_UNUSED_TIME), wait)
            self._wake_work(wait)
            return occ
        if not isinstance(at, (str, datetime, timedelta)):
            raise ConfigError(
                f"invalid at {at!r}: expected an aware datetime or an RFC 3339 string"
            )
        now = await store.now()
        when = at_schedule(at, now=now).next_after(datetime.min.replace(tzinfo=now.tzinfo))
        due = when if when is not None else now
        occ, _created = await store.occurrence_insert(item(due))
        self._wake_work(due - now)
        return occ

    async def enqueue_many(
        self,
        task: str | Callable[..., Any],
        payloads: Iterable[dict[str, Any]],
        *,
        delay: object = None,
        batch: int = ENQUEUE_BATCH,
        trace: JSONDict | None = None,
    ) -> int:
        """Queue one run of ``task`` per payload; returns how many were queued (``trace``:
        the enqueue's trace context, stored with each payload, see soloist.tracing).

        Every payload is checked before anything is written: one bad payload queues
        nothing. Rows go to the store in chunks of ``batch``, each one atomic
        (:meth:`Store.occurrence_insert_many`), with up to :data:`ENQUEUE_PARALLEL` chunks
        in flight so that a server store works on one chunk while the next is prepared;
        if the store fails midway, the chunks already written stay queued."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ConfigError(f"invalid batch {batch!r}: expected an integer >= 1")
        spec = self._task(task)
        checked = []
        bound: set[frozenset[str]] = set()  # binding depends on the keys only
        for index, payload in enumerate(payloads):
            data = validate_payload(payload, what=f"payload #{index}")
            keys = frozenset(data)
            if keys not in bound:
                _check_binds(spec, data)
                bound.add(keys)
            checked.append(data if trace is None else {**data, TRACE_KEY: trace})
        store = await self._store()
        wait = timedelta(0)
        if delay is not None:
            wait = parse_duration(delay, what="delay", allow_zero=True)
        due = await store.now() + wait
        slots = asyncio.Semaphore(ENQUEUE_PARALLEL)

        async def insert(chunk: list[JSONDict]) -> int:
            prefix = f"t:{uuid.uuid4().hex}:"  # unique per chunk; a counter within it
            items = [
                NewOccurrence(
                    dedupe_key=f"{prefix}{n:x}",
                    job=spec.name,
                    task=spec.name,
                    scope="",
                    plan_time=due,
                    due_at=due,
                    kind=Kind.TASK,
                    max_attempts=spec.retry.max_attempts,
                    overlap=Overlap.ALLOW,
                    payload=data,
                    max_crashes=spec.max_crashes,
                )
                for n, data in enumerate(chunk)
            ]
            async with slots:
                return await store.occurrence_insert_many(items)

        counts = await asyncio.gather(
            *(insert(checked[i : i + batch]) for i in range(0, len(checked), batch))
        )
        self._wake_work(wait)
        return sum(counts)

    async def trigger(self, job: str) -> Occurrence:
        """Run ``job`` once now, outside its schedule (it still respects overlap, except
        that ``skip`` queues instead: a trigger is never dropped silently)."""
        store = await self._store()
        defn = self.registry.jobs.get(job)
        if defn is not None:
            spec = self.registry.task(defn.task)
            max_attempts, max_crashes = spec.retry.max_attempts, spec.max_crashes
        else:
            # Not defined in this process (the CLI, a dynamic schedule): use the record.
            record = await store.job_get(job)
            if record is None:
                raise await self.unknown_job(job)
            defn = JobDef.from_stored(record.name, record.task, record.schedule, record.payload)
            max_attempts = int(record.schedule.get("max_attempts", 1))
            max_crashes = int(record.schedule.get("max_crashes", DEFAULT_MAX_CRASHES))
        now = await store.now()
        overlap = Overlap.QUEUE if defn.policy.overlap is Overlap.SKIP else defn.policy.overlap
        occ, _ = await store.occurrence_insert(
            NewOccurrence(
                dedupe_key=f"r:{uuid.uuid4().hex}",
                job=defn.name,
                task=defn.task,
                scope="",
                plan_time=now,
                due_at=now,
                kind=Kind.TRIGGER,
                max_attempts=max_attempts,
                overlap=overlap,
                payload=defn.payload,
                max_crashes=max_crashes,
            )
        )
        self._wake_work(timedelta(0))
        return occ

    async def retry(self, occurrence_id: str) -> Occurrence:
        """Run a ``dead`` occurrence again as a new occurrence, due now, with the same job,
        task, scope, payload, kind and attempts; the dead one stays as the audit record.
        Idempotent: retrying the same dead occurrence again returns the same new one."""
        store = await self._store()
        occ = await store.occurrence_get(occurrence_id)
        if occ is None:
            raise UnknownOccurrenceError(
                f"unknown occurrence {occurrence_id!r}: expected an id from 'soloist history'"
            )
        if occ.state is not State.DEAD:
            raise StateConflictError(
                f"occurrence {occurrence_id!r} is {occ.state.value}: only dead occurrences "
                "can be retried"
            )
        now = await store.now()
        new, created = await store.occurrence_insert(
            NewOccurrence(
                dedupe_key=f"retry:{occ.id}",
                job=occ.job,
                task=occ.task,
                scope=occ.scope,
                plan_time=now,
                due_at=now,
                kind=occ.kind,
                max_attempts=occ.max_attempts,
                # Like a trigger, a retry is never dropped silently by overlap=skip.
                overlap=Overlap.QUEUE if occ.overlap is Overlap.SKIP else occ.overlap,
                payload=occ.payload,
                max_crashes=occ.max_crashes,
            )
        )
        if created:
            log.info(
                "retrying dead occurrence %s of %s as %s",
                occ.id,
                occ.job,
                new.id,
                extra={"action": "retry", "job": occ.job, "execution_id": new.id},
            )
        self._wake_work(timedelta(0))
        return new

    async def cancel(self, occurrence_id: str) -> CancelResult:
        """Cancel an occurrence (see ``Scheduler.acancel``): a scheduled one (or one waiting
        for a retry) never runs; a running one's runner is asked to stop it. Finished
        ones are refused (StateConflictError), unknown ids too (UnknownOccurrenceError)."""
        store = await self._store()
        answer = await store.occurrence_cancel(occurrence_id)
        if answer is None:
            raise UnknownOccurrenceError(
                f"unknown occurrence {occurrence_id!r}: expected an id from 'soloist history'"
            )
        occ, changed = answer
        if occ.state is State.RUNNING:
            outcome = Cancelled.REQUESTED if changed else Cancelled.ALREADY_REQUESTED
        elif changed:
            outcome = Cancelled.CANCELLED
        else:
            already = occ.error_code == ErrorCode.CANCELLED.value and occ.cancel_requested
            raise StateConflictError(
                f"occurrence {occurrence_id!r} is {occ.state.value}"
                f"{' (cancelled already)' if already else ''}: it has finished; only "
                "scheduled, failed (retry pending) or running occurrences can be cancelled"
            )
        if changed:
            log.info(
                "%s occurrence %s of %s",
                "cancelled" if outcome is Cancelled.CANCELLED else "requested cancellation of",
                occ.id,
                occ.job,
                extra={"action": "cancel", "job": occ.job, "execution_id": occ.id},
            )
        return CancelResult(outcome, occ)

    async def set_paused(self, job: str, paused: bool) -> None:
        store = await self._store()
        if job in self.registry.jobs:
            # Defined in this process: make sure the store knows it even if no instance
            # has started yet (job_upsert keeps an existing pause flag).
            await store.job_upsert([r for r in self.registry.job_records() if r.name == job])
        if not await store.job_set_paused(job, paused):
            raise await self.unknown_job(job)
        self._wake()

    async def unknown_job(self, job: str) -> UnknownJobError:
        """The error for ``job``, a name that is no job: it lists the jobs there are (in the
        store or defined here), and for a task's name says to enqueue it instead (a task is
        known by its definition here, or by an occurrence of kind task in the store)."""
        store = await self._store()
        names = sorted({r.name for r in await store.job_list()} | set(self.registry.jobs))
        shown = ", ".join(names[:UNKNOWN_JOB_NAMES])
        if len(names) > UNKNOWN_JOB_NAMES:
            shown += f" and {len(names) - UNKNOWN_JOB_NAMES} more ('soloist jobs' lists them)"
        jobs = f"the jobs are: {shown}" if names else "the store has no jobs yet"
        is_task = job in self.registry.tasks and job not in self.registry.jobs
        if not is_task:
            recent = await store.occurrence_list(job=job, limit=1)
            is_task = bool(recent) and recent[0].kind is Kind.TASK
        if is_task:
            return UnknownJobError(
                f"unknown job {job!r}: it is a task, not a scheduled job: queue a run with "
                f"enqueue({job!r}) (soloist enqueue {job} --app APP); {jobs}"
            )
        return UnknownJobError(f"unknown job {job!r}: expected a job name; {jobs}")

    async def history(
        self, job: str | None = None, state: str | State | None = None, limit: int = 100
    ) -> list[Occurrence]:
        if state is not None and not isinstance(state, State):
            try:
                state = State(state)
            except ValueError:
                allowed = ", ".join(s.value for s in State)
                raise ConfigError(f"invalid state {state!r}: expected one of {allowed}") from None
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"invalid limit {limit!r}: expected an integer >= 1")
        store = await self._store()
        return await store.occurrence_list(job=job, state=state, limit=limit)

    async def attempts(self, occurrence_id: str) -> tuple[Occurrence, list[Attempt]]:
        """One occurrence and the audit log of its attempts."""
        store = await self._store()
        occ = await store.occurrence_get(occurrence_id)
        if occ is None:
            raise UnknownOccurrenceError(
                f"unknown occurrence {occurrence_id!r}: expected an id from 'soloist history'"
            )
        return occ, await store.occurrence_attempts(occurrence_id)

    # -- dynamic schedules --------------------------------------------------------------------
    async def schedule_add(
        self,
        name: str,
        *,
        task: str | Callable[..., Any],
        schedule: Schedule,
        payload: dict[str, Any] | None = None,
        end: object = None,
        max_runs: int | None = None,
        metadata: dict[str, Any] | None = None,
        overlap: str | None = None,
        catch_up: str = "latest",
        catch_up_window: object = None,
        misfire_grace: object = None,
    ) -> JobRecord:
        check_name(name, "schedule name")
        if name in self.registry.jobs or name in self.registry.tasks:
            raise DuplicateJobError(f"a job or task named {name!r} is defined in code")
        spec = self._task(task)
        if not isinstance(schedule, Schedule):
            raise ConfigError(
                f"invalid schedule {schedule!r}: expected cron(...), every(...) or at(...)"
            )
        data = validate_payload(payload)
        _check_binds(spec, data)
        schedule = schedule.with_limits(end=end, max_runs=max_runs)
        job = JobDef(
            name=name,
            task=spec.name,
            schedule=schedule,
            policy=JobPolicy.build(catch_up, catch_up_window, overlap, misfire_grace),
            payload=data,
            dynamic=True,
        )
        store = await self._store()
        record = JobRecord(
            name=name,
            task=spec.name,
            schedule=job.stored_schedule(spec.retry.max_attempts, spec.max_crashes),
            dynamic=True,
            payload=data,
            metadata=validate_payload(metadata, what="metadata"),
            created_at=await store.now(),
        )
        await store.job_add(record)
        self._wake()
        return record

    async def schedule_get(self, name: str) -> JobRecord | None:
        store = await self._store()
        record = await store.job_get(name)
        return record if record is not None and record.dynamic else None

    async def schedule_delete(self, name: str) -> bool:
        store = await self._store()
        record = await store.job_get(name)
        if record is None or not record.dynamic:
            return False
        return await store.job_delete(name)

    async def schedule_list(self) -> list[JobRecord]:
        store = await self._store()
        return [r for r in await store.job_list() if r.dynamic]

    def _task(self, task: str | Callable[..., Any]) -> TaskDef:
        """The task named (or decorated) ``task``; a scheduled job's handler is not a task."""
        name = task if isinstance(task, str) else getattr(task, "__name__", "")
        spec = self.registry.tasks.get(name) if isinstance(task, str) else None
        if spec is None:
            # A handler wrapped by Scheduler.wrap_handlers is still found by the function.
            spec = next((t for t in self.registry.tasks.values() if _wraps(t.fn, task)), None)
        if spec is not None and spec.name in self.registry.jobs:
            raise UnknownTaskError(
                f"{spec.name!r} is a scheduled job, not a task: use trigger({spec.name!r}) "
                "to run it now"
            )
        if spec is None:
            tasks = sorted(set(self.registry.tasks) - set(self.registry.jobs))
            raise UnknownTaskError(
                f"unknown task {name or task!r}: expected one of the tasks decorated with "
                f"@app.task ({', '.join(tasks) or 'none'})"
            )
        return spec


def _check_binds(spec: TaskDef, payload: JSONDict) -> None:
    """Reject at enqueue time a payload the handler could never accept."""
    if TRACE_KEY in payload:
        raise PayloadError(
            f"payload key {TRACE_KEY!r} is reserved: soloist keeps the trace context there"
        )
    signature = spec.signature
    if signature is None:
        return
    try:
        signature.bind(None, **payload)
    except TypeError as exc:
        raise PayloadError(
            f"payload {payload!r} does not fit task {spec.name!r}{signature}: {exc}"
        ) from None


__all__ = ["Operations"]


def _wraps(fn: object, target: object) -> bool:
    """Whether ``fn`` is ``target`` or wraps it (following ``functools.wraps``)."""
    while fn is not None:
        if fn is target:
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False
