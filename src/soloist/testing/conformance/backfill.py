"""Conformance: a backfill (``Scheduler.abackfill``) on the store, beside the planner: it
adds each instant of a past range once, whatever ran or was planned before."""

from __future__ import annotations

from datetime import timedelta

from soloist.models import Kind, State
from soloist.runtime import Runtime
from soloist.scheduler import Scheduler
from soloist.schedules import every
from soloist.stores.base import Store
from soloist.testing.clock import FakeClock
from soloist.testing.conformance.base import T0

HOUR = timedelta(hours=1)


def _app(store: Store, clock: FakeClock) -> Scheduler:
    app = Scheduler(store, instance_id="a", clock=clock, lease_ttl="9s")
    app.job(every("1h"), name="hourly", retries=2)(lambda ctx: None)
    return app


class BackfillConformance:
    async def test_backfill_twice_adds_nothing_the_second_time(
        self, store: Store, clock: FakeClock
    ) -> None:
        """Backfilling a past range adds one occurrence per instant, with the job's
        attempts; the same range again adds none and reports them all as there."""
        clock.advance(timedelta(days=1))
        app = _app(store, clock)
        first = await app.abackfill("hourly", T0, T0 + 10 * HOUR)
        assert (first.instants, first.added, first.existing) == (11, 11, 0)
        again = await app.abackfill("hourly", T0.isoformat(), (T0 + 10 * HOUR).isoformat())
        assert (again.instants, again.added, again.existing) == (11, 0, 11)
        rows = await store.occurrence_list(job="hourly", limit=100)
        assert sorted(o.plan_time for o in rows) == [T0 + k * HOUR for k in range(11)]
        assert {(o.kind, o.state, o.max_attempts) for o in rows} == {
            (Kind.SCHEDULE, State.SCHEDULED, 3)
        }

    async def test_backfill_does_not_double_an_instant_the_planner_made(
        self, store: Store, clock: FakeClock
    ) -> None:
        """An instant the planner has planned (or that ran) is counted as there, not added
        again: one occurrence per plan time."""
        app = _app(store, clock)
        runtime = Runtime(store, app.registry, app.config, app.clock)
        await runtime.register()

        async def plan() -> None:
            if runtime.partitions is not None:
                await runtime.partitions.tick()
            await runtime.planner.tick()

        await plan()  # the stream starts now (T0)
        clock.advance(HOUR + timedelta(seconds=1))
        await plan()  # plans T0 + 1h
        planned = await store.occurrence_list(job="hourly", limit=100)
        assert [o.plan_time for o in planned] == [T0 + HOUR]
        done = await app.abackfill("hourly", T0 - 3 * HOUR, T0 + HOUR)
        assert (done.instants, done.added, done.existing) == (5, 4, 1)
        rows = await store.occurrence_list(job="hourly", limit=100)
        assert sorted(o.plan_time for o in rows) == [T0 + k * HOUR for k in range(-3, 2)]
        assert [o.id for o in rows if o.plan_time == T0 + HOUR] == [planned[0].id]
