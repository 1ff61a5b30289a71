"""The ``soloist`` command: a thin adapter over the public API.

Store-only commands (``jobs``, ``history``, ``trigger``, ``pause``, ``resume``,
``migrate``) need just the store URL (``--store`` or ``SOLOIST_STORE_URL``);
``run`` and ``enqueue`` load the app (``module:attribute`` or ``path/to/file.py:attr``).
Errors print one line and exit with status 2 (bad input) or 1 (store failure).

Read-only commands (``history``, ``show``, ``status``, ``jobs``) never migrate or create
anything, on any store: a store without soloist's newest schema (a missing SQLite file,
another app's database, an empty schema or Redis prefix) exits 1 with one line naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import logging
import os
import shlex
import sys
from collections.abc import Callable, Coroutine, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from soloist import logs
from soloist.config import DEFAULT_ELECTION, MODES, parse_http_address
from soloist.errors import ConfigError, SoloistError, StoreError, StoreUnavailableError
from soloist.models import Cancelled, CancelResult, JobRecord, JSONDict, State
from soloist.reports import cluster_report, job_json
from soloist.scheduler import Scheduler
from soloist.stores import DEFAULT_STORE_URL, check_store_url, open_store
from soloist.stores.base import Store
from soloist.stores.core import checked
from soloist.stores.existing import require_schema
from soloist.stores.pages import DEFAULT_PAGE, MAX_PAGE, OUTCOMES, JobQuery, check_query
from soloist.stores.urls import mask_url
from soloist.timeline import MAX_UPCOMING

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: The values of ``--log-level`` (any case).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _store_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--store``, checked before the command runs: a URL of a scheme soloist has
    (:func:`soloist.stores.check_store_url` says which; the store checks the rest)."""
    check_store_url(value)
    return value


def _store_option(more: str = "") -> Callable[[F], F]:
    """The ``--store`` option (env SOLOIST_STORE_URL, checked when parsed); ``more`` is
    added to its help."""
    return click.option(
        "--store",
        envvar="SOLOIST_STORE_URL",
        default=DEFAULT_STORE_URL,
        show_default=True,
        callback=_store_url,
        help=f"Store URL (env SOLOIST_STORE_URL).{more}",
    )


store_option = _store_option()
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def _fail(message: str, status: int) -> NoReturn:
    """Print ``error: message`` as one line (a driver's message may span several) and
    exit with ``status``."""
    line = " ".join(part.strip() for part in message.strip().splitlines() if part.strip())
    click.echo(f"error: {line}", err=True)
    raise SystemExit(status)


class _Commands(click.Group):
    """The ``soloist`` group: every command's soloist errors and click's usage errors
    become one ``error:`` line and an exit status (2: a rejected value, 1: the store),
    never a traceback, also in commands that do not call :func:`_guard` themselves."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with _one_line_errors():
            if parent is None:
                _check_utf8(args)
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _one_line_errors():
            return super().invoke(ctx)


def _check_utf8(args: list[str]) -> None:
    """Refuse an argument that is not UTF-8 text: invalid bytes on a command line reach
    Python as lone surrogates, which no store, file or terminal can encode (a job name,
    a prefix, a URL: a traceback at the first write, or a silent miss)."""
    for arg in args:
        if any(0xD800 <= ord(c) <= 0xDFFF for c in arg):
            raise ConfigError(f"invalid argument {arg!r}: expected UTF-8 text")


@contextlib.contextmanager
def _one_line_errors() -> Iterator[None]:
    try:
        yield
    except StoreError as exc:
        _fail(str(exc), 1)
    except SoloistError as exc:
        _fail(str(exc), 2)
    except click.exceptions.NoArgsIsHelpError:
        raise  # shows the help, as asked
    except click.UsageError as exc:
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        _fail(f"{_sentence(exc.format_message())}{where}", exc.exit_code)


def _sentence(text: str) -> str:
    """Click's message as the middle of a line: no capital first, no full stop last."""
    text = text.strip().rstrip(".")
    return text[:1].lower() + text[1:]


@click.group(cls=_Commands)
@click.version_option(package_name="soloist")
def main() -> None:
    """soloist: run each planned job once across many instances."""


