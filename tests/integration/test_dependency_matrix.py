"""soloist against the other major releases its dependency ranges allow.

``make install`` puts the newest allowed release of each driver and framework in the venv,
so the rest of the suite tests those. Here a real part of the suite runs again against
the other major release of each one, in a pytest subprocess whose ``PYTHONPATH`` starts
with a directory holding that release (``pip install --target``, made once and kept under
the venv, so a warm run costs only the tests):

* redis-py (the other major and the lowest allowed, 5): the Redis store conformance suite;
* Starlette: the HTTP endpoint's tests (an app served in-process, mounted under a prefix,
  and real ``soloist run --http`` processes);
* pytest 8 with pytest-asyncio 0.x (the lowest the ``testing`` extra allows): the
  conformance suite of ``soloist.testing.conformance`` on the memory and SQLite stores;
* Django: a worker started by ``manage.py soloist run`` running a task a view enqueued, and
  views enqueuing under ``runserver``.

Django 6 needs Python 3.12: under an older Python the other major of Django 5 is 4.2.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The releases installed here, one directory each, reused by later runs.
CACHE = Path(sys.prefix) / "soloist-dependency-matrix"
PIP_TIMEOUT_S = 300


def major(dist: str) -> int:
    return int(version(dist).split(".")[0])


def other_redis() -> str:
    """redis-py 7 when the venv has 8 (the newest), else 8."""
    return "redis==7.*" if major("redis") >= 8 else "redis==8.*"


def other_starlette() -> str:
    """Starlette 0.x when the venv has 1.x, else 1.x."""
    return "starlette==0.*" if major("starlette") >= 1 else "starlette==1.*"


def other_django() -> str:
    """Django 5 beside 6; beside 5, Django 6 where Python runs it (3.12+), else 4.2."""
    if major("django") >= 6:
        return "django==5.2.*"
    return "django==6.*" if sys.version_info >= (3, 12) else "django==4.2.*"


def installed(requirement: str, *more: str) -> Path:
    """A directory holding ``requirement`` (and ``more``) with their dependencies,
    installed once."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", " ".join((requirement, *more))).strip("-")
    target = CACHE / f"py{sys.version_info[0]}{sys.version_info[1]}-{slug}"
    if target.is_dir():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{slug}-", dir=CACHE))
    try:
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        done = subprocess.run(
            [*pip, "--target", str(staging), requirement, *more],
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
        )
        assert done.returncode == 0, f"pip could not install {requirement}:\n{done.stderr}"
        try:
            staging.rename(target)
        except OSError:  # another run installed it meanwhile
            assert target.is_dir()
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def env_with(path: Path) -> dict[str, str]:
    pythonpath = os.pathsep.join(p for p in (str(path), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": pythonpath}


def imported_version(module: str, env: dict[str, str]) -> str:
    """The version of ``module`` and where it came from, as a subprocess imports it."""
    probe = f"import {module}; print({module}.__version__, {module}.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def run_suite(requirement: str, module: str, tests: list[str], *more: str) -> None:
    """The ``tests`` pass in a pytest subprocess that imports ``requirement``'s release
    (``module`` is checked to come from it), ``more`` installed beside it."""
    path = installed(requirement, *more)
    env = env_with(path)
    found, where = imported_version(module, env).split(" ", 1)
    wanted = requirement.split("==")[1].rstrip("*")
    assert found.startswith(wanted) and where.startswith(str(path)), (requirement, found, where)

    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"{requirement}: {summary}\n{done.stdout[-6000:]}{done.stderr}"
    assert " passed" in summary and "skipped" not in summary, summary


@pytest.mark.parametrize("which", ["other major", "lowest allowed"])
def test_redis_store_conformance_with_other_redis_py_releases(which: str) -> None:
    """The Redis store passes the conformance suite with redis-py 7 as with 8, and with
    the lowest release the range allows (5)."""
    requirement = other_redis() if which == "other major" else "redis==5.*"
    run_suite(requirement, "redis", ["tests/conformance/test_redis_store.py"])


def test_http_endpoint_with_the_other_starlette_major() -> None:
    """The HTTP endpoint (in-process, mounted, and under ``soloist run --http``) passes its
    tests with Starlette 0.x as with 1.x."""
    tests = ["tests/integration/test_http_embedded.py", "tests/integration/test_http.py"]
    run_suite(other_starlette(), "starlette", tests)


def test_django_integration_with_the_other_django_major() -> None:
    """``manage.py soloist run`` runs a task a view enqueued, and views enqueue under
    ``runserver``, with the other major release of Django."""
    names = [
        "test_django_worker_runs_a_task_enqueued_by_a_view_once",
        "test_django_views_enqueue_concurrently_under_runserver",
    ]
    tests = [f"tests/integration/test_frameworks.py::{name}" for name in names]
    run_suite(other_django(), "django", tests)


def test_conformance_suite_with_pytest_8_and_pytest_asyncio_0() -> None:
    """soloist[testing]'s suite runs under the lowest majors its range allows, as under
    pytest 9 and pytest-asyncio 1.x."""
    tests = ["tests/conformance/test_memory_store.py", "tests/conformance/test_sqlite_store.py"]
    run_suite("pytest==8.*", "pytest", tests, "pytest-asyncio==0.*")


@pytest.mark.parametrize(
    ("dist", "newest_major"), [("redis", 8), ("starlette", 1), ("django", 5), ("pytest", 9)]
)
def test_the_venv_has_the_current_major_releases(dist: str, newest_major: int) -> None:
    """make install installs the newest releases the ranges allow: the rest of the suite
    runs on redis-py 8, Starlette 1.x and pytest 9."""
    assert major(dist) >= newest_major, (dist, version(dist))
