"""``soloist prune``, the installed command run as a subprocess against a SQLite file whose
history was written in the past."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

from soloist.models import Outcome, State
from soloist.stores import open_store
from soloist.testing.conformance import new_occurrence

SOLOIST = Path(sys.executable).parent / "soloist"


def soloist(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOLOIST_")}
    return subprocess.run(
        [str(SOLOIST), *args], env=env, capture_output=True, text=True, timeout=60
    )


async def write_history(url: str, ages_days: list[int]) -> None:
    """One finished occurrence of job ``old`` per age (days before now), one scheduled
    occurrence (due long ago) and one newer finished occurrence of job ``other``."""
    store = open_store(url)
    await store.migrate()
    try:
        now = await store.now()
        for n, days in enumerate(sorted(ages_days, reverse=True)):
            when = now - timedelta(days=days)
            await store.occurrence_insert(new_occurrence(f"k{n}", job="old", due_at=when))
            (run,) = await store.occurrence_claim("i", ["task"], 1, timedelta(60), now=when)
            done = Outcome(run.id, run.fencing_token, State.SUCCEEDED)
            await store.occurrence_complete("i", [done], now=when)
        await store.occurrence_insert(
            new_occurrence("waiting", job="later", task="t2", due_at=now - timedelta(days=90))
        )
    finally:
        await store.close()


async def states(url: str) -> list[tuple[str, str]]:
    store = open_store(url)
    try:
        rows = await store.occurrence_list(limit=100)
        return sorted((o.dedupe_key, o.state.value) for o in rows)
    finally:
        await store.close()


def test_prune_deletes_old_finished_occurrences_in_batches(tmp_path: Path) -> None:
    """--dry-run counts and deletes nothing; --older-than deletes the finished occurrences
    older than it and keeps the rest (the job's newest finished, anything unfinished);
    --keep bounds the count; the JSON output says what was done."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    asyncio.run(write_history(url, [100, 60, 45, 40, 10, 1]))

    dry = soloist("prune", "--older-than", "30d", "--dry-run", "--json", "--store", url)
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["pruned"] == 4 and report["dry_run"] is True and report["keep"] is None
    assert datetime.fromisoformat(report["before"]) < datetime.now().astimezone()
    assert len(asyncio.run(states(url))) == 7

    done = soloist("prune", "--older-than", "30d", "--store", url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("deleted 4 finished occurrence(s) finished before ")
    assert asyncio.run(states(url)) == [
        ("k4", "succeeded"),
        ("k5", "succeeded"),
        ("waiting", "scheduled"),
    ]

    kept = soloist("prune", "--keep", "1", "--store", url)
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout == "deleted 1 finished occurrence(s) beyond the newest 1\n"
    assert asyncio.run(states(url)) == [("k5", "succeeded"), ("waiting", "scheduled")]


def test_prune_refuses_bad_input_with_one_line_and_creates_nothing(tmp_path: Path) -> None:
    """A bad duration exits 2 and a missing store exits 1, each with one error line
    naming it; no store file is created."""
    url = f"sqlite:///{tmp_path / 'missing.db'}"
    bad = soloist("prune", "--older-than", "30 days ago", "--store", url)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr == (
        "error: invalid --older-than '30 days ago': expected a duration such as '90s', "
        "'5m', '1h30m'\n"
    )
    missing = soloist("prune", "--older-than", "30d", "--store", url)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert "missing.db" in missing.stderr and "Traceback" not in missing.stderr
    assert not (tmp_path / "missing.db").exists()
