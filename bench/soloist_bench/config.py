"""The benchmark's settings and its constants."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from soloist.context import JobContext

__all__ = [
    "DEFAULT_FIGURES",
    "DRAIN_TIMEOUT",
    "FAILOVER_JOB",
    "FIGURES",
    "LOCAL_POSTGRES",
    "NOOP",
    "PLANNED",
    "READY_TIMEOUT",
    "BenchConfig",
    "Echo",
    "noop",
]

#: The benchmark's task: an async no-op (no thread hop, nothing but soloist's own work).
NOOP = "bench_noop"
#: A PostgreSQL server to try when no store is given (the test suite's default).
LOCAL_POSTGRES = "postgresql://127.0.0.1:5432/test"
FAILOVER_JOB = "failover_tick"
READY_TIMEOUT = 60.0
#: The task of the planning figure's dynamic schedules (a sync ``def`` that records each run).
PLANNED = "bench_planned"
#: The figures ``--only`` selects from; a run without ``--only`` measures DEFAULT_FIGURES
#: (planning takes minutes at its default sizes, so it is asked for by name).
FIGURES = ("drain", "enqueue", "lateness", "failover", "planning")
DEFAULT_FIGURES = ("drain", "enqueue", "lateness", "failover")
DRAIN_TIMEOUT = 300.0

Echo = Callable[[str], None]


@dataclass
class BenchConfig:
    """What ``soloist bench`` measures, how much and how often (its options)."""

    stores: list[str]
    tasks: int = 10_000
    runs: int = 3
    concurrency: int = 1000
    processes: tuple[int, ...] = (1, 2)
    samples: int = 50
    spacing: float = 0.1
    enqueue_calls: int = 2_000
    batch: int = 1_000
    json_path: str | None = None
    echo: Echo = field(default=print)
    #: The figures to measure (baselines are always measured); empty: DEFAULT_FIGURES.
    only: tuple[str, ...] = ()
    #: Planning, tick cost: streams in the index, of which ``tick_due`` are due; ticks.
    tick_streams: int = 100_000
    tick_due: int = 100
    ticks: int = 7
    #: Planning, one instance: schedules every ``single_interval`` seconds.
    single_schedules: int = 10_000
    single_interval: float = 10.0
    #: Planning, several instances: schedules every ``cluster_interval`` seconds (0: skip).
    cluster_schedules: int = 100_000
    cluster_interval: float = 60.0
    cluster_instances: int = 3
    #: Seconds of warm-up before, and length of, each measured window.
    warmup: float = 20.0
    window: float = 60.0

    def figures(self) -> tuple[str, ...]:
        return self.only or DEFAULT_FIGURES


async def noop(ctx: JobContext) -> None:
    """The benchmark task."""
    return None
