"""Medians, ratios and the Markdown table of a benchmark result."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from soloist_bench.config import DrainSetting
from soloist_bench.report_planning import planning_rows

__all__ = ["brief", "median_of", "ms", "percentiles", "ratios", "table"]


def ms(later: datetime | None, earlier: datetime) -> float:
    assert later is not None
    return (later - earlier).total_seconds() * 1000


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p99 (nearest rank: with fewer than 100 samples p99 is the maximum) and max."""
    ordered = sorted(values)

    def rank(p: int) -> float:
        return ordered[max(0, math.ceil(len(ordered) * p / 100) - 1)]

    return {"p50": rank(50), "p99": rank(99), "max": ordered[-1], "n": len(ordered)}


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every numeric figure over ``runs`` (nested dicts too), plus the runs.
    A figure missing from some runs (a worker that did not report) is the median of the
    runs that have it."""
    first = runs[0]
    if "skipped" in first:
        return first
    merged: dict[str, Any] = {}
    for key, value in first.items():
        having = [run[key] for run in runs if key in run]
        if isinstance(value, dict):
            merged[key] = median_of(having)
        elif isinstance(value, (int, float)):
            merged[key] = statistics.median(having)
    return merged


def brief(result: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={_fmt(v)}" if not isinstance(v, dict) else f"{k}=({brief(v)})"
        for k, v in result.items()
    )


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
    return str(value)


#: The baselines a figure is read against, and their names in the table.
_ROUND_TRIPS = {
    "select_1_per_s": ("select_1", "SELECT 1"),
    "ping_per_s": ("ping", "PING"),
    "range_per_s": ("range", "etcd Range"),
}
_WRITES = {
    "raw_put_and_txn_items_per_s": ("raw_put_and_txn", "etcd put + fenced txn"),
}
_SINGLE_WRITES = {
    "raw_insert_one_per_s": ("raw_insert_one", "raw single INSERT"),
    "raw_script_per_s": ("raw_script", "raw EVALSHA (HSET + ZADD)"),
}


def ratios(report: dict[str, Any]) -> dict[str, float]:
    """Figures relative to this run's baselines: comparable across machines and moments
    better than the raw figures are (the server and the CPU are shared)."""
    return {name: value for name, _, _, value in _ratio_items(report)}


def _ratio_items(report: dict[str, Any]) -> Iterator[tuple[str, str, str, float]]:
    """Every ratio as ``(name, section, label, value)``: ``section`` is where the table
    shows it (``drain``, ``enqueue``, ``planning``; ``compare``: beside each drain
    setting's row; ``json``: in the JSON only)."""
    base = report["baseline"]
    drain = {k: v for k, v in report.get("drain", {}).items() if "per_s" in v}
    for key, figures in drain.items():
        label = _setting(figures).label
        per_s = figures["per_s"]
        yield (
            f"drain_{key}_per_million_python_loops",
            "json",
            "",
            per_s / base["python_loops_per_s"] * 1e6,
        )
        for name, (short, shown) in {**_ROUND_TRIPS, **_WRITES}.items():
            if name in base:
                yield (
                    f"drain_{key}_over_{short}",
                    "drain",
                    f"drain / {shown}, {label}",
                    per_s / base[name],
                )
    for key, figures in drain.items():
        compared = figures.get("baseline", {})
        if "per_s" in compared:  # --compare-src: this code / the other checkout's
            yield (
                f"drain_{key}_over_baseline",
                "compare",
                f"drain this code / baseline soloist, {_setting(figures).label}",
                figures["per_s"] / compared["per_s"],
            )
    for figures in drain.values():
        setting = _setting(figures)
        if setting.handler != "def":
            continue
        twin = DrainSetting(setting.concurrency, "async", setting.processes).key
        if twin in drain:
            plural = "process" if setting.processes == 1 else "processes"
            yield (
                f"drain_c{setting.concurrency}_p{setting.processes}_def_over_async",
                "drain",
                f"drain def / async def, concurrency {setting.concurrency}, "
                f"{setting.processes} worker {plural}",
                figures["per_s"] / drain[twin]["per_s"],
            )
    enqueue = report.get("enqueue")
    if enqueue is not None and "single_per_s" in enqueue:
        for name, (short, shown) in {**_ROUND_TRIPS, **_SINGLE_WRITES}.items():
            if name in base:
                yield (
                    f"enqueue_single_over_{short}",
                    "enqueue",
                    f"enqueue: aenqueue rate / {shown} rate",
                    enqueue["single_per_s"] / base[name],
                )
                if "sync_single_per_s" in enqueue:
                    yield (
                        f"enqueue_sync_single_over_{short}",
                        "enqueue",
                        f"enqueue: sync enqueue rate / {shown} rate",
                        enqueue["sync_single_per_s"] / base[name],
                    )
        for name, short, shown in (
            ("raw_insert_rows_per_s", "raw_insert", "raw INSERT rows (batches of 1000)"),
            ("raw_put_rows_per_s", "raw_put", "etcd raw puts (transactions of 128)"),
        ):
            if name in base:
                yield (
                    f"insert_many_over_{short}",
                    "enqueue",
                    f"enqueue: insert_many rows / {shown}",
                    enqueue["insert_many_rows_per_s"] / base[name],
                )
    tick = report.get("planning", {}).get("tick")
    if tick is not None:
        # A tick's cost in raw round trips of the same server: comparable across runs.
        for name, (short, shown) in _ROUND_TRIPS.items():
            if name in base:
                yield (
                    f"planning_tick_in_{short}_round_trips",
                    "planning",
                    f"a large-index planning tick, in {shown} round trips",
                    tick["large"]["tick_ms"] / 1000 * base[name],
                )


def _setting(figures: dict[str, Any]) -> DrainSetting:
    return DrainSetting(figures["concurrency"], figures["handler"], figures["processes"])


def table(result: dict[str, Any]) -> Iterator[str]:
    """The headline figures as a Markdown table (medians; see the JSON for every run)."""
    yield ""
    yield (
        f"soloist bench, {result['date']}, nproc {result['nproc']}, Python {result['python']}, "
        f"{result['settings']['tasks']} tasks, median of {result['settings']['runs']} runs, "
        f"worker logging {result['settings'].get('worker_logging', 'quiet')}"
    )
    src = result["settings"].get("compare_src")
    if src:
        commit = result["settings"].get("compare_commit")
        at = f" (commit {commit[:12]})" if commit else ""
        yield (
            f"baseline soloist: {src}{at}, run by the drain's workers, each run right after "
            "one of this code"
        )
    for store in result["stores"]:
        server = {"postgresql": "PostgreSQL", "etcd": "etcd"}.get(store["kind"], store["kind"])
        version = f" ({server} {store['server_version']})" if store["server_version"] else ""
        yield ""
        yield f"{store['kind']}{version}: {store['store']}"
        yield ""
        yield "| figure | median |"
        yield "|---|---|"
        for row in _rows(store):
            yield f"| {row[0]} | {row[1]} |"


def _rows(store: dict[str, Any]) -> Iterator[tuple[str, str]]:
    items = list(_ratio_items(store))
    if "drain" in store:
        skipped: set[int] = set()  # process counts said to be skipped (once each)
        compared = {
            name: (label, value) for name, section, label, value in items if section == "compare"
        }
        for key, figures in store["drain"].items():
            setting = _setting(figures)
            if "skipped" not in figures:
                yield f"drain: executions/s, {setting.label}", f"{figures['per_s']:,.0f}"
                baseline = figures.get("baseline", {})
                if f"drain_{key}_over_baseline" in compared:
                    label, value = compared[f"drain_{key}_over_baseline"]
                    yield (
                        f"drain, baseline soloist: executions/s, {setting.label}",
                        f"{baseline['per_s']:,.0f}",
                    )
                    yield f"ratio: {label}", f"{value:.3g}"
                # What one execution cost the worker processes (CPU from ready to stop): a
                # figure that other load on the machine hardly moves, unlike the rate.
                if "cpu_us_per_run" in figures:
                    yield (
                        f"drain: worker CPU µs per execution, {setting.label}",
                        f"{figures['cpu_us_per_run']:,.0f}",
                    )
                if "cpu_us_per_run" in baseline:
                    yield (
                        f"drain, baseline soloist: worker CPU µs per execution, {setting.label}",
                        f"{baseline['cpu_us_per_run']:,.0f}",
                    )
            elif setting.processes not in skipped:
                skipped.add(setting.processes)
                yield f"drain, {setting.processes} worker processes", figures["skipped"]
    if "enqueue" in store:
        yield from _enqueue_rows(store["enqueue"], items)
    if "lateness" in store:
        late = store["lateness"]
        for key, label in (
            ("timer_ms", "lateness, due at a set time"),
            ("wake_ms", "wake-up latency"),
        ):
            p50, p99 = late[key]["p50"], late[key]["p99"]
            yield f"{label}: p50 / p99 ms (idle)", f"{p50:.1f} / {p99:.1f}"
    if "failover" in store:
        yield from _failover_rows(store["failover"])
    if "planning" in store:
        yield from planning_rows(store["planning"])
    yield from _baseline_rows(store)
    for _, section, label, value in items:
        if section in ("drain", "planning"):
            yield f"ratio: {label}", f"{value:.3g}"


def _enqueue_rows(
    enqueue: dict[str, Any], items: list[tuple[str, str, str, float]]
) -> Iterator[tuple[str, str]]:
    yield "enqueue: aenqueue calls/s (sequential)", f"{enqueue['single_per_s']:,.0f}"
    if "sync_single_per_s" in enqueue:
        yield "enqueue: sync enqueue calls/s (sequential)", f"{enqueue['sync_single_per_s']:,.0f}"
    for name, section, label, value in items:
        if section == "enqueue" and name.startswith(("enqueue_single", "enqueue_sync_single")):
            yield label, f"{value:.3g}"
    yield (
        "enqueue: insert_many rows/s (batches of 1000)",
        f"{enqueue['insert_many_rows_per_s']:,.0f}",
    )
    yield (
        "enqueue: enqueue_many tasks/s (2 chunks of 1000 in flight)",
        f"{enqueue['enqueue_many_per_s']:,.0f}",
    )
    for name, section, label, value in items:
        if section == "enqueue" and name.startswith("insert_many"):
            yield label, f"{value:.3g}"


def _failover_rows(failover: dict[str, Any]) -> Iterator[tuple[str, str]]:
    if "skipped" in failover:
        yield "failover", failover["skipped"]
        return
    ttl = failover["lease_ttl_s"]
    yield (
        f"failover after kill -9 of the leader, s (TTL {ttl:g} s)",
        f"{failover['kill9_s']:.2f}",
    )
    yield "failover after SIGTERM of the leader, s", f"{failover['sigterm_s']:.2f}"


def _baseline_rows(store: dict[str, Any]) -> Iterator[tuple[str, str]]:
    base = store["baseline"]
    if "store_round_trips_per_s" in base:
        yield (
            "baseline: store round trips/s (store.now())",
            f"{base['store_round_trips_per_s']:,.0f}",
        )
    if "select_1_per_s" in base:
        yield "baseline: SELECT 1 round trips/s", f"{base['select_1_per_s']:,.0f}"
        yield (
            "baseline: raw INSERT rows/s (batches of 1000)",
            f"{base['raw_insert_rows_per_s']:,.0f}",
        )
        if "raw_insert_one_per_s" in base:
            yield (
                "baseline: raw single INSERTs/s (one row, one commit each)",
                f"{base['raw_insert_one_per_s']:,.0f}",
            )
    if "ping_per_s" in base:
        yield "baseline: PING round trips/s", f"{base['ping_per_s']:,.0f}"
    if "raw_script_per_s" in base:
        yield (
            "baseline: raw EVALSHA/s (HSET of ~200 bytes + ZADD)",
            f"{base['raw_script_per_s']:,.0f}",
        )
    if "range_per_s" in base:
        yield "baseline: etcd single-key Range round trips/s", f"{base['range_per_s']:,.0f}"
        yield (
            "baseline: etcd put + fenced txn, items/s (one at a time)",
            f"{base['raw_put_and_txn_items_per_s']:,.0f}",
        )
        yield (
            "baseline: etcd raw puts rows/s (transactions of 128)",
            f"{base['raw_put_rows_per_s']:,.0f}",
        )
    yield "baseline: pure-Python loop iterations/s", f"{base['python_loops_per_s']:,.0f}"
