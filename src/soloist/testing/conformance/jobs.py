"""Conformance: code-defined jobs and dynamic schedules."""

from __future__ import annotations

import pytest

from soloist.errors import DuplicateJobError, PayloadError
from soloist.models import JobRecord, PlanAdvance, PlanCursor
from soloist.stores.base import Store
from soloist.testing.clock import FakeClock
from soloist.testing.conformance.base import T0, at, insert, new_occurrence

CRON = {"kind": "cron", "expr": "0 2 * * *", "tz": "Europe/Berlin"}
EVERY = {"kind": "every", "seconds": 300}


def _job(name: str, **changes: object) -> JobRecord:
    values: dict[str, object] = {"task": name, "schedule": CRON}
    values.update(changes)
    return JobRecord(name=name, **values)  # type: ignore[arg-type]


class JobConformance:
    async def test_job_add_and_get_round_trip(self, store: Store, clock: FakeClock) -> None:
        """A dynamic schedule reads back whole; created_at defaults to the store's now."""
        clock.advance(12)
        record = _job(
            "report-42",
            task="send_report",
            dynamic=True,
            payload={"to": ["a@b.c"], "n": 1.5},
            metadata={"owner": "ops", "end": "2027-01-01"},
        )
        await store.job_add(record)
        got = await store.job_get("report-42")
        assert got is not None
        assert got == JobRecord(
            name="report-42",
            task="send_report",
            schedule=CRON,
            dynamic=True,
            paused=False,
            payload={"to": ["a@b.c"], "n": 1.5},
            metadata={"owner": "ops", "end": "2027-01-01"},
            created_at=at(12),
        )

    async def test_job_add_of_a_taken_name_raises(self, store: Store) -> None:
        """job_add of an existing name raises DuplicateJobError naming it; the first stays."""
        await store.job_add(_job("report-42"))
        with pytest.raises(DuplicateJobError, match="report-42"):
            await store.job_add(_job("report-42", task="other"))
        got = await store.job_get("report-42")
        assert got is not None and got.task == "report-42"

    async def test_job_add_rejects_a_non_json_payload(self, store: Store) -> None:
        """A job payload that is not JSON raises PayloadError; nothing is stored."""
        with pytest.raises(PayloadError):
            await store.job_add(_job("bad", payload={"x": {1, 2}}))
        assert await store.job_get("bad") is None

    async def test_job_get_of_an_unknown_name_is_none(self, store: Store) -> None:
        """job_get returns None for an unknown name."""
        assert await store.job_get("nope") is None

    async def test_job_upsert_inserts_then_updates_keeping_pause_and_creation(
        self, store: Store, clock: FakeClock
    ) -> None:
        """job_upsert updates task/schedule/payload/metadata; paused and created_at stay."""
        await store.job_upsert([_job("cleanup"), _job("refresh", schedule=EVERY)])
        assert await store.job_set_paused("cleanup", True)
        clock.advance(60)
        changed = _job("cleanup", task="cleanup2", schedule=EVERY, payload={"v": 2})
        await store.job_upsert([changed, _job("refresh", schedule=EVERY)])
        got = await store.job_get("cleanup")
        assert got is not None
        assert (got.task, got.schedule, got.payload) == ("cleanup2", EVERY, {"v": 2})
        assert got.paused is True
        assert got.created_at == T0
        refresh = await store.job_get("refresh")
        assert refresh is not None and refresh.paused is False and refresh.created_at == T0

    async def test_job_list_is_by_name(self, store: Store) -> None:
        """job_list returns every job ordered by name."""
        await store.job_upsert([_job("b"), _job("c")])
        await store.job_add(_job("a", dynamic=True))
        assert [j.name for j in await store.job_list()] == ["a", "b", "c"]

    async def test_job_delete_removes_job_and_cursors_not_history(self, store: Store) -> None:
        """job_delete drops the job and its cursors; its occurrences remain as history."""
        await store.job_add(_job("report-42", dynamic=True))
        await store.job_add(_job("other", dynamic=True))
        await store.plan_advance(PlanAdvance("report-42", "", None, at(60), 1, []))
        await store.plan_advance(PlanAdvance("report-42", "tenant", None, at(60), 1, []))
        await store.plan_advance(PlanAdvance("other", "", None, at(60), 1, []))
        await insert(store, new_occurrence("r:1", job="report-42"))
        assert await store.job_delete("report-42") is True
        assert await store.job_get("report-42") is None
        assert await store.plan_cursor_get("report-42", "") is None
        assert await store.plan_cursor_get("report-42", "tenant") is None
        assert await store.plan_cursor_get("other", "") == PlanCursor("other", "", at(60), 1)
        assert [o.dedupe_key for o in await store.occurrence_list(job="report-42")] == ["r:1"]
        assert await store.job_delete("report-42") is False

    async def test_job_set_paused_reports_existence(self, store: Store) -> None:
        """job_set_paused flips the flag and returns False for an unknown job."""
        await store.job_upsert([_job("cleanup")])
        assert await store.job_set_paused("cleanup", True) is True
        got = await store.job_get("cleanup")
        assert got is not None and got.paused is True
        assert await store.job_set_paused("cleanup", False) is True
        got = await store.job_get("cleanup")
        assert got is not None and got.paused is False
        assert await store.job_set_paused("nope", True) is False
        assert await store.job_get("nope") is None
