"""The installed ``soloist`` command, run as a real subprocess against a fresh SQLite file.

A background ``soloist run`` instance (the fixture app ``apps/clockwork.py``) does the
work; the tests drive it with the other subcommands and read the results back through
``soloist history --json`` and ``soloist jobs --json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import pytest

from soloist.testing import wait_until

SOLOIST = Path(sys.executable).parent / "soloist"
APPS = Path(__file__).parent / "apps"
CLOCKWORK = f"{APPS / 'clockwork.py'}:app"
MISSING_DIR_STORE = "sqlite:////nonexistent-dir/x.db"
HISTORY_KEYS = {
    "job",
    "scope",
    "plan_time",
    "state",
    "attempt",
    "instance_id",
    "started_at",
    "finished_at",
    "error_code",
}
DEADLINE_S = 30.0

T = TypeVar("T")


def clean_env() -> dict[str, str]:
    """The test process's environment without any SOLOIST_* setting leaking in."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SOLOIST_")}


def parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts)


@dataclass
class Cli:
    """Runs ``soloist ...`` against one store, in one working directory."""

    store: str
    cwd: Path
    instances: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __call__(self, *args: str, store: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SOLOIST), *args, "--store", store or self.store],
            cwd=self.cwd,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )

    def ok(self, *args: str) -> str:
        """Run a command that must succeed; return its stdout."""
        done = self(*args)
        assert done.returncode == 0, (args, done.returncode, done.stdout, done.stderr)
        return done.stdout

    def json_lines(self, *args: str) -> list[dict[str, Any]]:
        """Run a ``--json`` command; every stdout line must be one JSON object."""
        rows = [json.loads(line) for line in self.ok(*args, "--json").splitlines()]
        assert all(isinstance(row, dict) for row in rows), rows
        return rows

    def history(self, *filters: str) -> list[dict[str, Any]]:
        return self.json_lines("history", "--limit", "1000", *filters)

    def jobs(self) -> dict[str, dict[str, Any]]:
        return {row["name"]: row for row in self.json_lines("jobs")}

    def start(self, app: str = CLOCKWORK) -> subprocess.Popen[bytes]:
        """Start ``soloist run APP`` in the background, logging to a file in ``cwd``."""
        log = (self.cwd / f"instance-{len(self.instances)}.log").open("wb")
        proc = subprocess.Popen(
            [str(SOLOIST), "run", app, "--store", self.store],
            cwd=self.cwd,
            env=clean_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.instances.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> int:
        """SIGTERM an instance and return its exit status."""
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=DEADLINE_S)

    def started(self, app: str = CLOCKWORK) -> subprocess.Popen[bytes]:
        """Start an instance and wait until it has registered the app's jobs."""
        proc = self.start(app)
        wait_until(
            lambda: proc.poll() is None and {"tick", "tock", "yearly"} <= set(self.jobs()),
            "the instance to register its jobs",
        )
        assert proc.poll() is None, self.logs()
        return proc

    def logs(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.cwd.glob("instance-*.log")))


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(store=f"sqlite:///{tmp_path}/x.db", cwd=tmp_path)
    runner.ok("migrate")  # read-only commands refuse a store that does not exist
    yield runner
    for proc in runner.instances:  # a test that failed midway must not leak its instance
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE_S)


def succeeded_after(rows: list[dict[str, Any]], job: str, after: datetime) -> list[dict[str, Any]]:
    return [
        r
        for r in rows
        if r["job"] == job and r["state"] == "succeeded" and parse(r["plan_time"]) > after
    ]


# -- migrate, jobs ----------------------------------------------------------------------------


def test_migrate_creates_the_schema_and_is_idempotent(cli: Cli, tmp_path: Path) -> None:
    """`soloist migrate` creates the store file, succeeds again on it, and leaves it empty."""
    first = cli.ok("migrate")
    assert (tmp_path / "x.db").is_file()
    second = cli.ok("migrate")
    assert first == second == f"store {cli.store} is already at the newest schema: nothing to do\n"
    assert cli.history() == []
    assert cli.jobs() == {}


