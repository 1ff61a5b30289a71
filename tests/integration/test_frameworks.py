"""soloist inside web frameworks and scripts: the examples run as real OS processes.

* FastAPI: ``uvicorn`` serves ``examples/fastapi_app.py``; a request enqueues a task that
  the scheduler running in the same process executes; SIGTERM stops both gracefully.
  In-process tests drive ``soloist.contrib.asgi.lifespan`` through Starlette's TestClient.
* Django: ``manage.py soloist run`` (``examples/django_site``) runs the workers; a view
  enqueues synchronously; ``manage.py soloist status`` shows the worker.
* A plain script: ``python examples/script.py`` runs its job until SIGTERM.

Each test has its own SQLite file; results are read from the store's history, waiting with
deadlines; processes still alive at teardown are killed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from starlette.testclient import TestClient

from soloist import (
    ConfigError,
    JobContext,
    Occurrence,
    PayloadError,
    Scheduler,
    SoloistError,
    State,
    StoreUnavailableError,
)
from soloist.contrib.asgi import lifespan
from soloist.stores import open_store
from soloist.stores.base import Store
from soloist.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DJANGO_SITE = EXAMPLES / "django_site"
APPS = Path(__file__).parent / "apps"
DEADLINE_S = 30.0
EXIT_S = 10.0
UVICORN = [sys.executable, "-m", "uvicorn", "fastapi_app:api", "--app-dir", str(EXAMPLES)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Proc:
    """One OS process of the test, its output in a log file."""

    def __init__(
        self, name: str, argv: list[str], cwd: Path, env: dict[str, str], log_dir: Path
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        with open(self.log_path, "wb") as log:
            self.popen = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env
            )

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            raise AssertionError(f"{self.name} exited early; its log:\n{self.log()}")

    def terminate(self) -> int:
        """SIGTERM, then the exit status within EXIT_S seconds (fails the test after)."""
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=EXIT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} did not exit within {EXIT_S}s of SIGTERM:\n{self.log()}"
            ) from None


class World:
    """A temp directory with one SQLite store, the processes started against it, and a
    reader of its history."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.url = f"sqlite:///{workdir / 'soloist.db'}"
        self.procs: list[Proc] = []
        self.store: Store = open_store(self.url)
        # The schema exists before any process starts: polling never takes the write lock.
        asyncio.run(self.store.migrate())

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SOLOIST_", "DJANGO_"))}
        return env | {"PYTHONUNBUFFERED": "1", "SOLOIST_STORE_URL": self.url} | extra

    def start(self, name: str, argv: list[str], cwd: Path | None = None) -> Proc:
        proc = Proc(name, argv, cwd or self.workdir, self.env(), self.workdir)
        self.procs.append(proc)
        return proc

    def run(self, argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
        """A short command to its end (30 s at most)."""
        return subprocess.run(
            argv, capture_output=True, text=True, cwd=cwd, env=self.env(**env), timeout=30
        )

    def history(self, job: str) -> list[Occurrence]:
        return asyncio.run(self.store.occurrence_list(job=job, limit=1000))

    def succeeded(self, job: str) -> list[Occurrence]:
        return [o for o in self.history(job) if o.state is State.SUCCEEDED]

    def close(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.popen.kill()
            proc.popen.wait(timeout=10)
            print(f"----- {proc.name} (exit {proc.popen.returncode}) -----\n{proc.log()}")
        asyncio.run(self.store.close())


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


def get_json(url: str) -> Any:
    """The JSON body of a 200 answer to GET ``url``, or None while nothing answers."""
    try:
        response = httpx.get(url, timeout=5)
    except httpx.TransportError:
        return None
    return response.json() if response.status_code == 200 else None


def started(proc: Proc, marker: str) -> bool:
    proc.check_alive()
    return marker in proc.log()


# -- FastAPI under uvicorn -----------------------------------------------------------------
def test_fastapi_example_runs_an_enqueued_task_and_stops_on_sigterm(world: World) -> None:
    """Under uvicorn, POST /signup queues a task that the app's own scheduler runs, and
    SIGTERM stops uvicorn and the scheduler gracefully (exit 0)."""
    port = free_port()
    server = world.start(
        "uvicorn",
        [*UVICORN, "--host", "127.0.0.1", "--port", str(port)],
    )
    wait_until(lambda: started(server, "Application startup complete"), "uvicorn", DEADLINE_S)
    assert "instance " in server.log() and " started (mode distributed" in server.log()

    response = httpx.post(
        f"http://127.0.0.1:{port}/signup", json={"email": "ada@example.com"}, timeout=10
    )
    assert response.status_code == 200, response.text
    occurrence_id = response.json()["occurrence"]

    done = wait_until(lambda: world.succeeded("send_welcome"), "the task to run", DEADLINE_S)
    assert [o.id for o in done] == [occurrence_id]
    assert done[0].result == {"to": "ada@example.com"}
    # The dashboard's app, mounted under /soloist, reports on this very scheduler.
    status = httpx.get(f"http://127.0.0.1:{port}/soloist/status", timeout=10).json()
    assert status["instance_id"] == done[0].instance_id and status["running"] is True

    # uvicorn >= 0.29 re-raises the signal it handled once it has shut down gracefully.
    assert server.terminate() in (0, -signal.SIGTERM)
    log = server.log()
    assert "Application shutdown complete" in log and "Finished server process" in log
    assert log.index("stopping: no new claims") < log.index("Application shutdown complete")
    assert " stopped" in log.split("stopping: no new claims", 1)[1]


# -- the lifespan, in process ----------------------------------------------------------------
def soloist_threads(before: set[threading.Thread]) -> list[str]:
    """soloist's threads that did not exist at ``before``."""
    return [t.name for t in set(threading.enumerate()) - before if t.name.startswith("soloist")]


def web_app(scheduler: Scheduler, **options: Any) -> FastAPI:
    """A FastAPI app with the soloist lifespan and an async and a sync enqueueing route."""
    api = FastAPI(lifespan=lifespan(scheduler, **options))

    @api.post("/async")
    async def enqueue_async(name: str) -> dict[str, str]:
        return {"occurrence": await scheduler.aenqueue("greet", {"name": name})}

    @api.post("/sync")
    def enqueue_sync(name: str) -> dict[str, str]:  # FastAPI runs it in a worker thread
        return {"occurrence": scheduler.enqueue("greet", {"name": name})}

    return api


def greeter(tmp_path: Path) -> Scheduler:
    scheduler = Scheduler(f"sqlite:///{tmp_path / 'soloist.db'}", poll_interval="100ms")

    @scheduler.task
    def greet(ctx: JobContext, name: str) -> str:
        return f"hello {name}"

    return scheduler


def test_lifespan_starts_the_runtime_with_the_app_and_stops_it_after(tmp_path: Path) -> None:
    """The lifespan starts the runtime at app startup (tasks enqueued by async and sync
    routes run) and stops it at shutdown, leaving no soloist thread behind."""
    before = set(threading.enumerate())
    scheduler = greeter(tmp_path)
    assert scheduler.runtime is None
    with TestClient(web_app(scheduler)) as client:
        runtime = scheduler.runtime
        assert runtime is not None and runtime.started.is_set()
        ids = {
            client.post(f"/{kind}", params={"name": kind}).json()["occurrence"]
            for kind in ("async", "sync")
        }

        def both_ran() -> bool:
            return {o.id for o in scheduler.history("greet", "succeeded")} == ids

        wait_until(both_ran, "both tasks to run", DEADLINE_S)
    assert scheduler.runtime is None
    wait_until(lambda: not soloist_threads(before), "the worker threads to end", EXIT_S)


def test_lifespan_without_workers_only_enqueues(tmp_path: Path) -> None:
    """``workers=False``: the web process plans and runs nothing, but its async and sync
    routes still enqueue (for workers elsewhere)."""
    scheduler = greeter(tmp_path)
    with TestClient(web_app(scheduler, workers=False)) as client:
        assert scheduler.runtime is None
        for kind in ("async", "sync"):
            response = client.post(f"/{kind}", params={"name": kind})
            assert response.status_code == 200, response.text
    queued = scheduler.history("greet")
    assert sorted(o.payload["name"] for o in queued) == ["async", "sync"]
    assert {o.state for o in queued} == {State.SCHEDULED}


def test_lifespan_wraps_the_users_own_lifespan_and_passes_its_state(tmp_path: Path) -> None:
    """``around=``: the user's lifespan runs inside the scheduler's (it can enqueue at
    startup), and the state it yields reaches the requests."""
    scheduler = greeter(tmp_path)
    events: list[str] = []

    @asynccontextmanager
    async def mine(app: FastAPI) -> AsyncIterator[dict[str, str]]:
        events.append(f"startup, runtime started: {scheduler.runtime is not None}")
        await scheduler.aenqueue("greet", {"name": "at startup"})
        yield {"greeting": "hi"}
        events.append(f"shutdown, runtime still there: {scheduler.runtime is not None}")

    api = FastAPI(lifespan=lifespan(scheduler, around=mine))

    @api.get("/state")
    async def state(request: Request) -> dict[str, str]:
        return {"greeting": request.state.greeting}

    with TestClient(api) as client:
        assert client.get("/state").json() == {"greeting": "hi"}
        wait_until(lambda: scheduler.history("greet", "succeeded"), "the task", DEADLINE_S)
    assert events == [
        "startup, runtime started: True",
        "shutdown, runtime still there: True",
    ]
    assert scheduler.runtime is None


def test_lifespan_fails_the_startup_when_the_store_cannot_be_opened() -> None:
    """A store that cannot be opened fails the app's startup with the store error (so a
    bad URL stops a deploy), and leaves nothing running."""
    before = set(threading.enumerate())
    scheduler = Scheduler("sqlite:////nonexistent-dir/x.db")
    with (
        pytest.raises(StoreUnavailableError, match="/nonexistent-dir"),
        TestClient(FastAPI(lifespan=lifespan(scheduler))),
    ):
        pass
    assert scheduler.runtime is None and not soloist_threads(before)


def test_lifespan_refuses_what_is_not_a_scheduler() -> None:
    """A wrong argument is refused when the app is defined, naming the value."""
    with pytest.raises(TypeError, match=r"invalid scheduler 'app.tasks:app'"):
        lifespan("app.tasks:app")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"invalid around 42"):
        lifespan(Scheduler("memory://"), around=42)  # type: ignore[arg-type]


# -- Django ----------------------------------------------------------------------------------
def manage(*args: str) -> list[str]:
    return [sys.executable, str(DJANGO_SITE / "manage.py"), *args]


SIGNUP = (
    "from django.test import Client; "
    "r = Client().post('/signup', {'email': 'ada@example.com'}); "
    "print(r.status_code, r.content.decode())"
)


def test_django_worker_runs_a_task_enqueued_by_a_view_once(world: World) -> None:
    """``manage.py soloist run`` runs the workers (options such as ``--http`` pass through);
    a view's sync ``enqueue`` is run once by them; ``manage.py soloist status`` lists the
    worker; SIGTERM stops it (exit 0)."""
    port = free_port()
    run = ["run", "--instance-id", "django-w1", "--http", f"127.0.0.1:{port}"]
    worker = world.start("django-worker", manage("soloist", *run), DJANGO_SITE)
    wait_until(lambda: started(worker, "instance django-w1 started"), "worker", DEADLINE_S)
    status = wait_until(lambda: get_json(f"http://127.0.0.1:{port}/status"), "--http", EXIT_S)
    assert status["instance_id"] == "django-w1"

    view = world.run(manage("shell", "-c", SIGNUP), DJANGO_SITE)
    assert view.returncode == 0, view.stderr
    status, body = view.stdout.strip().splitlines()[-1].split(" ", 1)
    assert status == "200", body
    occurrence_id = json.loads(body)["occurrence"]

    done = wait_until(lambda: world.succeeded("send_welcome"), "the task to run", DEADLINE_S)
    assert [(o.id, o.attempt, o.instance_id) for o in done] == [(occurrence_id, 1, "django-w1")]
    assert len(world.history("send_welcome")) == 1

    shown = world.run(manage("soloist", "status"), DJANGO_SITE)
    assert shown.returncode == 0, shown.stderr
    assert "django-w1" in shown.stdout

    assert worker.terminate() == 0
    assert "instance django-w1 stopped" in worker.log()


def test_django_views_enqueue_concurrently_under_runserver(world: World) -> None:
    """Under ``manage.py runserver`` (a thread per request), concurrent requests whose view
    calls the sync ``enqueue`` all succeed, each queueing its task once."""
    port = free_port()
    site = world.start(
        "runserver", manage("runserver", "--noreload", f"127.0.0.1:{port}"), DJANGO_SITE
    )
    wait_until(lambda: started(site, "Quit the server with"), "runserver", DEADLINE_S)

    def signup(n: int) -> httpx.Response:
        data = {"email": f"user{n}@example.com"}
        return httpx.post(f"http://127.0.0.1:{port}/signup", data=data, timeout=30)

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(signup, range(40)))
    assert [r.status_code for r in responses] == [200] * 40, [r.text for r in responses]
    ids = {r.json()["occurrence"] for r in responses}
    queued = world.history("send_welcome")
    assert len(ids) == 40 and {o.id for o in queued} == ids
    assert sorted(o.payload["to"] for o in queued) == sorted(
        f"user{n}@example.com" for n in range(40)
    )


