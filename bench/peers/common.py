"""What the peer scripts share: timing one call at a time, and a drain's figures and
command line (each library's own part stays in its script).

The scripts run as ``python bench/peers/NAME.py``, so this folder is first on
``sys.path`` and ``import common`` finds this module."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

WARMUP = 200


async def timed_calls(call: Callable[[], Awaitable[Any]], n: int) -> tuple[float, float]:
    """``n`` sequential awaits of ``call()`` after :data:`WARMUP` unmeasured ones: calls/s
    and the process's CPU µs per call."""
    for _ in range(WARMUP):
        await call()
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        await call()
    t1, c1 = time.perf_counter(), time.process_time()
    return round(n / (t1 - t0), 1), round((c1 - c0) / n * 1e6, 1)


async def round_trips(call: Callable[[], Awaitable[Any]], seconds: float = 1.0) -> float:
    """Sequential awaits of ``call()`` per second for about ``seconds`` (after 50)."""
    for _ in range(50):
        await call()
    k = 0
    s0 = time.perf_counter()
    deadline = s0 + seconds
    while True:
        await call()
        k += 1
        if (k & 63) == 0 and time.perf_counter() >= deadline:
            break
    return round(k / (time.perf_counter() - s0), 1)


def drain_figures(per_proc: list[list[float]], n: int, enqueue_s: float) -> dict[str, object]:
    """A drain's figures from each worker process's handler start times."""
    stamps = sorted(s for ss in per_proc for s in ss)
    if len(stamps) != n:
        raise RuntimeError(f"{len(stamps)} handler starts for {n} jobs")
    span = stamps[-1] - stamps[0]
    return {
        "per_s": round(n / span, 1),
        "span_s": round(span, 3),
        "enqueue_s": round(enqueue_s, 3),
        "per_process": [len(ss) for ss in per_proc],
        # How late each process started its first job after the first one overall.
        "first_start_lag_s": [round(min(ss) - stamps[0], 3) if ss else None for ss in per_proc],
        "tasks": n,
    }


def run_once(
    args: argparse.Namespace, drain: Callable[[argparse.Namespace, list[str]], Awaitable[float]]
) -> dict[str, object]:
    """One drain: ``drain(args, outs)`` enqueues, runs the workers (each writes its handler
    start times, as JSON, to its path of ``outs``) and returns the enqueue's duration."""
    with tempfile.TemporaryDirectory(prefix="peer_drain_") as tmp:
        outs = [str(Path(tmp) / f"w{i}.json") for i in range(args.processes)]
        enqueue_s = asyncio.run(drain(args, outs))
        per_proc = [json.loads(Path(o).read_text()) for o in outs]
    return drain_figures(per_proc, args.tasks, enqueue_s)


def drain_main(
    description: str,
    url: str,
    drain: Callable[[argparse.Namespace, list[str]], Awaitable[float]],
    summary: Callable[[argparse.Namespace], dict[str, object]],
) -> None:
    """The drain scripts' command line: ``--runs`` drains (:func:`run_once`), one JSON line
    each, then one with their median, the settings and ``summary(args)``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--url", default=url)
    args = parser.parse_args()
    runs = []
    for i in range(args.runs):
        run = run_once(args, drain)
        print(json.dumps({"run": i + 1, **run}), flush=True)
        runs.append(run["per_s"])
    print(
        json.dumps(
            {
                "median_per_s": statistics.median(runs),
                "runs": runs,
                "concurrency": args.concurrency,
                "processes": args.processes,
                **summary(args),
            }
        )
    )


#: Seconds a drain may take before the run is abandoned.
TIMEOUT = 300.0


async def run_workers(
    target: Callable[..., None],
    each_args: list[tuple[Any, ...]],
    remaining: Callable[[], Awaitable[int]],
) -> None:
    """Start one worker process per ``each_args`` (spawned: ``target(*args)``), wait until
    ``remaining()`` says nothing is left, then stop them (SIGTERM, then a kill for any that
    hangs). Raises if the drain takes over :data:`TIMEOUT`, or if a worker exits early or
    badly."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=target, args=args) for args in each_args]
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + TIMEOUT
        while await remaining():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not drained within {TIMEOUT:.0f}s")
            if any(p.exitcode is not None for p in procs):
                raise RuntimeError("a worker process exited before the drain ended")
            await asyncio.sleep(0.05)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"worker exit codes {[p.exitcode for p in procs]}")
