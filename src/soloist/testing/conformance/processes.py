"""A claim race between real OS processes, for the store-specific tests of any store that
several processes share (SQLite, PostgreSQL, ...)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

_CLAIMER = textwrap.dedent(
    """
    import asyncio, json, sys
    from datetime import timedelta
    from soloist.stores import open_store

    async def main() -> None:
        store = open_store(sys.argv[1])
        await store.migrate()
        print("ready", flush=True)
        sys.stdin.readline()  # wait for "go": every process starts claiming together
        claimed = []
        batch_size = int(sys.argv[3])
        while True:
            batch = await store.occurrence_claim(
                sys.argv[2], ["task"], batch_size, timedelta(minutes=5)
            )
            if not batch:
                break
            claimed += [occ.id for occ in batch]
        await store.close()
        print(json.dumps(claimed), flush=True)

    asyncio.run(main())
    """
)


def race_claimers(url: str, processes: int, batch: int, cwd: Path | None = None) -> list[str]:
    """Start ``processes`` OS processes on the store at ``url``; once all are ready, let
    them claim (task ``"task"``, ``batch`` at a time) until nothing is left. Returns every
    id claimed, by all of them (a row claimed twice appears twice)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CLAIMER, url, f"proc-{n}", str(batch)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
        )
        for n in range(processes)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=60) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    claimed: list[str] = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        claimed += json.loads(out)
    return claimed
