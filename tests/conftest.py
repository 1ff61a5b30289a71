"""Fixtures shared by every tier: a PostgreSQL server for the tests of the PostgreSQL store
(and, below, a Redis server and an etcd server, found the same way).

``postgres_dsn`` (once per session) finds a server, in this order:

1. ``SOLOIST_TEST_PG_DSN`` (a ``postgresql://`` URL), used as given: if it does not answer,
   the tests that need it fail;
2. a local server with trust authentication: ``postgresql://127.0.0.1:5432/test``, then
   ``postgresql:///test`` through the default Unix socket;
3. a throwaway server made from local binaries (``initdb`` + ``pg_ctl`` on a free port in a
   temporary directory, stopped at the end of the session); initdb refuses to run as root,
   so as root it runs as the ``postgres`` user through ``runuser``;
4. otherwise the tests are skipped with the reason, except with ``CI=true``, where they fail:
   a skip in CI is a defect.

Each test isolates its data in a fresh schema (``t_<hex>``) dropped afterwards.
"""

from __future__ import annotations

import http.client
import json
import os
import pwd
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from glob import glob
from pathlib import Path

import pytest

import ci
from chaos.servers import EtcdProcess, Unavailable
from soloist.testing.isolated import IsolatedStores

LOCAL_DSNS = ("postgresql://127.0.0.1:5432/test", "postgresql:///test")


def pg_unreachable(dsn: str) -> str | None:
    """None if ``dsn`` answers a query, else why not."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip()
    return None


def _masked(dsn: str) -> str:
    return re.sub(r"(://[^:/?#@]*:)[^@/?#]*@", r"\1***@", dsn)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _find_initdb() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve()
    # Debian keeps the server binaries out of PATH, one directory per major version.
    candidates = sorted(glob("/usr/lib/postgresql/*/bin/initdb"), key=_version, reverse=True)
    return Path(candidates[0]) if candidates else None


def _version(path: str) -> int:
    match = re.search(r"/postgresql/(\d+)/", path)
    return int(match.group(1)) if match else 0


def start_throwaway_server() -> tuple[str, Callable[[], None]] | str:
    """Start a private server; return (its DSN, a function that stops and deletes it), or
    the reason it could not be started."""
    initdb = _find_initdb()
    if initdb is None:
        return "no initdb found (PATH, /usr/lib/postgresql/*/bin)"
    pg_ctl = initdb.parent / "pg_ctl"
    as_user: list[str] = []
    workdir = Path(tempfile.mkdtemp(prefix="soloist-pg-"))
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            owner = None
        if runuser is None or owner is None:
            shutil.rmtree(workdir, ignore_errors=True)
            return "running as root, and no 'postgres' user or runuser to run initdb as"
        os.chown(workdir, owner.pw_uid, owner.pw_gid)
        as_user = [runuser, "-u", "postgres", "--"]
    data, port = workdir / "data", _free_port()
    options = f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c fsync=off"
    steps = [
        [str(initdb), "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"],
        [str(pg_ctl), "-D", str(data), "-l", str(workdir / "log"), "-o", options, "-w", "start"],
    ]
    for step in steps:
        done = subprocess.run(as_user + step, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            shutil.rmtree(workdir, ignore_errors=True)
            return f"{Path(step[0]).name} failed: {(done.stderr or done.stdout).strip()}"

    def stop() -> None:
        stopping = [str(pg_ctl), "-D", str(data), "-m", "immediate", "stop"]
        subprocess.run(as_user + stopping, capture_output=True, timeout=60)
        shutil.rmtree(workdir, ignore_errors=True)

    return f"postgresql://postgres@127.0.0.1:{port}/postgres", stop


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The URL of a PostgreSQL server for this session (see the module docstring)."""
    explicit = os.environ.get("SOLOIST_TEST_PG_DSN")
    if explicit:
        problem = pg_unreachable(explicit)
        if problem is not None:
            pytest.fail(f"SOLOIST_TEST_PG_DSN={_masked(explicit)} does not answer: {problem}")
        yield explicit
        return
    for dsn in LOCAL_DSNS:
        if pg_unreachable(dsn) is None:
            yield dsn
            return
    started = start_throwaway_server()
    if not isinstance(started, str):
        dsn, stop = started
        try:
            yield dsn
        finally:
            stop()
        return
    reason = (
        "PostgreSQL TESTS NOT RUN: no server. Set SOLOIST_TEST_PG_DSN=postgresql://..., run "
        f"one at {' or '.join(LOCAL_DSNS)} with trust auth, or install initdb/pg_ctl "
        f"({started})"
    )
    ci.missing(reason)


