"""The ``soloist`` command never shows a traceback: a bad value is one ``error:`` line
naming it, with exit status 2 (1: the store failed).

Most tests run the real command in this process (click's ``CliRunner`` invokes
``soloist.cli.main`` with the arguments, as the installed script does), which is fast; an
exception other than the ``SystemExit`` of an exit status fails them, as a traceback
would. One test runs the installed script as a subprocess, for the whole path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from soloist import Scheduler, every
from soloist.cli import main
from soloist.stores import DRIVERS

SOLOIST = Path(sys.executable).parent / "soloist"
PAYLOADS = f"{Path(__file__).parent / 'apps' / 'payloads.py'}:app"
#: Unset while the command runs, and put back afterwards (the CLI exports some of them).
ENV: dict[str, str | None] = {
    **{k: None for k in os.environ if k.startswith("SOLOIST_")},
    **{k: None for k in ("SOLOIST_STORE_URL", "SOLOIST_APP", "SOLOIST_MODE")},
}
#: A value for each argument or required option of a command, by parameter name.
SAMPLES = {"occurrence_id": "f" * 32, "job": "hourly", "task": "keyed", "app_spec": PAYLOADS}


def soloist(*args: str) -> Result:
    return CliRunner(env=ENV).invoke(main, list(args))


def check_error(result: Result, status: int, *names: str) -> str:
    """Exit ``status`` with one stderr line ``error: ...`` containing each of ``names``."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"a traceback: {result.exception!r}") from result.exception
    lines = result.stderr.splitlines()
    assert result.exit_code == status, (result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


def store_commands() -> dict[str, list[str]]:
    """Every command that takes ``--store``, with ``--store`` to add first, then a sample
    of each argument and required option."""
    commands: dict[str, list[str]] = {}
    for name, command in main.commands.items():
        params = {p.name: p for p in command.params}
        if "store" not in params:
            continue
        args: list[str] = []
        for param in command.params:
            if isinstance(param, click.Argument):
                args.append(SAMPLES.get(param.name or "", "x"))
            elif param.required and isinstance(param, click.Option):
                args += [param.opts[0], SAMPLES.get(param.name or "", "x")]
        commands[name] = args
    return commands


STORE_COMMANDS = store_commands()
#: A store URL whose scheme is refused, and what the error line must name.
BAD_SCHEMES = {
    "unknown-scheme": ("mysql://app@db/app", "'mysql'"),
    "no-scheme": ("garbage", "'garbage'"),
    "empty": ("", "''"),
}


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[str]:
    """A migrated SQLite store with the job ``hourly`` and one run of the task ``keyed``."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    app = Scheduler(url)

    @app.job(every("1h"))
    def hourly(ctx: object) -> None: ...

    @app.task
    def keyed(ctx: object, key: int) -> None: ...

    app.pause("hourly")  # stores the job's record, as a running instance would
    app.resume("hourly")
    app.enqueue("keyed", {"key": 1})
    app.close()
    yield url


# -- bad stores, on every command ---------------------------------------------------------------
def test_every_command_with_a_store_is_checked() -> None:
    """The loop below covers every command with --store (new ones too)."""
    assert {"history", "status", "show", "jobs", "trigger", "pause", "resume", "retry"} <= set(
        STORE_COMMANDS
    )
    assert {"migrate", "enqueue", "run"} <= set(STORE_COMMANDS)


@pytest.mark.parametrize("bad", BAD_SCHEMES.values(), ids=BAD_SCHEMES.keys())
@pytest.mark.parametrize("command", STORE_COMMANDS, ids=STORE_COMMANDS.keys())
def test_a_bad_store_scheme_is_one_line_naming_it_and_every_scheme(
    command: str, bad: tuple[str, str], tmp_path: Path
) -> None:
    """Every command with --store refuses a URL without a known scheme: exit 2, one line
    naming it and listing every scheme soloist supports; nothing is created."""
    url, names = bad
    line = check_error(soloist(command, "--store", url, *STORE_COMMANDS[command]), 2, names)
    for scheme in DRIVERS:
        assert f"'{scheme}'" in line
    assert list(tmp_path.iterdir()) == []


def test_the_password_of_a_refused_store_url_is_masked() -> None:
    """A refused URL is named with its password masked."""
    done = soloist("history", "--store", "mysql://app:s3cret@db/app")
    assert "s3cret" not in check_error(done, 2, "mysql://app:***@db/app")


#: Store URLs of a known scheme that its store refuses, and what the error must name.
BAD_URLS = {
    "redis-unknown-option": ("redis://127.0.0.1:6379/0?bogus=1", "'bogus'"),
    "redis-bad-history-max": ("redis://127.0.0.1:6379/0?history_max=lots", "'lots'"),
    "sqlite-two-slashes": ("sqlite://x.db", "'sqlite://x.db'"),
    "postgres-unknown-option": ("postgresql://127.0.0.1/test?nosuch=1", "nosuch"),
    "etcd-no-member": ("etcd://", "etcd"),
}
#: The commands that open the store with these (``run`` is tested as a subprocess).
OPENING = {
    "history": [],
    "status": [],
    "show": ["f" * 32],
    "jobs": [],
    "trigger": ["hourly"],
    "pause": ["hourly"],
    "resume": ["hourly"],
    "retry": ["f" * 32],
    "migrate": [],
    "enqueue": ["keyed", "--app", PAYLOADS, "--payload", '{"key": 1}'],
}


@pytest.mark.parametrize("bad", BAD_URLS.values(), ids=BAD_URLS.keys())
@pytest.mark.parametrize("command", OPENING, ids=OPENING.keys())
def test_a_bad_store_url_is_one_line_naming_it(command: str, bad: tuple[str, str]) -> None:
    """A URL that its store refuses (an unknown option, a malformed path) is exit 2 and
    one line naming the problem, for every command."""
    url, names = bad
    check_error(soloist(command, *OPENING[command], "--store", url), 2, names)


def test_run_with_a_bad_store_option_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    """The installed script: `run` with a Redis URL option it does not know."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLOIST_")}
    done = subprocess.run(
        [str(SOLOIST), "run", PAYLOADS, "--store", "redis://127.0.0.1:6379/0?bogus=1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "'bogus'" in errors[0], done.stderr
    assert "Traceback" not in done.stderr


# -- choices --------------------------------------------------------------------------------
CHOICES = {
    "log-level": (["run", PAYLOADS, "--log-level", "LOUD"], "'LOUD'", "debug"),
    "mode": (["run", PAYLOADS, "--mode", "solo"], "'solo'", "distributed"),
    "state": (["history", "--state", "finished"], "'finished'", "succeeded"),
}


@pytest.mark.parametrize("bad", CHOICES.values(), ids=CHOICES.keys())
def test_a_value_outside_the_choices_names_it_and_the_choices(
    bad: tuple[list[str], str, str],
) -> None:
    """--log-level, --mode and --state take one of their choices: else one line naming the
    value and the choices, exit 2."""
    args, value, choice = bad
    check_error(soloist(*args), 2, value, choice)


def test_the_help_lists_the_choices() -> None:
    """`--help` shows the values --mode, --log-level and --state take."""
    assert "[distributed|leader|local]" in soloist("run", "--help").stdout
    assert "[debug|info|warning|error|critical]" in soloist("run", "--help").stdout.lower()
    assert "scheduled|running|succeeded|failed|dead" in soloist("history", "--help").stdout


def test_choices_ignore_case(store: str) -> None:
    """`--state DEAD` is `--state dead`."""
    done = soloist("history", "--state", "SCHEDULED", "--json", "--store", store)
    assert done.exit_code == 0, done.output
    [row] = [json.loads(line) for line in done.stdout.splitlines()]
    assert (row["job"], row["state"]) == ("keyed", "scheduled")


# -- enqueue: --payload, --json --------------------------------------------------------------
def test_enqueue_takes_a_payload_whose_keys_are_named_like_its_options(store: str) -> None:
    """`--payload` keys named key, delay, at and payload reach the handler as payload; the
    options of the same names stay enqueue's own; `--json` prints the result as JSON."""
    payload = {"key": 7, "delay": "soon", "at": "noon", "payload": [1]}
    done = soloist(
        "enqueue", "keyed", "--app", PAYLOADS, "--payload", json.dumps(payload),
        "--key", "k-1", "--delay", "1h", "--json", "--store", store,
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    shown = json.loads(done.stdout)
    assert shown["task"] == "keyed"
    app = Scheduler(store, migrate=False)
    try:
        occ, _ = app.attempts(shown["id"])
    finally:
        app.close()
    assert occ.payload == payload
    again = soloist(
        "enqueue", "keyed", "--app", PAYLOADS, "--payload", '{"key": 8}', "--key", "k-1",
        "--store", store,
    )  # fmt: skip
    assert again.exit_code == 0 and shown["id"] in again.stdout  # the same key: no new run


BAD_PAYLOADS = {
    "not-json": (["--payload", '{"key": one}'], """'{"key": one}'"""),
    "not-an-object": (["--payload", "[1]"], "'[1]'"),
    "json-is-the-output-flag": (["--json", '{"key": 1}'], "--payload"),
    "missing-argument": (["--payload", '{"delay": 1}'], "key"),
}


@pytest.mark.parametrize("bad", BAD_PAYLOADS.values(), ids=BAD_PAYLOADS.keys())
def test_a_bad_payload_is_one_line(bad: tuple[list[str], str], store: str) -> None:
    """A payload that is not a JSON object, one the handler cannot take, or a payload
    after --json (now only the output flag) is exit 2 and one line saying so."""
    args, names = bad
    check_error(soloist("enqueue", "keyed", "--app", PAYLOADS, *args, "--store", store), 2, names)


HUGE = "9" * 30
ENQUEUE_KEYED = ["enqueue", "keyed", "--app", PAYLOADS, "--payload", '{"key": 1}']
OUT_OF_RANGE = {
    "enqueue-delay": ([*ENQUEUE_KEYED, "--delay", f"{HUGE}d"], HUGE),
    "enqueue-delay-over-1000-years": ([*ENQUEUE_KEYED, "--delay", "400000d"], "'400000d'"),
    "prune-older-than": (["prune", "--older-than", f"{HUGE}d"], HUGE),
}


@pytest.mark.parametrize("bad", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_a_duration_past_any_date_is_one_line(bad: tuple[list[str], str], store: str) -> None:
    """A duration no date can be moved by (past timedelta's range, or past 1000 years) is
    exit 2 and one line naming it as given, not an OverflowError."""
    args, name = bad
    check_error(soloist(*args, "--store", store), 2, name)


@pytest.mark.parametrize(
    "args",
    [["--instances", "0"], ["--instances", "1"], ["--instances", HUGE], ["--seconds", "-1"]],
    ids=["no-instance", "one-instance", "huge-count", "negative-seconds"],
)
def test_demo_refuses_counts_it_cannot_show(args: list[str]) -> None:
    """`demo` kills one of its instances, each a process: fewer than two (a ZeroDivisionError
    traceback with none), or a count that would start processes without end, or a run of
    no time is exit 2 and one line naming the option; nothing is started."""
    check_error(soloist("demo", *args), 2, args[0], args[1])


def test_a_limit_past_the_stores_integers_reads_everything(store: str) -> None:
    """`history --limit` and `prune --keep` larger than SQLite's integers ask for
    everything (no OverflowError)."""
    listed = soloist("history", "--limit", HUGE, "--store", store)
    assert listed.exit_code == 0 and len(listed.stdout.splitlines()) == 1, listed.output
    kept = soloist("prune", "--keep", HUGE, "--store", store)
    assert kept.exit_code == 0 and "deleted 0" in kept.stdout, kept.output


# -- history ids, unknown jobs ----------------------------------------------------------------
def test_history_lines_start_with_the_id_that_show_takes(store: str) -> None:
    """Each `history` line starts with the occurrence id; `show ID` finds it."""
    [line] = soloist("history", "--store", store).stdout.splitlines()
    occurrence_id = line.split()[0]
    shown = soloist("show", occurrence_id, "--json", "--store", store)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["job"] == "keyed"


def test_an_unknown_job_lists_the_jobs(store: str) -> None:
    """`trigger`/`pause`/`resume` of no job: one line listing the jobs there are."""
    for command in ("trigger", "pause", "resume"):
        check_error(soloist(command, "nightly", "--store", store), 2, "'nightly'", "hourly")


def test_a_task_name_given_as_a_job_says_to_enqueue_it(store: str) -> None:
    """The name of a task (known from its runs in the store) is not a job: use enqueue."""
    check_error(soloist("trigger", "keyed", "--store", store), 2, "is a task", "enqueue")


# -- migrate, status --------------------------------------------------------------------------
def test_migrate_says_whether_it_changed_anything(tmp_path: Path) -> None:
    """The first `migrate` of a new store lists the migrations it applied; the next one
    says there was nothing to do."""
    url = f"sqlite:///{tmp_path / 'new.db'}"
    first = soloist("migrate", "--store", url)
    assert first.exit_code == 0, first.output
    assert "applied" in first.stdout and "migrations (1, 2," in first.stdout
    second = soloist("migrate", "--store", url)
    assert second.exit_code == 0, second.output
    assert "already at the newest schema" in second.stdout and "applied" not in second.stdout


def test_status_json_describes_the_cluster_not_the_cli(store: str) -> None:
    """`status --json` reports the store's instances, leader and jobs, and nothing of the
    command's own process: no instance id, mode, leadership or workers of its own."""
    done = soloist("status", "--json", "--store", store)
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["instances"] == [] and report["leader_id"] is None
    assert [job["name"] for job in report["jobs"]] == ["hourly"]
    assert report["store"] == store
    own = {"instance_id", "mode", "running", "is_leader", "will_execute_jobs", "workers"}
    assert own.isdisjoint(report), sorted(own & set(report))


@pytest.mark.parametrize("command", [["history", "--job"], ["pause"], ["trigger"]])
def test_a_name_of_invalid_utf8_is_one_line(store: str, command: list[str]) -> None:
    """Invalid UTF-8 bytes on a command line reach Python as lone surrogates, which no
    store can encode: a job name made of them is refused by name, not a traceback."""
    check_error(soloist(*command, "job-\udcff", "--store", store), 2, "'job-\\udcff'", "UTF-8")
