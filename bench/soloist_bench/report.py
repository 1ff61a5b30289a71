"""Medians, ratios and the Markdown table of a benchmark result."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from datetime import datetime
from typing import Any

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
    """The median of every numeric figure over ``runs`` (nested dicts too), plus the runs."""
    first = runs[0]
    if "skipped" in first:
        return first
    merged: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            merged[key] = median_of([run[key] for run in runs])
        elif isinstance(value, (int, float)):
            merged[key] = statistics.median(run[key] for run in runs)
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


def ratios(report: dict[str, Any]) -> dict[str, float]:
    """Figures relative to this run's baselines: comparable across machines and moments
    better than the raw figures are (the server and the CPU are shared)."""
    base = report["baseline"]
    ratios: dict[str, float] = {}
    for processes, figures in report.get("drain", {}).items():
        if "per_s" in figures:
            ratios[f"drain_{processes}_per_million_python_loops"] = (
                figures["per_s"] / base["python_loops_per_s"] * 1e6
            )
            if "select_1_per_s" in base:
                ratios[f"drain_{processes}_over_select_1"] = (
                    figures["per_s"] / base["select_1_per_s"]
                )
            if "ping_per_s" in base:
                ratios[f"drain_{processes}_over_ping"] = figures["per_s"] / base["ping_per_s"]
            if "range_per_s" in base:
                ratios[f"drain_{processes}_over_range"] = figures["per_s"] / base["range_per_s"]
                ratios[f"drain_{processes}_over_raw_put_and_txn"] = (
                    figures["per_s"] / base["raw_put_and_txn_items_per_s"]
                )
    tick = report.get("planning", {}).get("tick")
    if tick is not None:
        # A tick's cost in raw round trips of the same server: comparable across runs.
        for name in ("select_1_per_s", "ping_per_s", "range_per_s"):
            if name in base:
                ratios[f"planning_tick_in_{name[:-6]}_round_trips"] = (
                    tick["large"]["tick_ms"] / 1000 * base[name]
                )
    if "raw_insert_rows_per_s" in base and "enqueue" in report:
        ratios["insert_many_over_raw_insert"] = (
            report["enqueue"]["insert_many_rows_per_s"] / base["raw_insert_rows_per_s"]
        )
    if "raw_put_rows_per_s" in base and "enqueue" in report:
        ratios["insert_many_over_raw_put"] = (
            report["enqueue"]["insert_many_rows_per_s"] / base["raw_put_rows_per_s"]
        )
    return ratios


def table(result: dict[str, Any]) -> Iterator[str]:
    """The headline figures as a Markdown table (medians; see the JSON for every run)."""
    yield ""
    yield (
        f"soloist bench, {result['date']}, nproc {result['nproc']}, Python {result['python']}, "
        f"{result['settings']['tasks']} tasks, median of {result['settings']['runs']} runs"
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
    if "drain" in store:
        for processes, figures in store["drain"].items():
            label = f"drain: executions/s, {processes} worker process(es)"
            yield label, figures.get("skipped") or f"{figures['per_s']:,.0f}"
    if "enqueue" in store:
        yield from _enqueue_rows(store["enqueue"])
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


def _enqueue_rows(enqueue: dict[str, Any]) -> Iterator[tuple[str, str]]:
    yield "enqueue: aenqueue calls/s (sequential)", f"{enqueue['single_per_s']:,.0f}"
    yield (
        "enqueue: insert_many rows/s (batches of 1000)",
        f"{enqueue['insert_many_rows_per_s']:,.0f}",
    )
    yield (
        "enqueue: enqueue_many tasks/s (2 chunks of 1000 in flight)",
        f"{enqueue['enqueue_many_per_s']:,.0f}",
    )


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
    for name, value in store["ratios"].items():
        yield f"ratio: {name}", f"{value:.3g}"