def test_django_command_names_the_missing_setting(world: World) -> None:
    """Without ``SOLOIST_APP`` the command exits 2 with a message naming the setting and an
    example value."""
    done = world.run(
        manage("soloist", "status"),
        world.workdir,
        DJANGO_SETTINGS_MODULE="fw_django_nosetting",
        PYTHONPATH=str(APPS),
    )
    assert done.returncode == 2, done.stderr
    assert "settings.SOLOIST_APP is not set" in done.stderr
    assert 'SOLOIST_APP = "myproject.tasks:app"' in done.stderr


# -- a plain script --------------------------------------------------------------------------
def test_plain_script_runs_its_job_and_stops_on_sigterm(world: World) -> None:
    """``python examples/script.py`` runs its recurring job and stops gracefully on
    SIGTERM (exit 0), logging that it stopped."""
    script = world.start("script", [sys.executable, str(EXAMPLES / "script.py")])
    wait_until(lambda: started(script, " started (mode"), "the script to start", DEADLINE_S)
    wait_until(lambda: world.succeeded("tick"), "a tick to run", DEADLINE_S)
    assert script.terminate() == 0
    assert " stopped" in script.log().split("stopping: no new claims", 1)[1]


# -- Django: database connections around handlers; explicit run options --------------------
def django_db_env(world: World, db_url: str, **extra: str) -> dict[str, str]:
    """The environment of a ``manage.py soloist run`` of the ``fw_django_db`` settings."""
    return world.env(
        DJANGO_SETTINGS_MODULE="fw_django_db", PYTHONPATH=str(APPS), FW_DB_URL=db_url, **extra
    )