def test_migrate_never_prints_the_store_password(cli: Cli, postgres_url: str) -> None:
    """`soloist migrate` on a URL with a password (ignored by the test server's trust
    auth) reports the store with the password masked."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(postgres_url)
    user = parts.username or "postgres"
    netloc = f"{user}:s3cret-pw@{parts.hostname}:{parts.port or 5432}"
    url = urlunsplit(parts._replace(netloc=netloc))
    done = cli("migrate", store=url)
    assert done.returncode == 0, done.stderr
    assert "s3cret-pw" not in done.stdout + done.stderr
    assert "newest schema" in done.stdout


def test_jobs_lists_the_jobs_a_running_instance_registered(cli: Cli) -> None:
    """`jobs --json` is empty before `run`, then lists the app's jobs with their schedules."""
    assert cli.ok("jobs", "--json") == ""
    proc = cli.started()
    jobs = cli.jobs()
    assert set(jobs) == {"tick", "tock", "yearly"}  # tasks are not jobs
    assert jobs["tick"]["schedule"] == "every 1s"
    assert "0 3 1 1 *" in jobs["yearly"]["schedule"]
    next_yearly = parse(jobs["yearly"]["next_plan_time"])
    assert (next_yearly.month, next_yearly.day, next_yearly.hour) == (1, 1, 3)
    for row in jobs.values():
        assert row["paused"] is False
        assert row["dynamic"] is False
    assert "no jobs" not in cli.ok("jobs")
    assert cli.stop(proc) == 0, cli.logs()


# -- enqueue, history -------------------------------------------------------------------------


def test_enqueued_task_runs_and_history_prints_one_json_object_per_line(cli: Cli) -> None:
    """`enqueue TASK --payload` queues a run that an instance executes with that payload."""
    proc = cli.started()
    out = cli.ok("enqueue", "greet", "--app", CLOCKWORK, "--payload", '{"name": "ada", "times": 2}')
    [done] = wait_until(
        lambda: cli.history("--job", "greet", "--state", "succeeded"), "greet to succeed"
    )
    assert done["id"] in out
    assert done["result"] == {"greeting": "hello ada", "times": 2}
    assert done["kind"] == "task"
    assert done["attempt"] == 1
    assert done["error_code"] is None
    assert done["instance_id"]
    assert parse(done["started_at"]) <= parse(done["finished_at"])
    for row in cli.history():
        assert row.keys() >= HISTORY_KEYS, row
    assert cli.stop(proc) == 0, cli.logs()


def test_history_filters_by_job_state_and_limit(cli: Cli) -> None:
    """`history --job/--state/--limit` return only matching rows, newest plan time first."""
    proc = cli.started()
    cli.ok("enqueue", "boom", "--app", CLOCKWORK)
    cli.ok("enqueue", "greet", "--app", CLOCKWORK, "--payload", '{"name": "bob"}')
    wait_until(lambda: cli.history("--state", "dead"), "boom to die")
    wait_until(lambda: len(cli.history("--job", "tick", "--state", "succeeded")) >= 3, "3 ticks")
    wait_until(lambda: cli.history("--job", "greet", "--state", "succeeded"), "greet")
    assert cli.stop(proc) == 0, cli.logs()

    everything = cli.history()
    assert {r["job"] for r in everything} >= {"tick", "tock", "boom", "greet"}
    plan_times = [parse(r["plan_time"]) for r in everything]
    assert plan_times == sorted(plan_times, reverse=True)

    [dead] = cli.history("--state", "dead")
    assert (dead["job"], dead["error_code"]) == ("boom", "handler_error")
    ticks = cli.history("--job", "tick")
    assert ticks and {r["job"] for r in ticks} == {"tick"}
    assert len(ticks) == sum(r["job"] == "tick" for r in everything)
    succeeded = cli.history("--state", "succeeded")
    assert {r["state"] for r in succeeded} == {"succeeded"}
    assert "boom" not in {r["job"] for r in succeeded}

    limited = cli.history("--job", "tick", "--state", "succeeded", "--limit", "2")
    newest = [r for r in ticks if r["state"] == "succeeded"][:2]
    assert [r["id"] for r in limited] == [r["id"] for r in newest]
    assert len(cli.json_lines("history", "--limit", "1")) == 1
    text = cli.ok("history", "--job", "boom")
    assert len(text.splitlines()) == 1
    assert "dead" in text and "handler_error" in text


# -- pause, resume, trigger -------------------------------------------------------------------


