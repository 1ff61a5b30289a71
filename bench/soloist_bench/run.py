"""The whole run: every measurement of every store, repeated, then the table and the
JSON file."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import platform
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from soloist.stores import open_store
from soloist_bench.baselines import measure_baseline, server_version
from soloist_bench.config import LOCAL_POSTGRES, BenchConfig
from soloist_bench.failover import measure_failover
from soloist_bench.planning import measure_tick_cost
from soloist_bench.planning_live import measure_instances
from soloist_bench.report import brief, median_of, ratios, table
from soloist_bench.targets import Target
from soloist_bench.workloads import measure_drain, measure_enqueue, measure_lateness

__all__ = ["bench_main", "bench_store", "default_store_url", "run_bench"]


async def _repeat(
    config: BenchConfig, name: str, measure: Callable[[], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    runs = []
    for i in range(config.runs):
        runs.append(await measure())
        config.echo(f"  {name} run {i + 1}/{config.runs}: {brief(runs[-1])}")
        if "skipped" in runs[-1]:
            break
    return {**median_of(runs), "runs": runs}


async def bench_store(url: str, config: BenchConfig) -> dict[str, Any]:
    target = Target(url)
    echo = config.echo
    echo(f"store {url} ({target.kind})")
    report: dict[str, Any] = {"store": url, "kind": target.kind}
    try:
        report["server_version"] = await server_version(target)
        report["baseline"] = await _repeat(
            config, "baseline", lambda: measure_baseline(target, config)
        )
        figures = config.figures()
        if "drain" in figures:
            report["drain"] = await _drain(target, config)
        if "enqueue" in figures:
            report["enqueue"] = await _repeat(
                config, "enqueue", lambda: measure_enqueue(target, config)
            )
        if "lateness" in figures:
            report["lateness"] = await _repeat(
                config, "lateness", lambda: measure_lateness(target, config)
            )
        if "failover" in figures:
            report["failover"] = await _repeat(
                config, "failover", lambda: measure_failover(target, config)
            )
        if "planning" in figures:
            report["planning"] = await measure_planning(target, config)
        report["ratios"] = ratios(report)
    finally:
        await target.cleanup()
    return report


async def _drain(target: Target, config: BenchConfig) -> dict[str, Any]:
    """The drain matrix (:meth:`BenchConfig.drain_settings`), keyed by setting
    (``c10_def_p2``); each entry names its setting and holds the median and every run."""
    drain: dict[str, Any] = {}
    for setting in config.drain_settings():
        named = {
            "concurrency": setting.concurrency,
            "handler": setting.handler,
            "processes": setting.processes,
        }
        if setting.processes > 1 and not target.multiprocess:
            drain[setting.key] = {
                **named,
                "skipped": f"not meaningful: {target.url} is one process",
            }
            continue
        name = f"drain, {setting.label}"
        current = functools.partial(measure_drain, target, config, setting)
        if config.compare_src is None:
            figures = await _repeat(config, name, current)
        else:
            baseline = functools.partial(current, src=config.compare_src)
            figures = await _interleaved(config, name, current, baseline)
        drain[setting.key] = {**named, **figures}
    return drain


async def _interleaved(
    config: BenchConfig,
    name: str,
    current: Callable[[], Awaitable[dict[str, Any]]],
    baseline: Callable[[], Awaitable[dict[str, Any]]],
) -> dict[str, Any]:
    """``current`` and ``baseline`` (``--compare-src``) measured in turn, ``config.runs``
    times each (current first), so that the machine's drift touches both alike: the
    current code's median and runs, with ``baseline`` holding the baseline's, and
    ``over_baseline_runs`` the ratio of each current run to the baseline run after it."""
    runs: list[dict[str, Any]] = []
    base_runs: list[dict[str, Any]] = []
    for i in range(config.runs):
        runs.append(await current())
        config.echo(f"  {name} run {i + 1}/{config.runs}: {brief(runs[-1])}")
        base_runs.append(await baseline())
        config.echo(f"  {name}, baseline run {i + 1}/{config.runs}: {brief(base_runs[-1])}")
    return {
        **median_of(runs),
        "runs": runs,
        "over_baseline_runs": [
            a["per_s"] / b["per_s"] for a, b in zip(runs, base_runs, strict=True)
        ],
        "baseline": {**median_of(base_runs), "runs": base_runs},
    }


async def measure_planning(target: Target, config: BenchConfig) -> dict[str, Any]:
    """The planning figure (:mod:`soloist_bench.planning`, :mod:`~.planning_live`): tick
    cost in-process; one instance on ``single_schedules``; ``cluster_instances`` on
    ``cluster_schedules``, one joining, one killed (0 schedules: not measured)."""
    echo = config.echo
    result: dict[str, Any] = {}
    result["tick"] = await measure_tick_cost(target, config)
    echo(f"  planning tick cost: {brief(_short(result['tick']))}")
    if config.single_schedules:
        result["single"] = await measure_instances(
            target,
            config,
            schedules=config.single_schedules,
            interval=config.single_interval,
            instances=1,
            rebalance=False,
        )
        echo(f"  planning, 1 instance: {brief(_short(result['single']))}")
    if config.cluster_schedules:
        result["cluster"] = await measure_instances(
            target,
            config,
            schedules=config.cluster_schedules,
            interval=config.cluster_interval,
            instances=config.cluster_instances,
            rebalance=True,
        )
        echo(
            f"  planning, {config.cluster_instances} instances: {brief(_short(result['cluster']))}"
        )
    return result


def _short(figures: dict[str, Any]) -> dict[str, Any]:
    """The figures without their per-tick and per-instance lists (for the progress line)."""
    return {k: v for k, v in figures.items() if not isinstance(v, (list, dict))}


async def run_bench(config: BenchConfig) -> dict[str, Any]:
    """Measure every store of ``config``; print a table; write JSON if asked."""
    started = datetime.now(timezone.utc)
    result: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "command": " ".join(["soloist", *sys.argv[1:]]),
        "settings": {
            "tasks": config.tasks,
            "runs": config.runs,
            # The drain matrix (every setting measured is a key of each store's "drain").
            "concurrency": list(config.concurrency),
            "handlers": list(config.handlers),
            "processes": list(config.processes),
            "drain_settings": [setting.key for setting in config.drain_settings()],
            # --compare-src: the drain's workers also ran this soloist (each drain's
            # "baseline"), its checkout at this commit (None: unknown or not compared).
            "compare_src": config.compare_src,
            "compare_commit": config.compare_commit,
            # The drain's and the lateness workers' logging; lateness runs an async def
            # handler at the library's default concurrency.
            "worker_logging": config.worker_logging,
            "lateness_handler": "async",
            "samples": config.samples,
            "spacing_s": config.spacing,
            "enqueue_calls": config.enqueue_calls,
            "batch": config.batch,
            "figures": list(config.figures()),
            "planning": {
                "tick_streams": config.tick_streams,
                "tick_due": config.tick_due,
                "ticks": config.ticks,
                "single_schedules": config.single_schedules,
                "single_interval_s": config.single_interval,
                "cluster_schedules": config.cluster_schedules,
                "cluster_interval_s": config.cluster_interval,
                "cluster_instances": config.cluster_instances,
                "warmup_s": config.warmup,
                "window_s": config.window,
            },
        },
        "stores": [await bench_store(url, config) for url in config.stores],
    }
    for line in table(result):
        config.echo(line)
    return result


def bench_main(config: BenchConfig) -> dict[str, Any]:
    """Run :func:`run_bench` in a new event loop and write the JSON file if asked."""
    result = asyncio.run(run_bench(config))
    if config.json_path:
        Path(config.json_path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        config.echo(f"\nwrote {config.json_path}")
    return result


def default_store_url() -> str:
    """``SOLOIST_STORE_URL``, else a local PostgreSQL if one answers, else a SQLite file."""
    explicit = os.environ.get("SOLOIST_STORE_URL")
    if explicit:
        return explicit

    async def reachable() -> bool:
        store = open_store(LOCAL_POSTGRES)
        try:
            await asyncio.wait_for(store.now(), 5)
            return True
        except Exception:
            return False
        finally:
            with contextlib.suppress(Exception):
                await store.close()

    try:
        return LOCAL_POSTGRES if asyncio.run(reachable()) else "sqlite:///soloist-bench.db"
    except Exception:
        return "sqlite:///soloist-bench.db"
