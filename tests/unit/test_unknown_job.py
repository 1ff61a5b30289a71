"""The error for a name that is no job lists the jobs, and says to enqueue a task."""

from __future__ import annotations

from typing import Any

import pytest

from soloist import Scheduler, every
from soloist.errors import UnknownJobError
from soloist.operations import UNKNOWN_JOB_NAMES


def handler(ctx: Any) -> None:
    """Does nothing."""


@pytest.mark.parametrize("operation", ["trigger", "pause", "resume"])
def test_an_unknown_job_lists_the_jobs_defined_and_stored(operation: str) -> None:
    """Jobs defined in this process and stored dynamic schedules are listed."""
    app = Scheduler("memory://")
    app.job(every("1h"), name="hourly")(handler)
    app.task(handler)
    app.schedules.add("report-42", task="handler", schedule=every("1d"))
    try:
        with pytest.raises(UnknownJobError) as caught:
            getattr(app, operation)("nightly")
        message = str(caught.value)
        assert "'nightly'" in message and "hourly, report-42" in message
        assert "enqueue" not in message
    finally:
        app.close()


def test_a_task_defined_here_is_not_a_job_enqueue_it() -> None:
    """The name of a task defined in this process: say to enqueue it."""
    app = Scheduler("memory://")
    app.task(handler)
    try:
        with pytest.raises(UnknownJobError, match=r"'handler': it is a task.*enqueue\('handler'\)"):
            app.trigger("handler")
    finally:
        app.close()


def test_a_long_list_of_jobs_is_cut_short() -> None:
    """At most UNKNOWN_JOB_NAMES names, then how many more."""
    app = Scheduler("memory://")
    app.task(handler)
    for n in range(UNKNOWN_JOB_NAMES + 5):
        app.schedules.add(f"s{n:03}", task="handler", schedule=every("1d"))
    try:
        with pytest.raises(UnknownJobError) as caught:
            app.pause("nightly")
        assert f"s{UNKNOWN_JOB_NAMES - 1:03} and 5 more" in str(caught.value)
    finally:
        app.close()


def test_no_jobs_at_all_says_so() -> None:
    """An empty store says it has no jobs yet."""
    app = Scheduler("memory://")
    try:
        with pytest.raises(UnknownJobError, match="has no jobs yet"):
            app.trigger("nightly")
    finally:
        app.close()
