"""``app.retry`` of dead occurrences and ``app.status``, on the memory store."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from soloist import Scheduler, every
from soloist.errors import StateConflictError, UnknownOccurrenceError
from soloist.models import ErrorCode, Outcome, Overlap, State
from soloist.stores.memory import MemoryStore
from soloist.stores.urls import mask_url
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


async def dead_occurrence(app: Scheduler, store: MemoryStore) -> str:
    """Enqueue ``send`` with a payload and let its one attempt die."""
    occ_id = await app.aenqueue("send", {"to": "a@b.c"})
    (claimed,) = await store.occurrence_claim("w", ["send"], 1, timedelta(seconds=30))
    outcome = Outcome(claimed.id, claimed.fencing_token, State.DEAD, ErrorCode.HANDLER_ERROR.value)
    assert await store.occurrence_complete("w", [outcome]) == {claimed.id}
    return occ_id


async def test_retry_copies_the_dead_occurrence_due_now_once() -> None:
    """A retry is a new occurrence with the same job, task, payload and attempts, due now;
    retrying again returns it; the dead one stays dead."""
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    app = Scheduler(store, clock=clock)
    app.task(name="send", retries=2)(lambda ctx, to: None)
    dead_id = await dead_occurrence(app, store)
    clock.advance(60)
    new_id = await app.aretry(dead_id)
    assert new_id != dead_id and await app.aretry(dead_id) == new_id
    dead, new = await store.occurrence_get(dead_id), await store.occurrence_get(new_id)
    assert dead is not None and new is not None
    assert dead.state is State.DEAD
    assert (new.job, new.task, new.scope, new.kind) == (dead.job, dead.task, dead.scope, dead.kind)
    assert (new.payload, new.max_attempts) == ({"to": "a@b.c"}, 3)
    assert (new.state, new.attempt, new.due_at) == (State.SCHEDULED, 0, T0 + timedelta(seconds=60))
    assert len(await store.occurrence_list(limit=10)) == 2


async def test_retry_of_a_live_or_unknown_occurrence_is_refused() -> None:
    """Only dead occurrences can be retried; an unknown id names itself."""
    app = Scheduler("memory://")
    app.task(name="send")(lambda ctx, to: None)
    scheduled = await app.aenqueue("send", {"to": "x"})
    with pytest.raises(StateConflictError, match="is scheduled: only dead occurrences"):
        await app.aretry(scheduled)
    with pytest.raises(UnknownOccurrenceError, match="'nope'"):
        await app.aretry("nope")


async def test_retry_of_an_overlap_skip_job_queues_instead() -> None:
    """Like a trigger, a retry of a job with overlap=skip queues rather than being skipped."""
    clock = FakeClock(T0)
    store = MemoryStore(clock=clock)
    app = Scheduler(store, clock=clock)
    app.job(every("1h"), name="hourly")(lambda ctx: None)
    trig = await store.occurrence_get(await app.atrigger("hourly"))
    assert trig is not None
    (claimed,) = await store.occurrence_claim("w", ["hourly"], 1, timedelta(seconds=30))
    await store.occurrence_complete(
        "w", [Outcome(claimed.id, claimed.fencing_token, State.DEAD, "handler_error")]
    )
    new = await store.occurrence_get(await app.aretry(claimed.id))
    assert new is not None and new.overlap is Overlap.QUEUE


async def test_status_without_a_runtime() -> None:
    """status() works without running workers: not leader, will not execute, jobs listed."""
    app = Scheduler("memory://", instance_id="me", mode="leader", token="t")
    app.job(every("1h"), name="hourly")(lambda ctx: None)
    await app.aresume("hourly")  # registers the job in the store
    status = await app.astatus()
    assert status["instance_id"] == "me" and status["mode"] == "leader"
    assert (status["running"], status["is_leader"], status["will_execute_jobs"]) == (
        False,
        False,
        False,
    )
    assert status["actions_enabled"] is True
    assert (status["leader_id"], status["epoch"], status["instances"]) == (None, None, [])
    (job,) = status["jobs"]
    assert job["name"] == "hourly" and job["last"] is None and job["next_plan_time"]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cr%40t@db:5432/x?schema=s", "postgresql://app:***@db:5432/x?schema=s"),
        ("redis://:pw@localhost:6379/0", "redis://:***@localhost:6379/0"),
        (
            "postgresql://db/x?user=u&password=pw&sslmode=require",
            "postgresql://db/x?user=u&password=***&sslmode=require",
        ),
        ("sqlite:///soloist.db", "sqlite:///soloist.db"),
        ("postgresql://app@db/x", "postgresql://app@db/x"),
    ],
)
def test_store_urls_are_shown_without_passwords(url: str, shown: str) -> None:
    """mask_url hides a password in the userinfo or the query and leaves the rest."""
    assert mask_url(url) == shown
