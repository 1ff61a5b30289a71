"""``soloist cancel``, the installed command run as a subprocess against a SQLite file:
a scheduled occurrence is cancelled, a running one is asked to stop, finished and
unknown ids are refused with one ``error:`` line and exit 2."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from soloist.stores import open_store
from soloist.testing.conformance import new_occurrence

SOLOIST = Path(sys.executable).parent / "soloist"


def soloist(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLOIST_")}
    return subprocess.run(
        [str(SOLOIST), *args], env=env, capture_output=True, text=True, timeout=60
    )


async def two_occurrences(url: str) -> tuple[str, str]:
    """A scheduled occurrence due in an hour and a running one (claimed by instance i)."""
    store = open_store(url)
    await store.migrate()
    try:
        now = await store.now()
        later, _ = await store.occurrence_insert(
            new_occurrence("later", job="later", due_at=now + timedelta(hours=1))
        )
        await store.occurrence_insert(new_occurrence("now", job="busy", due_at=now))
        (running,) = await store.occurrence_claim("i", ["task"], 1, timedelta(minutes=5))
        return later.id, running.id
    finally:
        await store.close()


def test_cancel_from_the_command_line(tmp_path: Path) -> None:
    """`cancel ID` ends a scheduled occurrence at once, asks a running one to stop
    (`--json` says which), and refuses a finished or unknown id (exit 2, one line)."""
    url = f"sqlite:///{tmp_path / 'soloist.db'}"
    later, running = asyncio.run(two_occurrences(url))

    done = soloist("cancel", later, "--store", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"cancelled {later} (later, planned ") and not done.stderr

    done = soloist("cancel", running, "--store", url, "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["outcome"] == "requested"
    assert answer["occurrence"]["state"] == "running"
    assert answer["occurrence"]["cancel_requested"] is True

    history = soloist("history", "--store", url, "--json")
    rows = {row["id"]: row for row in map(json.loads, history.stdout.splitlines())}
    assert (rows[later]["state"], rows[later]["error_code"]) == ("dead", "cancelled")

    for target, expected in ((later, "cancelled already"), ("f" * 32, "unknown occurrence")):
        refused = soloist("cancel", target, "--store", url)
        assert refused.returncode == 2, (refused.stdout, refused.stderr)
        assert refused.stderr.startswith("error: ") and expected in refused.stderr
        assert refused.stderr.strip().count("\n") == 0 and target in refused.stderr
        assert refused.stdout == ""


def test_cancel_refuses_a_store_that_does_not_exist(tmp_path: Path) -> None:
    """A mistyped store path is an error (exit 1, one line), not a new empty store."""
    typo = tmp_path / "typo.db"
    done = soloist("cancel", "x", "--store", f"sqlite:///{typo}")
    assert done.returncode == 1 and done.stderr.startswith("error: ")
    assert str(typo) in done.stderr and not typo.exists()