def load_app(spec: str) -> Scheduler:
    """Import ``module:attribute`` or ``path/file.py:attribute`` and return the Scheduler."""
    target, _, attribute = spec.partition(":")
    attribute = attribute or "app"
    sys.path.insert(0, os.getcwd())
    try:
        if target.endswith(".py") or os.sep in target:
            path = Path(target)
            if not path.is_file():
                raise ConfigError(f"invalid app {spec!r}: file {target!r} does not exist")
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            if module_spec is None or module_spec.loader is None:
                raise ConfigError(f"invalid app {spec!r}: cannot import {target!r}")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"invalid app {spec!r}: {exc}") from None
    app = getattr(module, attribute, None)
    if not isinstance(app, Scheduler):
        raise ConfigError(
            f"invalid app {spec!r}: expected 'module:attribute' naming a soloist.Scheduler, "
            f"found {type(app).__name__}"
        )
    return app


def _guard(fn: Callable[[], T]) -> T:
    """Turn soloist errors into one line on stderr and an exit status."""
    with _one_line_errors():
        return fn()


def _existing(url: str) -> str:
    """Read-only commands must not create an empty store where a path was mistyped."""
    if url.startswith("sqlite:"):
        from soloist.stores.sqlite import sqlite_path

        path = sqlite_path(url)
        if not os.path.exists(path):
            raise StoreUnavailableError(
                f"no SQLite store at {path!r}: check --store or SOLOIST_STORE_URL (a store "
                "is created by 'soloist migrate' or by a running instance)"
            )
    return url


def _with_store(
    url: str, action: Callable[[Store], Coroutine[Any, Any, T]], *, migrate: bool | None = True
) -> T:
    """``action(store)`` on the store at ``url``, migrated first; with ``migrate=False`` it
    must exist at the newest schema already, and nothing is created; None: as it is (the
    action migrates)."""

    async def go() -> T:
        store = open_store(url)
        try:
            if migrate:
                await store.migrate()
            elif migrate is not None:
                await require_schema(store)
            return await action(store)
        finally:
            await store.close()

    return _guard(lambda: asyncio.run(go()))


def _read_only_app(url: str) -> Scheduler:
    """A Scheduler for a read-only command: it never migrates or creates anything."""
    # The URL comes from --store or SOLOIST_STORE_URL: make them agree, so that the
    # Scheduler has no conflict between its argument and the environment to warn about.
    os.environ["SOLOIST_STORE_URL"] = url
    return _guard(lambda: Scheduler(url, migrate=False))


@main.command()
@click.argument("app")
@_store_option(
    " Given on the command line, it replaces the app's own store (with a warning naming both)."
)
@click.option(
    "--instance-id",
    envvar="SOLOIST_INSTANCE_ID",
    help="Default: host-pid-random. Given on the command line, it wins over the app's.",
)
@click.option(
    "--mode",
    envvar="SOLOIST_MODE",
    type=click.Choice(MODES, case_sensitive=False),
    default=None,
    help="Coordination mode. Given on the command line, it wins over the app's.",
)
@click.option(
    "--log-level",
    envvar="SOLOIST_LOG_LEVEL",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="INFO",
    show_default=True,
)
@click.option(
    "--log-format",
    envvar="SOLOIST_LOG_FORMAT",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per line with the structured fields.",
)
@click.option(
    "--http",
    envvar="SOLOIST_HTTP",
    default=None,
    metavar="[HOST:]PORT",
    help="Serve health, status, metrics and the dashboard here (env SOLOIST_HTTP; "
    "a bare port listens on 127.0.0.1).",
)
@click.option(
    "--token",
    envvar="SOLOIST_TOKEN",
    default=None,
    help="Bearer token that enables HTTP actions (env SOLOIST_TOKEN; prefer the env).",
)
@click.pass_context
def run(
    ctx: click.Context,
    app: str,
    store: str,
    instance_id: str | None,
    mode: str | None,
    log_level: str,
    log_format: str,
    http: str | None,
    token: str | None,
) -> None:
    """Run the workers of APP (module:attribute) until SIGTERM or Ctrl-C."""
    logs.configure(log_level, log_format)
    # Apps usually build Scheduler() from the environment: give it the store before
    # importing (the other options are applied to the loaded app below).
    _export_store(store)
    if http:
        _guard(lambda: parse_http_address(http))  # a bad address fails before the import
    if token is not None and not token.strip():
        click.echo("error: invalid --token: expected a non-empty string", err=True)
        raise SystemExit(2)
    scheduler = _guard(lambda: load_app(app))
    # The command line wins over what the app's Scheduler(...) was given, and over the
    # environment it saw if it was imported before (e.g. by a Django AppConfig.ready()).
    _guard(lambda: _apply_command_line(ctx, scheduler, store, instance_id, mode, http, token))
    _guard(scheduler.run)


def _export_store(store: str) -> None:
    """Give ``--store`` (typed, or from SOLOIST_STORE_URL) to the app through the
    environment, for a ``Scheduler()`` built without a store. Not the default: an app that
    names its own store must not be told that it differs from a URL nobody gave."""
    source = click.get_current_context().get_parameter_source("store")
    if source is not click.core.ParameterSource.DEFAULT:
        os.environ["SOLOIST_STORE_URL"] = store