def start_django_worker(world: World, env: dict[str, str], *run_args: str) -> Proc:
    proc = Proc(
        "django-db-worker", manage("soloist", "run", *run_args), DJANGO_SITE, env, world.workdir
    )
    world.procs.append(proc)
    wait_until(lambda: started(proc, " started (mode"), "the worker to start", DEADLINE_S)
    return proc


def probes(url: str) -> Scheduler:
    """A scheduler that enqueues the probes of ``fw_django_tasks`` into ``url``."""
    scheduler = Scheduler(url)

    @scheduler.task
    def probe(ctx: JobContext) -> None: ...

    @scheduler.task
    async def aprobe(ctx: JobContext) -> None: ...

    return scheduler


def run_probe(world: World, scheduler: Scheduler, task: str) -> Occurrence:
    """Enqueue ``task``, wait for its outcome and return it (it must have succeeded)."""
    occurrence_id = scheduler.enqueue(task)

    def finished() -> Occurrence | None:
        found = [o for o in world.history(task) if o.id == occurrence_id]
        return found[0] if found and found[0].state in (State.SUCCEEDED, State.DEAD) else None

    occ = wait_until(finished, f"{task} to finish", DEADLINE_S)
    assert occ.state is State.SUCCEEDED, (occ.error_code, occ.error_message)
    return occ