@pytest.fixture
def make_postgres_url(postgres_dsn: str) -> Iterator[Callable[[], str]]:
    """Makes store URLs on the session's server, each in a fresh schema (``t_<hex>``);
    every schema made is dropped afterwards."""
    with IsolatedStores(postgres_dsn, label="t") as isolated:
        yield isolated.url


@pytest.fixture
def postgres_url(make_postgres_url: Callable[[], str]) -> str:
    """A store URL on the session's server, in a fresh schema of its own."""
    return make_postgres_url()


# -- Redis ----------------------------------------------------------------------------------
# ``redis_server`` (once per session) finds a server as ``postgres_dsn`` does: the URL in
# ``SOLOIST_TEST_REDIS_URL``; else 127.0.0.1:6379 if it answers PING; else a throwaway
# ``redis-server`` from the local binary on a free port (no persistence, stopped at the end
# of the session); else a loud skip, or a failure with ``CI=true``. Each test gets a fresh
# key prefix whose keys are deleted afterwards.
LOCAL_REDIS = "redis://127.0.0.1:6379/0"


def redis_unreachable(url: str) -> str | None:
    """None if ``url`` answers PING, else why not."""
    import redis

    try:
        with redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3) as client:
            client.ping()
    except redis.RedisError as exc:
        return str(exc).strip() or type(exc).__name__
    return None


def start_throwaway_redis() -> tuple[str, Callable[[], None]] | str:
    """Start a private redis-server; return (its URL, a function that stops it), or the
    reason it could not be started."""
    binary = shutil.which("redis-server")
    if binary is None:
        return "no redis-server in PATH"
    workdir = Path(tempfile.mkdtemp(prefix="soloist-redis-"))
    port = _free_port()
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(workdir)]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"redis://127.0.0.1:{port}/0"

    def stop() -> None:
        proc.kill()
        proc.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)

    deadline = time.monotonic() + 20
    problem = redis_unreachable(url)
    while problem is not None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        problem = redis_unreachable(url)
    if problem is not None:
        stop()
        return f"redis-server did not answer on port {port}: {problem}"
    return url, stop


def session_server(
    explicit: str | None,
    variable: str,
    local: str,
    unreachable: Callable[[str], str | None],
    start: Callable[[], tuple[str, Callable[[], None]] | str],
    missing: str,
) -> Iterator[str]:
    """Yield the URL of a server for the session: ``explicit``, the value of the
    environment variable ``variable`` (it must answer), else ``local`` if it answers, else
    one ``start`` made (stopped afterwards), else skip naming ``missing`` and why (fail
    with ``CI=true``)."""
    if explicit:
        problem = unreachable(explicit)
        if problem is not None:
            pytest.fail(f"{variable}={_masked(explicit)} does not answer: {problem}")
        yield explicit
        return
    if unreachable(local) is None:
        yield local
        return
    started = start()
    if not isinstance(started, str):
        url, stop = started
        try:
            yield url
        finally:
            stop()
        return
    ci.missing(f"{missing} ({started})")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """The URL of a Redis server for this session (see the comment above)."""
    yield from session_server(
        os.environ.get("SOLOIST_TEST_REDIS_URL"),
        "SOLOIST_TEST_REDIS_URL",
        LOCAL_REDIS,
        redis_unreachable,
        start_throwaway_redis,
        "Redis TESTS NOT RUN: no server. Set SOLOIST_TEST_REDIS_URL=redis://..., run one at "
        f"{LOCAL_REDIS}, or install redis-server",
    )


@pytest.fixture
def make_redis_url(redis_server: str) -> Iterator[Callable[[], str]]:
    """Makes store URLs on the session's server, each with a fresh key prefix
    (``t-<hex>``); the keys of every prefix made are deleted afterwards."""
    with IsolatedStores(redis_server, label="t") as isolated:
        yield isolated.url