def _apply_command_line(
    ctx: click.Context,
    scheduler: Scheduler,
    store: str,
    instance_id: str | None,
    mode: str | None,
    http: str | None,
    token: str | None,
) -> None:
    """Apply ``soloist run``'s options to the loaded app, in one
    :meth:`Scheduler.reconfigure`: ``--store``, ``--instance-id`` and ``--mode`` if typed
    on the command line (from the environment they yield to the app's own arguments, as
    in ``Scheduler(...)``), and ``--http`` and ``--token`` from either."""

    def typed(name: str) -> bool:
        return ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE

    own = scheduler.config.store_url
    new_store = store if typed("store") and store != own else None
    if new_store is not None:
        logging.getLogger("soloist").warning(
            "--store %s replaces the store %s of app %s",
            mask_url(new_store),
            mask_url(own),
            ctx.params["app"],
            extra={"action": "store_override"},
        )
    scheduler.reconfigure(
        store=new_store,
        instance_id=instance_id if typed("instance_id") else None,
        mode=mode if typed("mode") else None,
        http=http or None,
        token=token or None,
    )


@main.command()
@store_option
def migrate(store: str) -> None:
    """Create or upgrade the store's schema; says which migrations it applied."""

    async def schema(s: Store) -> list[int]:
        return await s.migrate()

    applied = _with_store(store, schema, migrate=None)
    if not applied:
        click.echo(f"store {mask_url(store)} is already at the newest schema: nothing to do")
        return
    versions = ", ".join(str(v) for v in applied)
    noun = "migration" if len(applied) == 1 else "migrations"
    click.echo(
        f"store {mask_url(store)}: applied {len(applied)} {noun} ({versions}); it is at the "
        "newest schema"
    )


@main.command()
@store_option
@json_option
def jobs(store: str, as_json: bool) -> None:
    """List jobs (defined in code and dynamic) with their next plan time."""

    async def fetch(s: Store) -> tuple[list[JobRecord], datetime]:
        return await s.job_list(), await s.now()

    records, now = _with_store(store, fetch, migrate=False)
    rows = [_job_row(r, now) for r in records]
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    if not rows:
        click.echo("no jobs")
        return
    for row in rows:
        flags = " paused" if row["paused"] else ""
        flags += " dynamic" if row["dynamic"] else ""
        click.echo(
            f"{row['name']:<24} {row['schedule']:<36} next {row['next_plan_time'] or '-'}{flags}"
        )


def _job_row(record: JobRecord, now: datetime) -> dict[str, Any]:
    # The CLI does not look up each job's last run (GET /api/jobs does).
    row = job_json(record, now)
    del row["last"]
    return row


@main.command()
@store_option
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_PAGE),
    default=DEFAULT_PAGE,
    show_default=True,
    help=f"Jobs listed (1 to {MAX_PAGE}).",
)
@click.option("--prefix", default="", help="Only jobs whose names start with this.")
@click.option("--after", default=None, help="List the jobs after this name (the next page).")
@click.option(
    "--paused/--not-paused",
    "paused",
    default=None,
    help="Only paused jobs, or only those not paused.",
)
@click.option(
    "--outcome",
    type=click.Choice(OUTCOMES),
    default=None,
    help="Only jobs whose last outcome is this ('none': never finished).",
)
@json_option
def status(
    store: str,
    limit: int,
    prefix: str,
    after: str | None,
    paused: bool | None,
    outcome: str | None,
    as_json: bool,
) -> None:
    """Live instances, the leader and its epoch, the number of jobs, and a page of jobs
    (by name) with their next plan time and last outcome. Reads a bounded amount,
    whatever the number of jobs: page on with --after."""
    query = _guard(lambda: check_query(JobQuery(after, prefix, paused, outcome, limit)))

    # What the store says about the cluster: this command is no instance, so it reports
    # none of its own (no instance id, mode or leadership of a process that runs nothing).
    async def read(s: Store) -> JSONDict:
        report = await cluster_report(checked(s), DEFAULT_ELECTION, query)
        return {"store": mask_url(store), **report}

    report = _with_store(store, read, migrate=False)
    if as_json:
        click.echo(json.dumps(report))
        return
    given = click.get_current_context().get_parameter_source("store")
    on_line = mask_url(store) if given is click.core.ParameterSource.COMMANDLINE else None
    leader = report["leader_id"] or "(none)"
    epoch = report["epoch"] if report["epoch"] is not None else "-"
    click.echo(f"leader: {leader} (epoch {epoch})")
    click.echo(f"instances ({len(report['instances'])} live):")
    for inst in report["instances"]:
        mark = " *" if inst["instance_id"] == report["leader_id"] else ""
        parts = inst.get("partitions")
        held = (
            f"  partitions {parts['spans']} ({len(parts['held'])} of {parts['count']})"
            if parts
            else ""
        )
        click.echo(
            f"  {inst['instance_id']}{mark}  mode {inst['mode']}  pid {inst['pid']} on "
            f"{inst['host']}  last seen {inst['last_seen']}{held}"
        )
    _echo_jobs(report, query, on_line)