@pytest.mark.parametrize("task", ["probe", "aprobe"])
def test_django_worker_closes_connections_past_conn_max_age(world: World, task: str) -> None:
    """With ``CONN_MAX_AGE = 0``, each run of a sync or async handler under ``manage.py
    soloist run`` finds its thread's database connection closed by the previous run, as
    a request would (not left open in the worker thread)."""
    env = django_db_env(world, f"sqlite:///{world.workdir / 'django.db'}", FW_CONN_MAX_AGE="0")
    start_django_worker(world, env)
    scheduler = probes(world.url)
    try:
        results = [run_probe(world, scheduler, task).result for _ in range(3)]
    finally:
        scheduler.close()
    assert all(isinstance(r, dict) for r in results), results
    threads = [r["thread"] for r in results]  # type: ignore[index]
    assert len(set(threads)) < len(threads), "no two runs shared a thread: nothing proven"
    assert [r["fresh"] for r in results] == [True] * 3  # type: ignore[index]


@pytest.mark.parametrize("task", ["probe", "aprobe"])
def test_django_worker_recovers_from_a_connection_the_database_dropped(
    world: World, postgres_dsn: str, task: str
) -> None:
    """With persistent connections (``CONN_MAX_AGE = None``, ``CONN_HEALTH_CHECKS``), a
    PostgreSQL connection terminated by the server between two runs does not fail the next
    run of a sync or async handler: it gets a new connection, as a request would."""
    import psycopg

    env = django_db_env(world, postgres_dsn, FW_CONN_MAX_AGE="none")
    start_django_worker(world, env)
    scheduler = probes(world.url)
    try:
        first = run_probe(world, scheduler, task).result
        assert isinstance(first, dict) and isinstance(first["pid"], int), first
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            row = admin.execute("SELECT pg_terminate_backend(%s)", [first["pid"]]).fetchone()
            assert row == (True,)
        second = run_probe(world, scheduler, task).result
    finally:
        scheduler.close()
    assert isinstance(second, dict) and second["thread"] == first["thread"], (first, second)
    assert second["pid"] != first["pid"]