def test_pause_stops_planning_a_job_and_resume_restarts_it(cli: Cli) -> None:
    """While `pause J` holds no new instant of J runs (other jobs go on); `resume J` restarts it."""
    proc = cli.started()
    assert "paused tick" in cli.ok("pause", "tick")
    paused_at = datetime.now(timezone.utc)
    assert cli.jobs()["tick"]["paused"] is True
    assert cli.jobs()["tock"]["paused"] is False
    # Already-planned instants (lookahead) and the planner's refresh may still run shortly
    # after the pause; nothing planned well after it may.
    settled = paused_at + timedelta(seconds=3)
    wait_until(
        lambda: len(succeeded_after(cli.history("--job", "tock"), "tock", settled)) >= 2,
        "tock to keep running while tick is paused",
    )
    late_ticks = [r for r in cli.history("--job", "tick") if parse(r["plan_time"]) > settled]
    assert late_ticks == []

    assert "resumed tick" in cli.ok("resume", "tick")
    resumed_at = datetime.now(timezone.utc)
    assert cli.jobs()["tick"]["paused"] is False
    wait_until(
        lambda: succeeded_after(cli.history("--job", "tick"), "tick", resumed_at),
        "tick to run again after resume",
    )
    assert cli.stop(proc) == 0, cli.logs()


def test_trigger_runs_a_job_once_now(cli: Cli) -> None:
    """`trigger J` creates one occurrence of a yearly job that a running instance executes."""
    proc = cli.started()
    assert cli.history("--job", "yearly") == []
    out = cli.ok("trigger", "yearly")
    [ran] = wait_until(
        lambda: cli.history("--job", "yearly", "--state", "succeeded"), "yearly to run"
    )
    assert ran["id"] in out
    assert ran["kind"] == "trigger"
    assert ran["result"] == "yearly ran"
    assert cli.stop(proc) == 0, cli.logs()
    assert len(cli.history("--job", "yearly")) == 1


def test_trigger_without_a_running_instance_runs_when_one_starts(cli: Cli) -> None:
    """A trigger made while no instance runs is stored and runs once an instance starts."""
    assert cli.stop(cli.started()) == 0, cli.logs()
    out = cli.ok("trigger", "yearly")
    [queued] = cli.history("--job", "yearly")
    assert queued["state"] == "scheduled"
    assert queued["id"] in out
    proc = cli.start()
    wait_until(lambda: cli.history("--job", "yearly", "--state", "succeeded"), "yearly to run")
    assert cli.stop(proc) == 0, cli.logs()


# -- bad input --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bad:
    args: tuple[str, ...]
    names: str  # the offending value the one stderr line must contain
    status: int = 2
    store: str | None = None


BAD_INPUT = {
    "pause-unknown-job": Bad(("pause", "no-such-job"), "no-such-job"),
    "resume-unknown-job": Bad(("resume", "no-such-job"), "no-such-job"),
    "trigger-unknown-job": Bad(("trigger", "no-such-job"), "no-such-job"),
    "history-bad-state": Bad(("history", "--state", "finished"), "finished"),
    "history-bad-limit": Bad(("history", "--limit", "0"), "limit 0"),
    "enqueue-invalid-json": Bad(
        ("enqueue", "greet", "--app", CLOCKWORK, "--payload", '{"name": ada}'), '{"name": ada}'
    ),
    "enqueue-json-not-an-object": Bad(
        ("enqueue", "greet", "--app", CLOCKWORK, "--payload", '["ada"]'), '["ada"]'
    ),
    "enqueue-payload-does-not-fit": Bad(
        ("enqueue", "greet", "--app", CLOCKWORK, "--payload", '{"nickname": "ada"}'), "nickname"
    ),
    "enqueue-unknown-task": Bad(("enqueue", "no_such_task", "--app", CLOCKWORK), "no_such_task"),
    "enqueue-bad-delay": Bad(
        ("enqueue", "greet", "--app", CLOCKWORK, "--payload", '{"name": "a"}', "--delay", "5pc"),
        "5pc",
    ),
    "enqueue-bad-at": Bad(
        ("enqueue", "greet", "--app", CLOCKWORK, "--payload", '{"name": "a"}', "--at", "noonish"),
        "noonish",
    ),
    "enqueue-bad-app": Bad(
        ("enqueue", "greet", "--app", f"{APPS / 'clockwork.py'}:nothing"), "clockwork.py:nothing"
    ),
    "run-missing-file": Bad(("run", "no_such_dir/app.py:app"), "no_such_dir/app.py"),
    "run-missing-module": Bad(("run", "no_such_module:app"), "no_such_module"),
    "run-missing-attribute": Bad(("run", f"{APPS / 'clockwork.py'}:nothing"), ":nothing"),
    "run-not-a-scheduler": Bad(("run", f"{APPS / 'clockwork.py'}:tick"), "clockwork.py:tick"),
    "run-bad-cron-in-app": Bad(("run", f"{APPS / 'broken_cron.py'}:app"), "61 25 * * *"),
    "run-bad-store-scheme": Bad(("run", CLOCKWORK), "bogus://x", store="bogus://x"),
}
MISSING_DIR = {
    name: Bad(args, "/nonexistent-dir", status=1, store=MISSING_DIR_STORE)
    for name, args in {
        "migrate": ("migrate",),
        "jobs": ("jobs",),
        "history": ("history",),
        "pause": ("pause", "tick"),
        "trigger": ("trigger", "tick"),
        "enqueue": ("enqueue", "greet", "--app", CLOCKWORK, "--payload", '{"name": "a"}'),
        "run": ("run", CLOCKWORK),
    }.items()
}