def _echo_jobs(report: JSONDict, query: JobQuery, store: str | None) -> None:
    """The jobs part of ``soloist status``: the counts, the page, and how to go on (the
    command of the next page: every option of this one, ``store`` the ``--store`` given on
    the command line, password masked, None when it came from the environment)."""
    counts, rows = report["job_counts"], report["jobs"]
    paused = f", {counts['paused']} paused" if counts["paused"] is not None else ""
    which = f" named {query.prefix}*" if query.prefix else ""
    click.echo(f"jobs{which}: {counts['total']}{paused}")
    for row in rows:
        last = row["last"]
        outcome = "never finished"
        if last is not None:
            code = f" ({last['error_code']})" if last["error_code"] else ""
            outcome = f"last {last['state']}{code} {last['finished_at'] or last['plan_time']}"
        flag = " (paused)" if row["paused"] else ""
        click.echo(f"  {row['name']:<24} next {row['next_plan_time'] or '-'}  {outcome}{flag}")
    cursor = report["jobs_next_cursor"]
    if cursor is None:
        return
    again = f"soloist status --after {shlex.quote(cursor)}"
    if query.prefix:
        again += f" --prefix {shlex.quote(query.prefix)}"
    if query.paused is not None:
        again += " --paused" if query.paused else " --not-paused"
    if query.outcome is not None:
        again += f" --outcome {query.outcome}"
    if query.limit != DEFAULT_PAGE:
        again += f" --limit {query.limit}"
    if store is not None:
        again += f" --store {shlex.quote(store)}"
    if query.after is None and not query.filtered:
        click.echo(f"  ... and {counts['total'] - len(rows)} more: {again}")
    else:
        click.echo(f"  ... more follow: {again}")


@main.command()
@store_option
@click.option("--job", default=None, help="Only this job.")
@click.option(
    "--state",
    type=click.Choice([state.value for state in State], case_sensitive=False),
    default=None,
    help="Only this state.",
)
@click.option("--limit", default=50, show_default=True, type=int)
@json_option
def history(store: str, job: str | None, state: str | None, limit: int, as_json: bool) -> None:
    """Show what ran, when, where, and why it failed: newest plan time first. Each line
    starts with the occurrence id that ``show`` and ``retry`` take."""
    app = _read_only_app(store)
    occurrences = _guard(lambda: app.history(job=job, state=state, limit=limit))
    for occ in occurrences:
        if as_json:
            click.echo(json.dumps(occ.to_json()))
            continue
        took = f"{occ.duration.total_seconds():.3f}s" if occ.duration else "-"
        error = f" {occ.error_code}: {occ.error_message}" if occ.error_code else ""
        click.echo(
            f"{occ.id}  {occ.plan_time.isoformat()} {occ.job:<20} {occ.scope or '-':<8} "
            f"{occ.state.value:<9} attempt {occ.attempt} on {occ.instance_id or '-'} "
            f"({took}){error}"
        )


@main.command()
@click.argument("occurrence_id")
@store_option
@json_option
def show(occurrence_id: str, store: str, as_json: bool) -> None:
    """One occurrence with the audit log of its attempts."""
    app = _read_only_app(store)
    occ, attempts = _guard(lambda: app.attempts(occurrence_id))
    if as_json:
        click.echo(json.dumps({**occ.to_json(), "attempts": [a.to_json() for a in attempts]}))
        return
    click.echo(
        f"{occ.job} {occ.scope or '-'} planned {occ.plan_time.isoformat()}: {occ.state.value} "
        f"(attempt {occ.attempt} of {occ.max_attempts})"
    )
    for a in attempts:
        error = f" {a.error_code}: {a.error_message}" if a.error_code else ""
        click.echo(
            f"  attempt {a.attempt} token {a.fencing_token} on {a.instance_id or '-'} "
            f"{a.started_at.isoformat() if a.started_at else '-'} -> "
            f"{a.finished_at.isoformat()} {a.outcome}{error}"
        )