def test_run_options_win_over_an_app_imported_before_with_its_own(world: World) -> None:
    """``manage.py soloist run --store --instance-id --mode`` win over the arguments of an
    app imported before the command read them (by an AppConfig.ready()): the worker runs
    under that identity (its status and metrics say so), claims from that store, and warns
    that the app's own store was replaced."""
    app_store = f"sqlite:///{world.workdir / 'app-own.db'}"
    env = django_db_env(world, f"sqlite:///{world.workdir / 'django.db'}", FW_APP_STORE=app_store)
    port = free_port()
    run = ["--store", world.url, "--instance-id", "cli-w1", "--mode", "local"]
    worker = start_django_worker(world, env, *run, "--http", f"127.0.0.1:{port}")
    assert "instance cli-w1 started (mode local" in worker.log()
    assert f"--store {world.url} replaces the store {app_store}" in worker.log()
    status = wait_until(lambda: get_json(f"http://127.0.0.1:{port}/status"), "--http", EXIT_S)
    assert (status["instance_id"], status["mode"]) == ("cli-w1", "local")
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    assert 'soloist_instance_info{instance_id="cli-w1",mode="local"} 1.0' in metrics

    scheduler = probes(world.url)
    try:
        assert run_probe(world, scheduler, "probe").instance_id == "cli-w1"
    finally:
        scheduler.close()
    assert worker.terminate() == 0
    assert not Path(app_store.removeprefix("sqlite:///")).exists()


