"""``soloist bench --compare-src DIR``: what a change to soloist gained, measured in one
run on one machine.

``DIR`` is the ``src`` folder of another soloist checkout (``git worktree add /tmp/base
<commit>``, then ``DIR=/tmp/base/src``). Each drain setting is then measured for this
code and for worker processes that run DIR's soloist (started with DIR first on their
``PYTHONPATH``), run by run in turn (this code, DIR's, this code, DIR's, ...), so that a
machine that slows down or speeds up meanwhile touches both alike. Everything else stays
this code: the bench process, the store it migrates and fills (DIR's soloist works on this
code's schema), the measurement. Only the drain is compared, and only with worker
processes: in-process instances (``memory://``) run the bench's own soloist.

The drain worker (:mod:`soloist_bench.worker`) takes little of soloist, so that it runs
against older checkouts; :func:`check_compare_src` asks it, before anything is measured,
which soloist it would run and what it would miss there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import soloist
from soloist_bench.worker import worker_problem

__all__ = ["CompareSrcError", "check_compare_src", "expected_soloist_dir", "worker_env"]


class CompareSrcError(ValueError):
    """``--compare-src`` cannot be used as given (the message says why, naming it)."""


def worker_env(src: str | None) -> dict[str, str] | None:
    """The environment of a worker process that runs the soloist in ``src`` (``src``
    first on ``PYTHONPATH``); None (this process's environment) without ``src``."""
    if src is None:
        return None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def expected_soloist_dir(src: str | None) -> str:
    """The folder of the soloist package a worker process is meant to run: ``src``'s, or
    without it this process's own (real paths)."""
    if src is not None:
        return os.path.realpath(os.path.join(src, "soloist"))
    return os.path.dirname(os.path.realpath(soloist.__file__))


def check_compare_src(
    src: str, stores: Sequence[str], worker_logging: str, figures: Sequence[str]
) -> tuple[str, str | None]:
    """Check ``src`` for ``--compare-src`` with ``stores``, the workers logging as
    ``worker_logging`` and ``figures`` measured: the drain is one of them, every store
    runs its instances in worker processes (not ``memory://``), ``src`` is a folder
    holding ``soloist/__init__.py``, and a worker started on it runs that soloist and
    finds there what it uses. Returns ``src`` as an absolute path and its git commit
    (None where git cannot tell); raises :class:`CompareSrcError` naming the problem."""
    if "drain" not in figures:
        raise CompareSrcError(
            f"--compare-src compares the drain only, and it is not measured here "
            f"(figures: {', '.join(figures)}): add --only drain"
        )
    for url in stores:
        if urlsplit(url).scheme.lower() == "memory":
            raise CompareSrcError(
                f"--compare-src measures worker processes that run another soloist, and "
                f"the store {url!r} runs its instances inside the bench's own process: "
                "give a postgresql, redis, sqlite or etcd store"
            )
    folder = Path(src).expanduser()
    if not folder.is_dir():
        raise CompareSrcError(f"--compare-src {src!r}: no such directory")
    if not (folder / "soloist" / "__init__.py").is_file():
        raise CompareSrcError(
            f"--compare-src {src!r}: no soloist/__init__.py in it; give the src folder of a "
            "soloist checkout (after 'git worktree add /tmp/base COMMIT': /tmp/base/src)"
        )
    absolute = str(folder.resolve())
    _probe(absolute, worker_logging)
    return absolute, _commit(absolute)


def _probe(src: str, worker_logging: str) -> None:
    """Ask a worker started as the drain starts them on ``src`` which soloist it runs
    and what it misses there (``python -m soloist_bench probe``)."""
    argv = [sys.executable, "-m", "soloist_bench", "probe", "--logging", worker_logging]
    try:
        done = subprocess.run(
            argv, env=worker_env(src), capture_output=True, text=True, timeout=60, check=False
        )
        answer = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        raise CompareSrcError(
            f"--compare-src {src!r}: the bench's worker did not answer: {exc}"
        ) from None
    if answer is None:
        raise CompareSrcError(
            f"--compare-src {src!r}: the bench's worker failed on it: {done.stderr[-2000:]}"
        )
    found, expected = answer["soloist"], expected_soloist_dir(src)
    if found != expected:
        raise CompareSrcError(
            f"--compare-src {src!r}: a worker started with it first on PYTHONPATH imports "
            f"soloist from {found}, not {expected} (python -m puts the current directory "
            "first: is there a soloist folder in it?)"
        )
    if answer["missing"]:
        raise CompareSrcError(f"--compare-src {src!r}: {worker_problem(answer['missing'], found)}")


def _commit(src: str) -> str | None:
    """The commit checked out where ``src`` is (``git rev-parse HEAD``), None if unknown."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        done = subprocess.run(
            [git, "-C", src, "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else None