def _store_op(store: str, action: Callable[[Scheduler], object], message: str) -> None:
    app = _guard(lambda: Scheduler(_existing(store)))
    result = _guard(lambda: action(app))
    click.echo(message.format(result=result))


@main.command()
@click.argument("job")
@store_option
def trigger(job: str, store: str) -> None:
    """Run JOB once now (outside its schedule)."""
    _store_op(store, lambda app: app.trigger(job), f"triggered {job}: occurrence {{result}}")


@main.command()
@click.argument("occurrence_id")
@store_option
def retry(occurrence_id: str, store: str) -> None:
    """Run a dead occurrence again, as a new occurrence due now (the dead one stays)."""
    _store_op(
        store,
        lambda app: app.retry(occurrence_id),
        f"retrying {occurrence_id}: occurrence {{result}}",
    )


@main.command()
@click.argument("occurrence_id")
@store_option
@json_option
def cancel(occurrence_id: str, store: str, as_json: bool) -> None:
    """Cancel an occurrence: a scheduled one never runs; a running one is asked to stop
    (an async handler is cancelled, a sync one sees ctx.cancelled). Recorded as dead with
    error code 'cancelled', never retried."""
    _store_op(store, lambda app: _cancelled(app.cancel(occurrence_id), as_json), "{result}")


def _cancelled(answer: CancelResult, as_json: bool) -> str:
    """What ``soloist cancel`` prints for ``answer``."""
    if as_json:
        return json.dumps(answer.to_json())
    occ = answer.occurrence
    what = f"{occ.id} ({occ.job}, planned {occ.plan_time.isoformat()})"
    if answer.outcome is Cancelled.CANCELLED:
        return f"cancelled {what}: it will not run"
    if answer.outcome is Cancelled.REQUESTED:
        return (
            f"cancellation of {what} requested: its runner stops it within a heartbeat "
            "(a sync handler is only asked)"
        )
    return f"cancellation of {what} was already requested; it is still running"


@main.command()
@click.argument("job")
@store_option
def pause(job: str, store: str) -> None:
    """Stop planning JOB on every instance until resumed."""
    _store_op(store, lambda app: app.pause(job), f"paused {job}")


@main.command()
@click.argument("job")
@store_option
def resume(job: str, store: str) -> None:
    """Plan JOB again."""
    _store_op(store, lambda app: app.resume(job), f"resumed {job}")


@main.command()
@click.argument("job")
@click.option(
    "--start",
    required=True,
    help="First instant of the range: an RFC 3339 time with an offset, or a date (UTC).",
)
@click.option("--end", required=True, help="Last instant of the range (not in the future).")
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    help="A scope to backfill (repeatable). Default: the job's stream without a scope.",
)
@store_option
@json_option
def backfill(
    job: str, start: str, end: str, scopes: tuple[str, ...], store: str, as_json: bool
) -> None:
    """Plan JOB's instants from START to END (a past range, at most 10,000), once each:
    instants already planned, run or backfilled are not added again."""
    app = _guard(lambda: Scheduler(_existing(store)))
    done = _guard(lambda: app.backfill(job, start, end, scopes=list(scopes) or None))
    if as_json:
        click.echo(json.dumps(done.to_json()))
        return
    click.echo(
        f"backfilled {job} from {done.start.isoformat()} to {done.end.isoformat()}: "
        f"{done.instants} instant(s), {done.added} added, {done.existing} already there"
    )


@main.command(name="next")
@click.argument("job")
@click.option(
    "--count",
    default=10,
    show_default=True,
    type=click.IntRange(1, MAX_UPCOMING),
    help="How many fire times.",
)
@store_option
@json_option
def next_(job: str, count: int, store: str, as_json: bool) -> None:
    """The next fire times of JOB in its schedule's time zone, daylight-saving shifts
    marked. Writes nothing."""
    app = _read_only_app(store)
    rows = _guard(lambda: app.upcoming(job, count))
    for row in rows:
        if as_json:
            click.echo(json.dumps(row.to_json()))
            continue
        local = row.local
        mark = f"  <- {row.note}" if row.note else ""
        click.echo(
            f"{local:%Y-%m-%d %H:%M:%S} {row.to_json()['utc_offset']} {row.zone}  "
            f"({row.plan_time:%Y-%m-%dT%H:%M:%SZ}){mark}"
        )


