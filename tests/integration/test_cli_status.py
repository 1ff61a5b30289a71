"""``soloist status`` at many jobs: the counts, a bounded page of jobs with their last
outcome, how many more there are and how to page on (issue 15). The real command runs in
this process (click's ``CliRunner``) on a SQLite store of 120 dynamic schedules."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from soloist.cli import main
from soloist.models import JobRecord, Kind, NewOccurrence, Outcome, State
from soloist.stores import open_store

ENV: dict[str, str | None] = {k: None for k in os.environ if k.startswith("SOLOIST_")}
NAMES = [f"job-{n:04d}" for n in range(120)]


def soloist(*args: str) -> Result:
    return CliRunner(env=ENV).invoke(main, list(args))


async def _fill(url: str) -> None:
    store = open_store(url)
    try:
        await store.migrate()
        every = {"schedule": {"kind": "every", "seconds": 60}}
        records = [JobRecord(n, "work", every, dynamic=True, paused=n == "job-0003") for n in NAMES]
        await store.job_upsert(records)
        now = await store.now()
        await store.occurrence_insert(
            NewOccurrence("k", "job-0001", "t", "", now, now, Kind.SCHEDULE)
        )
        (run,) = await store.occurrence_claim("i", ["t"], 1, timedelta(seconds=30))
        dead = Outcome(run.id, run.fencing_token, State.DEAD, "handler_error")
        await store.occurrence_complete("i", [dead])
    finally:
        await store.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('status') / 'soloist.db'}"
    asyncio.run(_fill(url))
    return url


def _job_lines(output: str) -> list[str]:
    return [line.split()[0] for line in output.splitlines() if line.startswith("  job-")]


def test_status_lists_a_page_and_says_how_many_more(store: str) -> None:
    """The counts, the first 50 jobs by name with their last outcome, and the number of
    the others with the command that lists them."""
    done = soloist("status", "--store", store)
    assert done.exit_code == 0, done.output
    assert "jobs: 120, 1 paused" in done.stdout
    assert _job_lines(done.stdout) == NAMES[:50]
    line = next(line for line in done.stdout.splitlines() if line.startswith("  job-0001 "))
    assert "last dead (handler_error)" in line
    assert "never finished (paused)" in done.stdout
    assert "... and 70 more: soloist status --after job-0049" in done.stdout


def test_status_pages_on_after_a_name(store: str) -> None:
    """--after and --limit list the next page; the last page says nothing more follows."""
    done = soloist("status", "--store", store, "--after", "job-0049", "--limit", "60")
    assert done.exit_code == 0, done.output
    assert _job_lines(done.stdout) == NAMES[50:110]
    assert "more follow: soloist status --after job-0109" in done.stdout
    rest = soloist("status", "--store", store, "--after", "job-0109", "--limit", "60")
    assert _job_lines(rest.stdout) == NAMES[110:] and "more" not in rest.stdout


def test_the_next_page_command_keeps_every_option(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command printed for the next page lists the next page of the same query: its
    filters, its limit and the --store given on the command line (from the environment,
    none: the environment still says it)."""
    args = ["--prefix", "job-0", "--not-paused", "--outcome", "none", "--limit", "2"]
    first = soloist("status", "--store", store, *args)
    assert _job_lines(first.stdout) == ["job-0000", "job-0002"]
    line = next(line for line in first.stdout.splitlines() if "more follow:" in line)
    command = shlex.split(line[line.index("soloist status") :])
    assert command[-2:] == ["--store", store]
    again = soloist(*command[1:])
    assert again.exit_code == 0, again.output
    assert _job_lines(again.stdout) == ["job-0004", "job-0005"]
    monkeypatch.setitem(ENV, "SOLOIST_STORE_URL", store)
    from_env = soloist("status", *args)
    assert "--store" not in from_env.stdout and "more follow:" in from_env.stdout


def test_status_filters_by_prefix_paused_and_outcome(store: str) -> None:
    """--prefix counts and lists the jobs it names; --paused and --outcome keep theirs."""
    done = soloist("status", "--store", store, "--prefix", "job-01")
    assert "jobs named job-01*: 20, 0 paused" in done.stdout
    assert _job_lines(done.stdout) == NAMES[100:]
    paused = soloist("status", "--store", store, "--paused")
    assert _job_lines(paused.stdout) == ["job-0003"]
    dead = soloist("status", "--store", store, "--outcome", "dead", "--limit", "1")
    assert _job_lines(dead.stdout) == ["job-0001"]


def test_status_json_has_the_counts_the_page_and_the_cursor(store: str) -> None:
    """--json: job_counts, the page's jobs (each with its last outcome) and the cursor."""
    done = soloist("status", "--store", store, "--json", "--limit", "2")
    report = json.loads(done.stdout)
    assert report["job_counts"] == {"total": 120, "paused": 1}
    assert [job["name"] for job in report["jobs"]] == NAMES[:2]
    assert report["jobs"][1]["last"]["state"] == "dead"
    assert report["jobs_next_cursor"] == "job-0001"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--limit", "0"], "0 is not in the range 1<=x<=500"),
        (["--limit", "501"], "501"),
        (["--after", "a\x01"], "invalid cursor 'a\\x01'"),
        (["--prefix", "\n"], "invalid prefix '\\n'"),
        (["--outcome", "failed"], "'failed' is not one of"),
        # Invalid UTF-8 on a command line reaches Python as a lone surrogate.
        (["--prefix", "\udcff"], "invalid argument '\\udcff': expected UTF-8 text"),
        (["--after", "a\udcff"], "invalid argument 'a\\udcff': expected UTF-8 text"),
    ],
)
def test_bad_status_options_are_one_line(store: str, args: list[str], named: str) -> None:
    done = soloist("status", "--store", store, *args)
    assert done.exit_code == 2, done.output
    lines = done.stderr.strip().splitlines()
    assert named in lines[-1] and "Traceback" not in done.output


def test_status_of_a_store_without_jobs(tmp_path: Path) -> None:
    """An empty store: zero jobs, no page, nothing more."""
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    assert soloist("migrate", "--store", url).exit_code == 0
    done = soloist("status", "--store", url)
    assert done.exit_code == 0, done.output
    assert "jobs: 0, 0 paused" in done.stdout and "more" not in done.stdout
