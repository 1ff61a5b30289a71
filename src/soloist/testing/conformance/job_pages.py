"""Conformance: pages of jobs with their last outcome, and the jobs' counts (the operator's
views: ``GET /status``, ``GET /api/jobs``, ``soloist status``, the dashboard)."""

from __future__ import annotations

import pytest

from soloist.errors import ConfigError
from soloist.models import JobRecord, Outcome, Overlap, State
from soloist.stores import pages
from soloist.stores.core import CheckedStore
from soloist.stores.pages import JobPage, JobQuery
from soloist.testing.conformance.base import T0, at, claim, insert, new_occurrence

EVERY = {"kind": "every", "seconds": 300}
#: Names in code point order, some of them beyond ASCII (their UTF-8 bytes sort the same).
NAMES = sorted(
    [f"job-{n:02d}" for n in range(17)]
    + ["Zeta", "a/b", "a:b", "report", "report-1", "reporting", "éclair", "日次", "🙂"]
)


def _job(name: str, *, paused: bool = False) -> JobRecord:
    return JobRecord(name=name, task=f"t-{name}", schedule=EVERY, paused=paused)


async def _all_pages(store: CheckedStore, query: JobQuery) -> list[JobPage]:
    """Every page of ``query``, following next_after to the end."""
    found = [await store.job_page(query)]
    while found[-1].next_after is not None:
        assert len(found) < 1000, "paging does not end"
        after = found[-1].next_after
        found.append(await store.job_page(JobQuery(**{**query.__dict__, "after": after})))
    return found


def _names(found: list[JobPage]) -> list[str]:
    return [view.record.name for page in found for view in page.jobs]


async def _run(store: CheckedStore, key: str, job: str, plan: int, state: State) -> str:
    """An occurrence of ``job`` planned at ``plan`` seconds, claimed and ended ``state``
    (``running``: left running; ``scheduled``: not claimed); returns its id."""
    task = f"t-{job}"
    (occ,) = await insert(store, new_occurrence(key, job=job, task=task, due_at=at(plan)))
    if state is State.SCHEDULED:
        return occ.id
    (run,) = await claim(store, tasks=[task], limit=1, now=at(plan))
    assert run.id == occ.id
    if state is not State.RUNNING:
        code = "handler_error" if state is State.DEAD else None
        outcome = Outcome(run.id, run.fencing_token, state, code)
        assert await store.occurrence_complete("i1", [outcome], now=at(plan + 1)) == {run.id}
    return occ.id


async def _skipped(store: CheckedStore, job: str) -> str:
    """A skipped occurrence of ``job`` (overlap skip, its predecessor still running since
    before it was due); returns its id."""
    task = f"t-{job}"
    first = new_occurrence(f"{job}:1", job=job, task=task, overlap=Overlap.SKIP)
    await insert(store, first)
    await claim(store, tasks=[task], limit=1, now=T0)
    later = new_occurrence(f"{job}:2", job=job, task=task, due_at=at(60), overlap=Overlap.SKIP)
    (occ,) = await insert(store, later)
    assert await claim(store, tasks=[task], limit=1, now=at(60)) == []
    got = await store.occurrence_get(occ.id)
    assert got is not None and got.state is State.SKIPPED
    return occ.id


