"""One store for all pods: which store an instance uses is never a silent surprise.

An explicit store argument wins over ``SOLOIST_STORE_URL``; when both are given and differ,
the first use of the store logs a WARNING naming both (passwords masked), so that a pod
whose app names a local SQLite file while its deployment gives it PostgreSQL says so. A
SQLite store in distributed or leader mode logs once that it coordinates one host only.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from soloist import Scheduler
from soloist.testing import wait_until

SOLOIST = Path(sys.executable).parent / "soloist"
ENV_URL = "postgresql://app:s3cret@db.internal:5432/app?schema=jobs"
CONFLICT = "differs from SOLOIST_STORE_URL"
SCOPE = "coordinates the processes of this host only"


def conflicts(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if CONFLICT in r.getMessage()]


def test_a_store_argument_that_differs_from_the_environment_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Scheduler(url) with a different SOLOIST_STORE_URL uses the argument and logs one
    WARNING naming both URLs, the password masked."""
    monkeypatch.setenv("SOLOIST_STORE_URL", ENV_URL)
    url = f"sqlite:///{tmp_path / 'local.db'}"
    app = Scheduler(url)
    assert app.config.store_url == url
    with caplog.at_level(logging.INFO, logger="soloist"):
        app.history()
        app.history()
    app.close()
    (record,) = conflicts(caplog)
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert url in message
    assert "postgresql://app:***@db.internal:5432/app?schema=jobs" in message
    assert "s3cret" not in message
    assert getattr(record, "action", None) == "store_conflict"


@pytest.mark.parametrize("env", [None, "same"], ids=["no environment", "same URL"])
def test_no_warning_without_a_conflict(
    env: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No warning when the environment is unset or names the same store, nor for
    Scheduler() (which uses the environment)."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    monkeypatch.chdir(tmp_path)  # Scheduler() may use ./soloist.db
    if env is None:
        monkeypatch.delenv("SOLOIST_STORE_URL", raising=False)
    else:
        monkeypatch.setenv("SOLOIST_STORE_URL", url)
    with caplog.at_level(logging.INFO, logger="soloist"):
        for app in (Scheduler(url), Scheduler()):
            app.history()
            app.close()
    assert conflicts(caplog) == []


def test_reconfigured_store_that_matches_the_environment_is_not_a_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`soloist run --store X` exports X and then moves an app built with Y to X: the app
    uses X, which is the environment's store, so there is no conflict left to warn of."""
    chosen = f"sqlite:///{tmp_path / 'chosen.db'}"
    monkeypatch.setenv("SOLOIST_STORE_URL", chosen)
    app = Scheduler(f"sqlite:///{tmp_path / 'own.db'}")
    app.reconfigure(store=chosen)
    with caplog.at_level(logging.INFO, logger="soloist"):
        app.history()
    app.close()
    assert conflicts(caplog) == []
    assert (tmp_path / "chosen.db").exists() and not (tmp_path / "own.db").exists()


async def test_sqlite_in_distributed_or_leader_mode_says_it_covers_one_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A SQLite store in distributed or leader mode logs once, when the workers start,
    that it coordinates the processes of one host only; local mode and memory do not."""
    for mode, store, expected in (
        ("distributed", f"sqlite:///{tmp_path / 'd.db'}", 1),
        ("leader", f"sqlite:///{tmp_path / 'l.db'}", 1),
        ("local", f"sqlite:///{tmp_path / 'o.db'}", 0),
        ("distributed", "memory://", 0),
    ):
        caplog.clear()
        app = Scheduler(store, mode=mode, lease_ttl="2s")
        with caplog.at_level(logging.INFO, logger="soloist"):
            await app.start()
            await app.stop()
        found = [r for r in caplog.records if SCOPE in r.getMessage()]
        assert len(found) == expected, (mode, store, [r.getMessage() for r in found])


def test_soloist_run_warns_when_the_app_names_another_store_than_the_environment(
    tmp_path: Path,
) -> None:
    """`SOLOIST_STORE_URL=... soloist run app:app` with an app built as Scheduler("sqlite:
    ...") runs on the app's store and its log says, at WARNING, that the environment's
    store is ignored."""
    (tmp_path / "app.py").write_text(
        "from soloist import Scheduler\n\napp = Scheduler('sqlite:///own.db')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLOIST_")}
    env["SOLOIST_STORE_URL"] = f"sqlite:///{tmp_path / 'shared.db'}"
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(SOLOIST), "run", "app:app"], cwd=tmp_path, env=env, stdout=out, stderr=out
        )
    try:
        wait_until(lambda: SCOPE in log.read_text(), "the instance to start", timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    text = log.read_text()
    warning = [line for line in text.splitlines() if CONFLICT in line]
    assert len(warning) == 1, text
    assert "WARNING" in warning[0] and "own.db" in warning[0] and "shared.db" in warning[0]
    assert (tmp_path / "own.db").exists() and not (tmp_path / "shared.db").exists()