class _EnqueueCommand(click.Command):
    """``enqueue``, which says where a payload goes when one follows ``--json`` (the
    payload flag of soloist 0.1; ``--json`` now asks for JSON output)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # click's parser consumes the list
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            if "--json" in given and any(a.lstrip().startswith("{") for a in given):
                raise click.UsageError(
                    f"{_sentence(exc.format_message())}: give the payload as --payload "
                    "'{...}' (--json only asks for JSON output)",
                    ctx,
                ) from None
            raise


@main.command(cls=_EnqueueCommand)
@click.argument("task")
@click.option(
    "--app",
    "app_spec",
    required=True,
    envvar="SOLOIST_APP",
    help="The app defining TASK (module:attribute); env SOLOIST_APP.",
)
@click.option(
    "--payload",
    default="{}",
    show_default=True,
    help="The handler's keyword arguments: a JSON object.",
)
@click.option("--delay", default=None, help="Run after this delay, e.g. 10m.")
@click.option("--at", "at_", default=None, help="Run at this RFC 3339 time.")
@click.option("--key", default=None, help="Idempotency key: at most one run per key.")
@_store_option(" Given on the command line, it replaces the app's own store.")
@json_option
@click.pass_context
def enqueue(
    ctx: click.Context,
    task: str,
    app_spec: str,
    payload: str,
    delay: str | None,
    at_: str | None,
    key: str | None,
    store: str,
    as_json: bool,
) -> None:
    """Queue one run of TASK with a JSON payload; prints the occurrence id."""
    data = _payload_object(payload)
    _export_store(store)
    app = _guard(lambda: load_app(app_spec))
    if ctx.get_parameter_source("store") is click.core.ParameterSource.COMMANDLINE:
        _guard(lambda: app.reconfigure(store=store))
    occurrence = _guard(lambda: app.enqueue(task, data, delay=delay, at=at_, key=key))
    if as_json:
        click.echo(json.dumps({"id": occurrence, "task": task}))
        return
    click.echo(f"enqueued {task}: occurrence {occurrence}")


def _payload_object(text: str) -> dict[str, Any]:
    """``--payload``: a JSON object, or exit 2 with one line naming it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        _fail(f"invalid --payload {text!r}: {exc.msg}; expected a JSON object", 2)
    if not isinstance(data, dict):
        _fail(f"invalid --payload {text!r}: expected a JSON object, e.g. '{{\"to\": 1}}'", 2)
    return data


#: ``soloist demo``'s bounds: it kills one instance, so at least two; each is a process
#: (a count by mistake must not start thousands); a run short enough to see nothing fails.
DEMO_INSTANCES = (2, 16)
DEMO_SECONDS = (5, 3600)


@main.command()
@click.option(
    "--seconds",
    default=14,
    show_default=True,
    type=click.IntRange(*DEMO_SECONDS),
    help="Length of the run.",
)
@click.option(
    "--instances",
    default=3,
    show_default=True,
    type=click.IntRange(*DEMO_INSTANCES),
    help="Instances to start (one is killed).",
)
def demo(seconds: int, instances: int) -> None:
    """Start 3 instances on one SQLite file, kill -9 one midway, check the history."""
    from soloist.demo import run_demo

    ok = run_demo(seconds=seconds, instances=instances, echo=click.echo)
    raise SystemExit(0 if ok else 1)


#: The figures of ``soloist bench --only`` (soloist_bench.config.FIGURES; the bench is
#: not importable here unless installed).
BENCH_FIGURES = ("drain", "enqueue", "lateness", "failover", "planning")
#: The drain's handler kinds and the workers' logging (soloist_bench.config.HANDLERS and
#: WORKER_LOGGING).
BENCH_HANDLERS = ("def", "async")
BENCH_WORKER_LOGGING = ("default", "quiet")