@pytest.fixture
def redis_url(make_redis_url: Callable[[], str]) -> str:
    """A store URL on the session's server, with a fresh key prefix of its own."""
    return make_redis_url()


# -- etcd -----------------------------------------------------------------------------------
# ``etcd_server`` (once per session) finds a server as ``redis_server`` does: the URL in
# ``SOLOIST_TEST_ETCD_URL``; else 127.0.0.1:2379 if it answers ``GET /health``; else a
# throwaway one-member ``etcd`` from the local binary on free client and peer ports with a
# temporary data directory (:class:`chaos.servers.EtcdProcess`, stopped and deleted at the
# end of the session); else a loud skip, or a failure with ``CI=true``. The health check is
# plain HTTP(S), so that this file needs no etcd driver. Each test gets a fresh key prefix
# whose keys are deleted afterwards.
LOCAL_ETCD = "etcd://127.0.0.1:2379"


def etcd_unreachable(url: str) -> str | None:
    """None if the first endpoint of ``url`` answers ``GET /health`` with
    ``{"health": "true"}``, else why not (``etcds://``: over TLS with the URL's ``ca``,
    ``cert`` and ``key``)."""
    scheme, _, rest = url.partition("://")
    location, _, query = rest.partition("?")
    endpoint = location.rstrip("/").rpartition("@")[2].split(",")[0]
    if not re.search(r"(^[^\[]*|\]):\d+$", endpoint):  # host, [v6]: no port
        endpoint += ":2379"
    health = f"{'https' if scheme == 'etcds' else 'http'}://{endpoint}/health"
    try:
        context = None
        if scheme == "etcds":
            options = dict(urllib.parse.parse_qsl(query))
            context = ssl.create_default_context(cafile=options.get("ca"))
            if options.get("cert"):
                context.load_cert_chain(options["cert"], options.get("key"))
        with urllib.request.urlopen(health, timeout=3, context=context) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:  # 503 with a body: not healthy (no leader...)
        return f"GET {health}: {exc.code} {exc.read()[:200]!r}"
    except (OSError, http.client.HTTPException) as exc:
        return f"GET {health}: {exc}"
    try:
        healthy = json.loads(body).get("health") == "true"
    except (ValueError, AttributeError):
        healthy = False
    return None if healthy else f"GET {health}: {body[:200]!r}"


def start_throwaway_etcd() -> tuple[str, Callable[[], None]] | str:
    """Start a private one-member etcd; return (its URL, a function that stops it and
    deletes its data), or the reason it could not be started."""
    workdir = Path(tempfile.mkdtemp(prefix="soloist-etcd-"))
    try:
        member = EtcdProcess(workdir / "data", _free_port(), _free_port())
    except Unavailable as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        return str(exc)

    def stop() -> None:
        member.kill()
        shutil.rmtree(workdir, ignore_errors=True)

    try:
        member.start(wait=False)
        member.wait_ready(30)
    except (OSError, AssertionError) as exc:
        stop()
        return f"etcd did not become healthy on port {member.client_port}: {exc}"
    return member.url, stop


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[str]:
    """The URL of an etcd server for this session (see the comment above)."""
    yield from session_server(
        os.environ.get("SOLOIST_TEST_ETCD_URL"),
        "SOLOIST_TEST_ETCD_URL",
        LOCAL_ETCD,
        etcd_unreachable,
        start_throwaway_etcd,
        "etcd TESTS NOT RUN: no server. Set SOLOIST_TEST_ETCD_URL=etcd://..., run one at "
        f"{LOCAL_ETCD}, or install etcd (Debian: etcd-server)",
    )


@pytest.fixture
def make_etcd_url(etcd_server: str) -> Iterator[Callable[[], str]]:
    """Makes store URLs on the session's server, each with a fresh key prefix
    (``t-<hex>``); the keys of every prefix made are deleted afterwards."""
    with IsolatedStores(etcd_server, label="t") as isolated:
        yield isolated.url


@pytest.fixture
def etcd_url(make_etcd_url: Callable[[], str]) -> str:
    """A store URL on the session's server, with a fresh key prefix of its own."""
    return make_etcd_url()