class JobPageConformance:
    async def test_pages_cover_every_job_once_in_name_order(self, store: CheckedStore) -> None:
        """Pages of ``limit`` jobs, each continuing after the last name of the one before,
        list every job exactly once, by name in code point order; the last page says
        there is no next one."""
        await store.job_upsert([_job(name) for name in NAMES[::2]])
        for name in NAMES[1::2]:
            await store.job_add(_job(name))
        found = await _all_pages(store, JobQuery(limit=4))
        assert _names(found) == NAMES
        assert all(len(page.jobs) == 4 for page in found[:-1]) and len(found[-1].jobs) <= 4
        ends = [page.jobs[-1].record.name for page in found[:-1]]
        assert [page.next_after for page in found[:-1]] == ends
        whole = await store.job_page(JobQuery(limit=len(NAMES)))
        assert [v.record.name for v in whole.jobs] == NAMES and whole.next_after is None
        listed = sorted(await store.job_list(), key=lambda r: r.name)
        assert [v.record for v in whole.jobs] == listed

    async def test_an_empty_store_has_one_empty_page(self, store: CheckedStore) -> None:
        """No jobs: an empty page without a next one, and counts of zero."""
        assert await store.job_page(JobQuery()) == JobPage([], None)
        counts = await store.job_counts("")
        assert counts.total == 0 and counts.paused in (0, None)

    async def test_a_cursor_continues_after_its_name_whatever_changed(
        self, store: CheckedStore
    ) -> None:
        """The cursor is a name, not a position: after the job it names was deleted, or
        jobs were added before it, the next page still starts right after it."""
        await store.job_upsert([_job(name) for name in ("b", "d", "f", "h")])
        first = await store.job_page(JobQuery(limit=2))
        assert [v.record.name for v in first.jobs] == ["b", "d"] and first.next_after == "d"
        assert await store.job_delete("d")
        await store.job_upsert([_job("a"), _job("c"), _job("e")])
        rest = await store.job_page(JobQuery(after=first.next_after, limit=10))
        assert [v.record.name for v in rest.jobs] == ["e", "f", "h"] and rest.next_after is None

    async def test_a_prefix_keeps_to_the_names_that_start_with_it(
        self, store: CheckedStore
    ) -> None:
        """``prefix`` lists exactly the names that start with it (beyond ASCII too), and
        pages through them; a cursor before the prefix's range starts at its beginning,
        one after it finds nothing."""
        await store.job_upsert([_job(name) for name in NAMES])
        for prefix in ("report", "job-1", "a", "é", "日", "🙂", "nothing"):
            expected = [n for n in NAMES if n.startswith(prefix)]
            assert _names(await _all_pages(store, JobQuery(prefix=prefix, limit=2))) == expected
        before = await store.job_page(JobQuery(prefix="report", after="a/b"))
        assert [v.record.name for v in before.jobs] == ["report", "report-1", "reporting"]
        after = await store.job_page(JobQuery(prefix="job-", after="job-99"))
        assert after == JobPage([], None)

    async def test_the_last_outcome_is_the_newest_finished_by_plan_time(
        self, store: CheckedStore
    ) -> None:
        """A job's last outcome is its finished occurrence with the newest plan time (the
        first finished one its history lists), whatever runs or waits after it; a job
        that never finished has none."""
        await store.job_upsert([_job(name) for name in ("busy", "fresh", "lazy", "solo")])
        await _run(store, "busy:1", "busy", 10, State.SUCCEEDED)
        dead = await _run(store, "busy:2", "busy", 20, State.DEAD)
        await _run(store, "busy:3", "busy", 30, State.RUNNING)
        await _run(store, "busy:4", "busy", 40, State.SCHEDULED)
        await _run(store, "fresh:1", "fresh", 50, State.SCHEDULED)
        skipped = await _skipped(store, "lazy")
        ok = await _run(store, "solo:1", "solo", 5, State.SUCCEEDED)
        views = {v.record.name: v.last for v in (await store.job_page(JobQuery())).jobs}
        busy, lazy, solo = views["busy"], views["lazy"], views["solo"]
        assert busy is not None and (busy.id, busy.state, busy.error_code) == (
            dead,
            State.DEAD,
            "handler_error",
        )
        assert busy.plan_time == at(20) and busy.finished_at == at(21)
        assert lazy is not None and (lazy.id, lazy.state) == (skipped, State.SKIPPED)
        assert solo is not None and (solo.id, solo.state, solo.error_code) == (
            ok,
            State.SUCCEEDED,
            None,
        )
        assert views["fresh"] is None
        for name, last in views.items():  # the same as the first finished row of history
            history = await store.occurrence_list(job=name, limit=100)
            first = next((o for o in history if o.state.is_terminal), None)
            assert (last.id if last else None) == (first.id if first else None)

    async def test_filters_by_paused_and_last_outcome(self, store: CheckedStore) -> None:
        """``paused`` and ``outcome`` keep the matching jobs only; paging a filter to its
        end lists each of them once."""
        names = [f"j{n:02d}" for n in range(12)]
        await store.job_upsert([_job(name, paused=n % 3 == 0) for n, name in enumerate(names)])
        for n, name in enumerate(names):
            if n % 4 == 1:
                await _run(store, f"{name}:1", name, n, State.SUCCEEDED)
            elif n % 4 == 2:
                await _run(store, f"{name}:1", name, n, State.DEAD)
        paused = [name for n, name in enumerate(names) if n % 3 == 0]
        cases: list[tuple[JobQuery, list[str]]] = [
            (JobQuery(paused=True, limit=2), paused),
            (JobQuery(paused=False, limit=3), [n for n in names if n not in paused]),
            (JobQuery(outcome="succeeded", limit=2), names[1::4]),
            (JobQuery(outcome="dead", limit=2), names[2::4]),
            (JobQuery(outcome="none", limit=2), [n for n in names if int(n[1:]) % 4 in (0, 3)]),
            (JobQuery(outcome="skipped"), []),
            (JobQuery(outcome="dead", paused=True), ["j06"]),
        ]
        for query, expected in cases:
            found = await _all_pages(store, query)
            assert _names(found) == expected, query
            for view in (v for page in found for v in page.jobs):
                assert query.wants(view.record, view.last)

    async def test_a_filter_examines_a_bounded_number_of_jobs(
        self, store: CheckedStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With a filter, a call examines at most JOB_SCAN jobs: a page may hold fewer than
        ``limit`` (even none) and say where to go on; paging on finds every match once."""
        monkeypatch.setattr(pages, "JOB_SCAN", 4)
        names = [f"j{n:02d}" for n in range(10)]
        await store.job_upsert([_job(name, paused=name in ("j01", "j08")) for name in names])
        first = await store.job_page(JobQuery(paused=True, limit=3))
        assert [v.record.name for v in first.jobs] == ["j01"] and first.next_after == "j03"
        second = await store.job_page(JobQuery(paused=True, limit=3, after="j03"))
        assert second == JobPage([], "j07")
        third = await store.job_page(JobQuery(paused=True, limit=3, after="j07"))
        assert [v.record.name for v in third.jobs] == ["j08"] and third.next_after is None
        unfiltered = await store.job_page(JobQuery(limit=6))
        assert len(unfiltered.jobs) == 6 and unfiltered.next_after == "j05"

    async def test_counts_of_jobs_and_paused_ones(self, store: CheckedStore) -> None:
        """job_counts counts the jobs with a prefix, and the paused ones among them (or
        says None: a store that cannot count them without reading every job)."""
        await store.job_upsert([_job(name, paused=name.startswith("job-0")) for name in NAMES])
        counts = await store.job_counts("")
        assert counts.total == len(NAMES) and counts.paused in (10, None)
        report = await store.job_counts("report")
        assert report.total == 3 and report.paused in (0, None)
        jobs = await store.job_counts("job-0")
        assert jobs.total == 10 and jobs.paused in (10, None)
        assert (await store.job_counts("日")).total == 1
        assert (await store.job_counts("x")).total == 0

    @pytest.mark.parametrize(
        ("query", "message"),
        [
            (JobQuery(limit=0), "invalid limit 0: expected an integer from 1 to 500"),
            (JobQuery(limit=501), "invalid limit 501"),
            (JobQuery(limit=True), "invalid limit True"),
            (JobQuery(limit="5"), "invalid limit '5'"),  # type: ignore[arg-type]
            (JobQuery(after=""), "invalid cursor '': expected a job name"),
            (JobQuery(after="a\x00"), "invalid cursor 'a\\\\x00'"),
            (JobQuery(prefix="a\n"), "invalid prefix 'a\\\\n'"),
            (JobQuery(paused="yes"), "invalid paused 'yes'"),  # type: ignore[arg-type]
            (JobQuery(outcome="failed"), "invalid outcome 'failed': expected one of succeeded"),
        ],
    )
    async def test_a_bad_query_is_refused_naming_the_value(
        self, store: CheckedStore, query: JobQuery, message: str
    ) -> None:
        """A limit out of 1..500, an empty or unprintable cursor or prefix, a paused flag
        that is no bool, an unknown outcome: ConfigError naming the value."""
        with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
            await store.job_page(query)
        with pytest.raises(ConfigError, match="invalid prefix"):
            await store.job_counts("\x00")