def check_one_line_error(done: subprocess.CompletedProcess[str], bad: Bad) -> None:
    lines = done.stderr.splitlines()
    assert done.returncode == bad.status, (done.returncode, done.stderr)
    assert len(lines) == 1, done.stderr
    assert bad.names in lines[0], lines[0]


@pytest.mark.parametrize("bad", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_exits_nonzero_with_one_line_naming_it_and_stores_nothing(
    cli: Cli, bad: Bad
) -> None:
    """Bad input exits with status 2 and one stderr line naming the value; nothing is stored."""
    check_one_line_error(cli(*bad.args, store=bad.store), bad)
    assert cli.history() == []
    assert cli.jobs() == {}


@pytest.mark.parametrize("bad", MISSING_DIR.values(), ids=MISSING_DIR.keys())
def test_store_in_a_missing_directory_fails_with_one_line_naming_it(cli: Cli, bad: Bad) -> None:
    """A SQLite store whose directory is missing exits 1 naming it, and creates nothing."""
    assert not Path("/nonexistent-dir").exists()
    check_one_line_error(cli(*bad.args, store=bad.store), bad)
    assert not Path("/nonexistent-dir").exists()


# -- the shipped example ----------------------------------------------------------------------


def test_example_app_runs_its_job_and_task(cli: Cli) -> None:
    """examples/app.py runs under `soloist run`: its job fires and an enqueued task runs."""
    example = f"{Path(__file__).parents[2] / 'examples' / 'app.py'}:app"
    proc = cli.start(example)
    wait_until(lambda: "report" in cli.jobs(), "the example to register its jobs")
    cli.ok("enqueue", "resize_image", "--app", example, "--payload", '{"path": "cat.png"}')
    done = wait_until(
        lambda: [r for r in cli.history("--state", "succeeded") if r["job"] == "resize_image"],
        "the example task to succeed",
    )
    assert done[0]["result"] == {"path": "cat.png", "width": 640, "token": 1}
    wait_until(
        lambda: [r for r in cli.history("--job", "report") if r["state"] == "succeeded"],
        "the example job to run",
        timeout=15,
    )
    assert cli.stop(proc) == 0, cli.logs()


def test_show_prints_the_attempt_log_of_an_occurrence(cli: Cli) -> None:
    """`show ID --json` gives an occurrence with one audit record per attempt; an unknown id
    exits 2 with one line naming it."""
    proc = cli.started()
    cli.ok("enqueue", "boom", "--app", CLOCKWORK)
    (dead,) = wait_until(lambda: cli.history("--job", "boom", "--state", "dead"), "boom to die")
    shown = json.loads(cli.ok("show", dead["id"], "--json"))
    assert shown["state"] == "dead"
    assert [(a["attempt"], a["outcome"], a["error_code"]) for a in shown["attempts"]] == [
        (1, "dead", "handler_error")
    ]
    assert shown["attempts"][0]["instance_id"] == dead["instance_id"]
    missing = cli("show", "f" * 32)
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0 and "f" * 32 in missing.stderr
    assert cli.stop(proc) == 0


def test_read_only_commands_refuse_a_store_that_does_not_exist(cli: Cli, tmp_path: Path) -> None:
    """A mistyped store path is an error (exit 1, one line naming it), not a new empty store."""
    typo = tmp_path / "typo.db"
    for args in (["history"], ["jobs"], ["pause", "tick"], ["trigger", "tick"], ["show", "x"]):
        done = cli(*args, store=f"sqlite:///{typo}")
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert done.stderr.strip().count("\n") == 0 and str(typo) in done.stderr
    assert not typo.exists()
