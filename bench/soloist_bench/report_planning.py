"""The planning figure's rows of the Markdown table, with its bars."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["BARS", "planning_rows"]

#: issue 11's bars: lateness p99 (ms) with one instance and with several; partitions
#: must move within lease TTL + 1 s.
BARS = {"single_p99_ms": 250.0, "cluster_p99_ms": 1000.0, "move_over_ttl_s": 1.0}


def planning_rows(planning: dict[str, Any]) -> Iterator[tuple[str, str]]:
    tick = planning["tick"]
    large, small = tick["large"], tick["small"]
    yield (
        f"planning: tick ms, {large['streams_in_index']:,} streams / "
        f"{small['streams_in_index']:,} streams ({small['streams_in_index']} due)",
        f"{large['tick_ms']:.1f} / {small['tick_ms']:.1f} (x{tick['tick_ratio']:.2f})",
    )
    yield (
        "planning: store round trips per tick, large / small index",
        f"{large['round_trips_per_tick']:g} / {small['round_trips_per_tick']:g}",
    )
    if "single" in planning:
        yield from _instance_rows("planning, 1 instance", planning["single"], "single")
    if "cluster" in planning:
        yield from _instance_rows("planning, cluster", planning["cluster"], "cluster")


def _instance_rows(label: str, figures: dict[str, Any], kind: str) -> Iterator[tuple[str, str]]:
    if "skipped" in figures:
        yield label, figures["skipped"]
        return
    label = f"{label} ({figures['schedules']:,} x every {figures['interval_s']:g}s)"
    bar = BARS[f"{kind}_p99_ms"]
    for name, window in figures["windows"].items():
        late = window["lateness_ms"]
        lateness = f"{late['p50']:.0f} / {late['p99']:.0f}" if late["n"] else "no runs"
        yield (
            f"{label}, {name}: runs/s, lateness p50 / p99 ms (bar {bar:g}), skipped",
            f"{window['runs_per_s']:,.0f}, {lateness}, "
            f"{window['skipped']} (+{window['skipped_in_store']} in store)",
        )
    for name, instances in figures["work"].items():
        cells = [
            f"{w['cpu_percent']:.0f}% CPU, {w['planner_streams_per_s']:,.0f} streams/s, "
            f"planner {w['planner_cpu_s']:.2f} CPU s, {w['partitions_held']} partitions"
            for w in instances.values()
        ]
        yield f"{label}, {name}: per instance", "; ".join(cells)
    yield (
        f"{label}: doubled runs",
        f"{figures['doubled']} (+{figures.get('rerun_after_kill', 0)} rerun after kill -9)",
    )
    failover = figures.get("failover")
    if failover is not None:
        moved = failover["moved_s"]
        yield (
            f"{label}: partitions of the killed holder moved, s (TTL {failover['lease_ttl_s']:g})",
            "not moved" if moved is None else f"{moved:.2f}",
        )
