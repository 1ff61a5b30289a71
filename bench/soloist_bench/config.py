"""The benchmark's settings and its constants."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from soloist.context import JobContext

__all__ = [
    "DRAIN_TIMEOUT",
    "FAILOVER_JOB",
    "LOCAL_POSTGRES",
    "NOOP",
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


async def noop(ctx: JobContext) -> None:
    """The benchmark task."""
    return None
