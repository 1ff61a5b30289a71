"""Queue the chaos app's tasks from a process of its own, at once or at a steady rate.

``python enqueue.py STORE_URL SPEC``: SPEC is JSON ``{"tasks": [[task, payload], ...],
"rate": tasks per second or null (all at once), "delay": duration or null}``. A process
of its own so that it can run under the same libfaketime clock as the instances (a delay
is computed on the store's clock, which is the process's own for SQLite), and feed the
instances while the test applies its fault.

A steady rate keeps the instances below their concurrency: a queue deeper than the free
slots would make the every-second job wait behind it, and the instants that piled up
meanwhile would skip each other under the default ``overlap="skip"``, a load effect that
would hide what the fault did.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

from soloist import Scheduler
from soloist.errors import StoreError

APP = Path(__file__).parent / "apps" / "workload.py"
#: Batches per second at a steady rate.
TICKS_PER_S = 10
#: How long one task's enqueue is tried again through store errors.
RETRY_FOR = 60.0


def _load() -> Scheduler:
    module_spec = importlib.util.spec_from_file_location("chaos_workload", APP)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    app: Scheduler = module.app
    return app


def _enqueue(app: Scheduler, batch: list[list[Any]], delay: str | None) -> None:
    """Queue each task with the idempotency key ``chaos-<n>``, trying again through store
    errors (the store may be the one being restarted): a call whose reply was lost and
    that is made again creates nothing new."""
    for task, payload in batch:
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                app.enqueue(task, payload, key=f"chaos-{payload['n']}", delay=delay)
                break
            except StoreError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def main(url: str, spec_text: str) -> None:
    spec = json.loads(spec_text)
    tasks: list[list[Any]] = spec["tasks"]
    rate: float | None = spec.get("rate")
    app = _load()
    app.reconfigure(store=url)
    try:
        if not rate:
            _enqueue(app, tasks, spec.get("delay"))
            return
        size = max(1, round(rate / TICKS_PER_S))
        start = time.monotonic()
        for k, first in enumerate(range(0, len(tasks), size)):
            # Keep to the rate on average, whatever each call took.
            time.sleep(max(0.0, start + k * size / rate - time.monotonic()))
            _enqueue(app, tasks[first : first + size], spec.get("delay"))
    finally:
        app.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
