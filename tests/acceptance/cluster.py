"""Helpers of the acceptance tier: real ``soloist run`` processes on one SQLite file.

A test asks the ``cluster`` fixture (conftest.py) for instances of an app in ``apps/``;
each runs as its own OS process (the installed ``soloist`` command), logs to a file, and
is killed at teardown if the test left it running. Results are read from the store's
history, and conditions are awaited by polling with a deadline, never by fixed sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from soloist.models import Attempt, Occurrence, PartitionLease
from soloist.stores import open_store
from soloist.stores.base import Store
from soloist.testing import wait_until

T = TypeVar("T")

APPS = Path(__file__).parent / "apps"
#: The installed command next to this interpreter (the venv's), else the one on PATH.
SOLOIST = str(Path(sys.executable).with_name("soloist"))
if not Path(SOLOIST).exists():  # pragma: no cover - depends on the install
    SOLOIST = shutil.which("soloist") or SOLOIST

POLL = 0.1


def wait_for(
    condition: Callable[[], T | None], timeout: float, what: str, interval: float = POLL
) -> T:
    """:func:`soloist.testing.wait_until` with this module's argument order."""
    return wait_until(condition, what, timeout, interval)  # type: ignore[return-value]


class Instance:
    """One ``soloist run`` process."""

    def __init__(self, iid: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.iid = iid
        self.proc = proc
        self.log_path = log_path

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """The exit status, waiting at most ``timeout`` seconds (fails the test after)."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.iid} did not exit within {timeout:.1f}s; its log:\n{self.log()}"
            ) from None


class Cluster:
    """Instances of test apps sharing one store: a SQLite file in ``workdir``, or the
    store at ``url`` (a PostgreSQL schema of the test's own)."""

    def __init__(self, workdir: Path, url: str | None = None) -> None:
        self.workdir = workdir
        self.db = workdir / "soloist.db"
        self.url = url or f"sqlite:///{self.db}"
        self.instances: list[Instance] = []
        #: Extra environment of the short ``soloist`` commands (e.g. a skewed clock).
        self.cli_env: dict[str, str] = {}
        # One reader for the whole test; the schema exists before any instance starts, so
        # polling the history never takes the write lock (migrate would).
        self._store: Store = open_store(self.url)
        asyncio.run(self._store.migrate())

    # -- processes ------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SOLOIST_")}
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start(self, app: str, iid: str, **env: str) -> Instance:
        """Start ``soloist run apps/<app>:app`` as instance ``iid`` (not waiting for it),
        with extra environment variables ``env``."""
        log_path = self.workdir / f"{iid}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [SOLOIST, "run", f"{APPS / app}:app", "--store", self.url, "--instance-id", iid],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self._env() | env,
            )
        instance = Instance(iid, proc, log_path)
        self.instances.append(instance)
        return instance

    def start_all(self, app: str, *iids: str, timeout: float = 20, **env: str) -> list[Instance]:
        """Start instances (with extra environment ``env``) and wait until each one logs
        that it started (its SIGTERM handler is then installed)."""
        started = [self.start(app, iid, **env) for iid in iids]
        for instance in started:
            wait_for(lambda i=instance: self._has_started(i), timeout, f"{instance.iid} to start")
        return started

    def _has_started(self, instance: Instance) -> bool:
        if not instance.alive:
            raise AssertionError(f"{instance.iid} exited early; its log:\n{instance.log()}")
        return f"instance {instance.iid} started" in instance.log()

    def status(self) -> dict[str, Any]:
        """``soloist status --json``: leader, epoch, live instances, jobs."""
        report: dict[str, Any] = json.loads(self.soloist("status", "--json"))
        return report

    def soloist(self, *args: str) -> str:
        """Run a short ``soloist`` command against the store (with ``cli_env``); return
        its stdout."""
        done = subprocess.run(
            [SOLOIST, *args, "--store", self.url],
            capture_output=True,
            text=True,
            cwd=self.workdir,
            env=self._env() | self.cli_env,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, f"soloist {' '.join(args)} failed:\n{done.stderr}"
        return done.stdout

    def enqueue(self, app: str, task: str, **payload: Any) -> str:
        """Queue ``task`` with the CLI; return the occurrence id."""
        out = self.soloist(
            "enqueue", task, "--app", f"{APPS / app}:app", "--payload", json.dumps(payload)
        )
        return out.strip().rsplit(" ", 1)[-1]

    def close(self) -> None:
        """Kill what is still running (a frozen process is woken first) and show the logs
        (pytest prints them for a failed test)."""
        for instance in self.instances:
            if instance.alive:
                instance.send(signal.SIGKILL)
                instance.send(signal.SIGCONT)
        for instance in self.instances:
            instance.proc.wait(timeout=10)
            print(f"----- {instance.iid} (exit {instance.proc.returncode}) -----")
            print(instance.log())
        asyncio.run(self._store.close())

    # -- the store --------------------------------------------------------------------------
    def history(self, job: str | None = None, limit: int = 10_000) -> list[Occurrence]:
        return asyncio.run(self._store.occurrence_list(job=job, limit=limit))

    def partitions(self) -> list[PartitionLease]:
        """Every unexpired planning partition lease, by partition."""
        return asyncio.run(self._store.partition_list())

    def attempts(self, occurrence_id: str) -> list[Attempt]:
        """The audit records of an occurrence's attempts, oldest first."""
        return asyncio.run(self._store.occurrence_attempts(occurrence_id))

    def get(self, occurrence_id: str) -> Occurrence:
        occ = asyncio.run(self._store.occurrence_get(occurrence_id))
        assert occ is not None, f"occurrence {occurrence_id} is not in the store"
        return occ

    def write_lock_free(self) -> bool:
        """Whether another connection can take SQLite's write lock right now."""
        conn = sqlite3.connect(self.db, timeout=0.2, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            conn.close()

    def freeze(self, instance: Instance, attempts: int = 20) -> None:
        """SIGSTOP ``instance`` at a moment when it holds no SQLite write lock.

        A process frozen inside a write transaction would stall every instance on this one
        file (that is SQLite, not the scheduler), so if it was caught mid-write it is
        resumed and frozen again. On a server store it is frozen at once."""
        if not self.url.startswith("sqlite"):
            instance.send(signal.SIGSTOP)
            return
        for _ in range(attempts):
            instance.send(signal.SIGSTOP)
            if self.write_lock_free():
                return
            instance.send(signal.SIGCONT)
            time.sleep(0.05)
        raise AssertionError(f"could not freeze {instance.iid} outside a write transaction")