@main.group(invoke_without_command=True)
@click.option(
    "--store",
    "stores",
    multiple=True,
    help="Store URL to measure (repeatable). Default: SOLOIST_STORE_URL, else a local "
    "PostgreSQL at 127.0.0.1:5432/test if it answers, else SQLite.",
)
@click.option(
    "--json", "json_path", default=None, metavar="FILE", help="Also write every figure to FILE."
)
@click.option(
    "--tasks",
    default=10_000,
    show_default=True,
    type=click.IntRange(1),
    help="No-op tasks per drain (and rows for insert_many).",
)
@click.option(
    "--runs", default=3, show_default=True, type=click.IntRange(1), help="Repetitions (medians)."
)
@click.option(
    "--concurrency",
    multiple=True,
    type=click.IntRange(1),
    help="Slots of each drain worker process (repeatable: each value is measured). "
    "Default: 10 and 100.",
)
@click.option(
    "--handler",
    "handlers",
    multiple=True,
    type=click.Choice(BENCH_HANDLERS),
    help="The drain task's handler: a plain def or an async def (repeatable). Default: both.",
)
@click.option(
    "--worker-logging",
    default="default",
    show_default=True,
    type=click.Choice(BENCH_WORKER_LOGGING),
    help="How the drain and lateness workers log: as app.run() sets up by default (INFO "
    "lines to stderr, kept in a temporary file) or quiet (WARNING and above).",
)
@click.option(
    "--compare-src",
    default=None,
    metavar="DIR",
    help="Also measure each drain setting with workers running the soloist in DIR (the src "
    "folder of another checkout, e.g. of 'git worktree add /tmp/base COMMIT'), each run "
    "right after one of this code; reports both and their ratio. Not with memory://.",
)
@click.option(
    "--samples", default=50, show_default=True, type=click.IntRange(1), help="Lateness samples."
)
@click.option(
    "--only",
    multiple=True,
    type=click.Choice(BENCH_FIGURES),
    help="Measure only this figure (repeatable). Default: all but planning.",
)
@click.option(
    "--tick-streams",
    default=100_000,
    show_default=True,
    type=click.IntRange(1),
    help="Planning: streams in the index for the tick cost.",
)
@click.option(
    "--tick-due",
    default=100,
    show_default=True,
    type=click.IntRange(1),
    help="Planning: how many of them are due.",
)
@click.option(
    "--ticks",
    default=7,
    show_default=True,
    type=click.IntRange(1),
    help="Planning: ticks measured (median).",
)
@click.option(
    "--planning-single-schedules",
    default=10_000,
    show_default=True,
    type=click.IntRange(0),
    help="Planning: schedules one instance runs (0: skip).",
)
@click.option(
    "--planning-single-interval",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0.001),
    help="Planning: their period, in seconds.",
)
@click.option(
    "--planning-schedules",
    default=100_000,
    show_default=True,
    type=click.IntRange(0),
    help="Planning: schedules several instances run (0: skip).",
)
@click.option(
    "--planning-interval",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0.001),
    help="Planning: their period, in seconds.",
)
@click.option(
    "--planning-instances",
    default=3,
    show_default=True,
    type=click.IntRange(1),
    help="Planning: instances before one more joins.",
)
@click.option(
    "--planning-warmup",
    default=20.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Planning: seconds of warm-up.",
)
@click.option(
    "--planning-window",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Planning: seconds of each measured window.",
)
@click.pass_context
def bench(
    ctx: click.Context,
    /,
    stores: tuple[str, ...],
    json_path: str | None,
    tasks: int,
    runs: int,
    concurrency: tuple[int, ...],
    handlers: tuple[str, ...],
    worker_logging: str,
    compare_src: str | None,
    samples: int,
    only: tuple[str, ...],
    **planning: Any,
) -> None:
    """Measure executions/s, enqueue rate, lateness and failover (docs/benchmarks.md).
    Runs from a clone of the repository, where ``make install`` installs the benchmark.
    ``soloist bench operator`` measures the operator's views instead."""
    if ctx.invoked_subcommand is not None:
        return
    with _bench_installed():
        from soloist_bench import BenchConfig, bench_main, default_store_url
        from soloist_bench.compare import CompareSrcError, check_compare_src

    config = BenchConfig(
        stores=list(stores) or [default_store_url()],
        tasks=tasks,
        runs=runs,
        samples=samples,
        json_path=json_path,
        echo=click.echo,
        only=tuple(dict.fromkeys(only)),
        tick_streams=planning["tick_streams"],
        tick_due=planning["tick_due"],
        ticks=planning["ticks"],
        single_schedules=planning["planning_single_schedules"],
        single_interval=planning["planning_single_interval"],
        cluster_schedules=planning["planning_schedules"],
        cluster_interval=planning["planning_interval"],
        cluster_instances=planning["planning_instances"],
        warmup=planning["planning_warmup"],
        window=planning["planning_window"],
        worker_logging=worker_logging,
    )
    # The drain matrix: the bench's defaults unless given.
    if concurrency:
        config.concurrency = tuple(dict.fromkeys(concurrency))
    if handlers:
        config.handlers = tuple(dict.fromkeys(handlers))
    if compare_src is not None:
        try:
            config.compare_src, config.compare_commit = check_compare_src(
                compare_src, config.stores, worker_logging, config.figures()
            )
        except CompareSrcError as exc:
            raise click.UsageError(str(exc)) from None
    _guard(lambda: bench_main(config))


