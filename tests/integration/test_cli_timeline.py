"""`soloist next` and `soloist backfill`, run as the real command against a SQLite store
holding a dynamic schedule (added through the library; no instance needs to run).

The bad-input test runs the command in this process (click's ``CliRunner`` invokes
``soloist.cli.main`` as the installed script does), which is fast; the others run the
installed script as a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from soloist import Scheduler, cron
from soloist.cli import main

SOLOIST = Path(sys.executable).parent / "soloist"


def soloist(store: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLOIST_")}
    return subprocess.run(
        [str(SOLOIST), *args, "--store", store],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(store: str, *args: str) -> str:
    done = soloist(store, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def in_process(store: str, *args: str) -> Result:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("SOLOIST_")}
    return CliRunner(env=env).invoke(main, [*args, "--store", store])


def refused(done: Result, *names: str) -> None:
    """Exit 2 and one `error:` line naming the bad value, no traceback."""
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise AssertionError(f"a traceback: {done.exception!r}") from done.exception
    assert done.exit_code == 2, (done.exit_code, done.output)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for name in names:
        assert name in lines[0], lines[0]


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A store with the dynamic schedule 'weekly': Sundays 02:30 in Paris, the wall time
    that both daylight-saving changes of Europe (last Sundays of March and October) hit."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    app = Scheduler(url)
    app.task(name="report")(lambda ctx: None)
    app.schedules.add("weekly", task="report", schedule=cron("30 2 * * 0", tz="Europe/Paris"))
    app.close()
    return url


def test_next_lists_fire_times_marking_dst_shifts_and_writes_nothing(
    store: str, tmp_path: Path
) -> None:
    """`next --count 60` (over a year of Sundays) marks the spring gap (02:30 skipped, run
    at 03:00) and the repeated 02:30 of the fall-back, each offset change once; text and
    JSON agree; the store file is unchanged."""
    before = hashlib.sha256((tmp_path / "x.db").read_bytes()).hexdigest()
    out = ok(store, "next", "weekly", "--count", "60", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 60
    times = [datetime.fromisoformat(r["plan_time"]) for r in rows]
    assert times == sorted(times) and times[0] > datetime.now(timezone.utc) - timedelta(days=1)
    notes = [r["note"] or "" for r in rows]
    gap = [r for r, n in zip(rows, notes, strict=True) if "does not exist" in n]
    assert len(gap) == 1 and gap[0]["local_time"].endswith("T03:00:00+02:00")
    twice = [r for r, n in zip(rows, notes, strict=True) if "happens twice" in n]
    assert len(twice) == 1 and twice[0]["local_time"].endswith("T02:30:00+02:00")
    assert sum(r["dst_shift"] for r in rows) == 2
    assert {r["zone"] for r in rows} == {"Europe/Paris"}
    text = ok(store, "next", "weekly", "--count", "60").splitlines()
    assert len(text) == 60
    assert [i for i, line in enumerate(text) if "<-" in line] == [
        i for i, n in enumerate(notes) if n
    ]
    assert hashlib.sha256((tmp_path / "x.db").read_bytes()).hexdigest() == before


def test_backfill_twice_adds_nothing_the_second_time(store: str) -> None:
    """`backfill` plans every Sunday of a past range, and says so; again, it adds none and
    reports them as already there; the history holds each instant once."""
    now = datetime.now(timezone.utc)
    start, end = (now - timedelta(days=7 * 6)).isoformat(), now.isoformat()
    first = ok(store, "backfill", "weekly", "--start", start, "--end", end)
    assert "6 instant(s), 6 added, 0 already there" in first
    again = json.loads(ok(store, "backfill", "weekly", "--start", start, "--end", end, "--json"))
    assert (again["instants"], again["added"], again["existing"]) == (6, 0, 6)
    history = [json.loads(line) for line in ok(store, "history", "--json").splitlines()]
    assert len(history) == 6
    assert len({h["plan_time"] for h in history}) == 6
    assert {(h["job"], h["kind"], h["state"]) for h in history} == {
        ("weekly", "schedule", "scheduled")
    }


def test_bad_input_gets_one_error_line_and_writes_nothing(store: str) -> None:
    """An unknown job, a bad count, a range in the future, unreadable or starting before
    1970: exit 2 with one line naming the value; nothing is planned."""
    refused(in_process(store, "next", "nope"), "unknown job 'nope'", "weekly")
    refused(in_process(store, "next", "weekly", "--count", "0"), "--count", "0")
    refused(
        in_process(store, "backfill", "weekly", "--start", "2020-01-01", "--end", "2999-01-01"),
        "2999-01-01",
        "future",
    )
    refused(
        in_process(store, "backfill", "weekly", "--start", "soon", "--end", "2026-01-01"), "'soon'"
    )
    for start in ("1600-01-01", "0001-01-01T00:00:00Z"):  # (year 1: no date overflow)
        refused(
            in_process(store, "backfill", "weekly", "--start", start, "--end", "2026-01-01"),
            f"invalid start '{start[:4]}-01-01T00:00:00+00:00'",
            "1970-01-01",
        )
    refused(in_process(store, "backfill", "weekly", "--start", "2026-01-01"), "--end")
    assert in_process(store, "history", "--json").stdout == ""
