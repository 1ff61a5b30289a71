"""The Django integration takes its store from ``settings.DATABASES`` when no store URL is
given (``soloist.contrib.django.store_url``): a real settings module on SQLite and on
PostgreSQL, a task enqueued and run through the derived store, ``manage.py soloist``
pointed at it, and the password never shown."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

SETTINGS = """
import json, os
SECRET_KEY = "test-only"
USE_TZ = True
INSTALLED_APPS = ["soloist.contrib.django"]
SOLOIST_APP = "dj_tasks:app"
DATABASES = json.loads(os.environ["DJ_DATABASES"])
SOLOIST_STORE_OPTIONS = json.loads(os.environ.get("DJ_STORE_OPTIONS", "null"))
"""

TASKS = """
from soloist import JobContext, Scheduler
from soloist.contrib.django import store_url

app = Scheduler(store_url(), poll_interval="50ms")


@app.task()
def greet(ctx: JobContext, name: str) -> str:
    return f"hello {name}"
"""

PROBE = """
import asyncio, json
import django
django.setup()
from django.core.exceptions import ImproperlyConfigured
from soloist.contrib.django import database_store_url
from dj_tasks import app

async def main():
    occurrence = await app.aenqueue("greet", {"name": "ada"})
    await app.start()
    try:
        for _ in range(500):
            (row,) = await app.ahistory(job="greet")
            if row.state.value == "succeeded":
                break
            await asyncio.sleep(0.02)
    finally:
        await app.stop()
    return occurrence, row

occurrence, row = asyncio.run(main())
errors = {}
for alias in ("mysql", "memory", "nope"):
    try:
        database_store_url(alias)
    except ImproperlyConfigured as exc:
        errors[alias] = str(exc)
print(json.dumps({"url": app.config.store_url, "ran": [row.id == occurrence, row.state.value,
                  row.result], "errors": errors}))
"""

OTHERS = {
    "mysql": {"ENGINE": "django.db.backends.mysql", "NAME": "shop", "PASSWORD": "hunter2"},
    "memory": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
}


def _project(tmp_path: Path, databases: dict[str, Any], options: object = None) -> dict[str, str]:
    """A settings module and a tasks module in ``tmp_path``; the environment to run them."""
    (tmp_path / "dj_settings.py").write_text(SETTINGS)
    (tmp_path / "dj_tasks.py").write_text(TASKS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOLOIST_", "DJANGO_"))}
    return env | {
        "PYTHONPATH": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "dj_settings",
        "DJ_DATABASES": json.dumps(databases | OTHERS),
        "DJ_STORE_OPTIONS": json.dumps(options),
    }


def _probe(tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROBE)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _check_errors(errors: dict[str, str]) -> None:
    assert "ENGINE 'django.db.backends.mysql'" in errors["mysql"]
    assert "SOLOIST_STORE_URL" in errors["mysql"] and "hunter2" not in errors["mysql"]
    assert "in-memory SQLite" in errors["memory"]
    assert "invalid settings.SOLOIST_DATABASE 'nope'" in errors["nope"]
    assert "'default'" in errors["nope"]


def test_a_sqlite_database_of_django_is_the_store(tmp_path: Path) -> None:
    """DATABASES['default'] on SQLite gives sqlite:///<its file>: the task runs, and
    soloist's tables are in Django's database file; other engines, an in-memory database
    and an unknown alias are refused naming the setting."""
    db = tmp_path / "site.sqlite3"
    databases = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(db)}}
    got = _probe(tmp_path, _project(tmp_path, databases))
    assert got["url"] == f"sqlite:///{db}"
    assert got["ran"] == [True, "succeeded", "hello ada"]
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "occurrences" in tables
    _check_errors(got["errors"])


def test_a_postgres_database_of_django_is_the_store(
    tmp_path: Path, postgres_dsn: str, make_postgres_url: Callable[[], str]
) -> None:
    """DATABASES['default'] on PostgreSQL (NAME, USER, PASSWORD, HOST, PORT, libpq OPTIONS)
    gives a postgresql:// URL, with SOLOIST_STORE_OPTIONS' schema: the task runs there;
    ``manage.py soloist status`` uses the same store; no output shows the password."""
    schema = parse_qs(urlsplit(make_postgres_url()).query)["schema"][0]
    server = urlsplit(postgres_dsn)
    password = "s3cr:t/p@ss"  # trust authentication ignores it; the URL must carry it
    databases = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": server.path.lstrip("/"),
            "USER": server.username or os.environ.get("USER", "root"),
            "PASSWORD": password,
            "HOST": server.hostname or "",
            "PORT": str(server.port or ""),
            "OPTIONS": {"sslmode": "disable", "connect_timeout": 5, "isolation_level": 1},
        }
    }
    env = _project(tmp_path, databases, {"schema": schema})
    got = _probe(tmp_path, env)
    url = urlsplit(got["url"])
    assert (url.scheme, url.path.lstrip("/")) == ("postgresql", databases["default"]["NAME"])
    assert parse_qs(url.query) == {
        "sslmode": ["disable"], "connect_timeout": ["5"], "schema": [schema]
    }  # fmt: skip
    assert url.password is not None and url.password != password  # percent-encoded
    assert got["ran"] == [True, "succeeded", "hello ada"]
    _check_errors(got["errors"])
    status = subprocess.run(
        [sys.executable, "-m", "django", "soloist", "history", "--job", "greet"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert "greet" in status.stdout and "succeeded" in status.stdout
    assert password not in status.stdout + status.stderr
    assert "s3cr" not in status.stdout + status.stderr