@contextlib.contextmanager
def _bench_installed() -> Iterator[None]:
    """Around the imports of the benchmark, which is not part of the library (not in the
    wheel): the package soloist_bench of a clone, imported here only
    (tests/unit/test_boundaries.py). Without it: one error line, exit status 2."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name != "soloist_bench":
            raise
        click.echo(
            "error: soloist bench runs from a clone of the soloist repository: there, run "
            "'make install' (or 'pip install -e ./bench') and then 'soloist bench'",
            err=True,
        )
        raise SystemExit(2) from None


@bench.command("operator")
@click.option(
    "--store",
    "stores",
    multiple=True,
    help="Store URL to measure (repeatable; PostgreSQL, Redis, SQLite or etcd). Default: "
    "SOLOIST_STORE_URL, else a local PostgreSQL at 127.0.0.1:5432/test if it answers, "
    "else SQLite.",
)
@click.option(
    "--jobs",
    default="10000,100000",
    show_default=True,
    metavar="N[,N...]",
    help="Dynamic schedules to create, one measurement per number.",
)
@click.option(
    "--requests",
    default=7,
    show_default=True,
    type=click.IntRange(1),
    help="Requests per endpoint (medians).",
)
@click.option(
    "--interval",
    default=3600.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Period of each schedule, in seconds (their instants spread over it).",
)
@click.option(
    "--json", "json_path", default=None, metavar="FILE", help="Also write every figure to FILE."
)
def bench_operator(
    stores: tuple[str, ...], jobs: str, requests: int, interval: float, json_path: str | None
) -> None:
    """Time /status, a page of /api/jobs, /metrics (and its size), /healthz and /readyz of
    one instance running N dynamic schedules (docs/benchmarks.md, Operator views)."""
    with _bench_installed():
        from soloist_bench import default_store_url
        from soloist_bench.operator import OperatorConfig, operator_main, parse_sizes
    try:
        sizes = parse_sizes(jobs)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    config = OperatorConfig(
        stores=list(stores) or [default_store_url()],
        sizes=sizes,
        requests=requests,
        interval=interval,
        json_path=json_path,
        echo=click.echo,
    )
    _guard(lambda: operator_main(config))


#: ``soloist prune --dry-run`` counts up to this many rows.
PRUNE_COUNT_LIMIT = 2**31 - 1


@main.command()
@click.option(
    "--older-than",
    default=None,
    metavar="DURATION",
    help="Delete finished occurrences that finished longer ago than this, e.g. 30d, 12h.",
)
@click.option(
    "--keep",
    default=None,
    type=click.IntRange(min=0),
    metavar="N",
    help="Delete finished occurrences beyond the newest N.",
)
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@store_option
@json_option
def prune(
    older_than: str | None, keep: int | None, dry_run: bool, store: str, as_json: bool
) -> None:
    """Delete old finished occurrences (succeeded, dead, skipped) and their attempts, in
    batches. Without --older-than and --keep: to the store URL's history_max and
    history_age. Never touches scheduled, running or failed ones, nor a job's newest
    finished one on SQLite and PostgreSQL. Creates nothing: the store must exist."""
    from soloist.durations import parse_duration
    from soloist.runtime.pruner import PRUNE_BATCH, PRUNE_PAUSE
    from soloist.stores.urls import Retention

    age = None
    if older_than is not None:
        age = _guard(lambda: parse_duration(older_than, what="--older-than", allow_zero=True))

    async def go(s: Store) -> tuple[int, datetime | None, int | None]:
        older, kept = age, keep
        if older is None and kept is None:
            # The URL's bounds: those the running instances prune to.
            bounds = getattr(s, "retention", None)
            if not isinstance(bounds, Retention) or not bounds.bounded:
                raise ConfigError(
                    f"store {mask_url(store)} sets no history bounds: give --older-than "
                    "DURATION or --keep N"
                )
            older, kept = bounds.history_age, bounds.history_max or None
        cut = await s.now() - older if older is not None else None
        if dry_run:
            return await s.history_prune(cut, kept, PRUNE_COUNT_LIMIT, dry_run=True), cut, kept
        total = 0
        while True:
            deleted = await s.history_prune(cut, kept, PRUNE_BATCH)
            total += deleted
            if deleted < PRUNE_BATCH:
                return total, cut, kept
            await asyncio.sleep(PRUNE_PAUSE)  # claims of running instances get the store

    count, cut, kept = _with_store(store, go, migrate=False)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "pruned": count,
                    "dry_run": dry_run,
                    "before": cut.isoformat() if cut is not None else None,
                    "keep": kept,
                }
            )
        )
        return
    bounds_text = " and ".join(
        part
        for part in (
            f"finished before {cut.isoformat()}" if cut is not None else "",
            f"beyond the newest {kept}" if kept is not None else "",
        )
        if part
    )
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb} {count} finished occurrence(s) {bounds_text}")
