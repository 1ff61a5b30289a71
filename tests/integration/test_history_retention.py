"""History retention with a real runtime: the pruner keeps a SQL store's history within the
URL's ``history_max`` and ``history_age`` while jobs and tasks keep finishing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from soloist import Scheduler, every
from soloist.runtime import pruner
from soloist.stores.base import Store

#: The bounds of the test's store URL, and the pruner's batch while the test runs: more
#: than finishes between two passes (0.1 s apart) at the ~110 runs/s of the test.
HISTORY_MAX = 25
BATCH = 50


async def finished(store: Store) -> int:
    """Finished occurrences in the store (succeeded, dead, skipped)."""
    counts = await store.occurrence_counts()
    return sum(n for (_, state), n in counts.by_job_state.items() if state.is_terminal)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    bounds = f"history_max={HISTORY_MAX}&history_age=1s"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'soloist.db'}?{bounds}"
    url: str = request.getfixturevalue("postgres_url")
    return f"{url}&{bounds}" if "?" in url else f"{url}?{bounds}"


async def test_history_stays_bounded_while_jobs_run(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job every 100 ms and a stream of tasks finish hundreds of occurrences; the
    history never holds more than history_max plus one batch, and once the work stops,
    history_age (1 s) leaves only the task's newest finished occurrences."""
    monkeypatch.setattr(pruner, "PRUNE_INTERVAL", 0.1)
    monkeypatch.setattr(pruner, "PRUNE_BATCH", BATCH)
    monkeypatch.setattr(pruner, "PRUNE_PAUSE", 0.01)
    app = Scheduler(store_url, instance_id="pruning", poll_interval="100ms", concurrency=20)
    ran = 0

    @app.job(every("100ms"))
    async def tick(ctx) -> None:  # type: ignore[no-untyped-def]
        nonlocal ran
        ran += 1

    @app.task
    async def chore(ctx, n: int) -> None:  # type: ignore[no-untyped-def]
        nonlocal ran
        ran += 1

    await app.start()
    try:
        store = await app.astore()
        most = 0
        for round_ in range(25):  # 2.5 s of work
            await app.aenqueue_many("chore", [{"n": round_ * 10 + i} for i in range(10)])
            await asyncio.sleep(0.1)
            most = max(most, await finished(store))
        assert ran > 2 * (HISTORY_MAX + BATCH)  # far more finished than the history keeps
        print(f"history at most {most} rows; {ran} runs finished")
        assert most <= HISTORY_MAX + BATCH
        # No more tasks (the job still runs): rows older than 1 s go by age.
        for _ in range(40):
            await asyncio.sleep(0.1)
            chores = await store.occurrence_list(job="chore", limit=1000)
            if len(chores) <= 10 and len({o.finished_at for o in chores}) == 1:
                break
        # Only the task's newest finished occurrences stay: those of its last completion
        # batch, all finished at one instant.
        assert chores and {o.state.value for o in chores} == {"succeeded"}
        assert len({o.finished_at for o in chores}) == 1
        assert await finished(store) <= 10 + 15  # and about 1 s of the 100 ms job
    finally:
        await app.stop()