def test_run_options_from_the_environment_do_not_override_the_apps_arguments(
    world: World,
) -> None:
    """``soloist run``: ``SOLOIST_INSTANCE_ID`` in the environment yields to the app's own
    ``instance_id=`` (arguments win over the environment), while ``--mode`` typed on the
    command line wins over the app's ``mode=``."""
    env = world.env(PYTHONPATH=str(APPS), SOLOIST_INSTANCE_ID="from-env")
    argv = [sys.executable, "-m", "soloist", "run", "fw_django_tasks:app", "--mode", "local"]
    proc = Proc("soloist-run", argv, world.workdir, env, world.workdir)
    world.procs.append(proc)
    wait_until(lambda: started(proc, " started (mode"), "the worker to start", DEADLINE_S)
    assert "instance from-app started (mode local" in proc.log()
    assert "replaces the store" not in proc.log()
    assert proc.terminate() == 0


def test_wrap_handlers_wraps_each_handler_once_and_keeps_it_findable(tmp_path: Path) -> None:
    """``wrap_handlers`` wraps the handlers registered before and after it, once even if
    installed twice; ``enqueue(fn)`` still finds a wrapped handler and checks its payload
    against the handler's own signature; the runtime runs the wrapped handler."""
    scheduler = greeter(tmp_path)
    calls: list[str] = []

    def tracing(handler: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(handler)
        def run(*args: Any, **kwargs: Any) -> Any:
            calls.append(handler.__name__)
            return handler(*args, **kwargs)

        return run

    scheduler.wrap_handlers(tracing)
    scheduler.wrap_handlers(tracing)

    @scheduler.task
    def shout(ctx: JobContext, word: str) -> str:
        return word.upper()

    with pytest.raises(PayloadError, match="shout"):
        scheduler.enqueue(shout, {"words": "hi"})
    with TestClient(FastAPI(lifespan=lifespan(scheduler))):
        scheduler.enqueue(shout, {"word": "hi"})
        scheduler.enqueue("greet", {"name": "ada"})
        wait_until(lambda: len(scheduler.history(state="succeeded")) == 2, "both tasks", DEADLINE_S)
    assert sorted(calls) == ["greet", "shout"]
    with pytest.raises(ConfigError, match="invalid wrapper 42"):
        scheduler.wrap_handlers(42)  # type: ignore[arg-type]


def test_reconfigure_replaces_identity_and_store_before_start_only(tmp_path: Path) -> None:
    """``reconfigure`` sets a new instance id, mode and store (and metrics with that
    identity) before start, refuses bad values naming them, and refuses once started."""
    scheduler = greeter(tmp_path)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    scheduler.reconfigure(store=other, instance_id="w9", mode="local")
    assert (scheduler.config.store_url, scheduler.instance_id) == (other, "w9")
    assert scheduler.config.mode == "local"
    assert 'instance_id="w9",mode="local"' in scheduler.metrics.exposition().decode()
    with pytest.raises(ConfigError, match="invalid mode 'solo'"):
        scheduler.reconfigure(mode="solo")
    with pytest.raises(ConfigError, match="'ftp://x'"):
        scheduler.reconfigure(store="ftp://x")
    with (
        TestClient(FastAPI(lifespan=lifespan(scheduler))),
        pytest.raises(SoloistError, match="has started"),
    ):
        scheduler.reconfigure(instance_id="w10")
    assert (tmp_path / "other.db").exists() and scheduler.instance_id == "w9"
