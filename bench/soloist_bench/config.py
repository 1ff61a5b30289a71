"""The benchmark's settings and its constants."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the drain worker imports this module, on any soloist (--compare-src)
    from soloist.context import JobContext

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_FIGURES",
    "DRAIN_TIMEOUT",
    "FAILOVER_JOB",
    "FIGURES",
    "HANDLERS",
    "LOCAL_POSTGRES",
    "NOOP",
    "PLANNED",
    "READY_TIMEOUT",
    "WORKER_LOGGING",
    "BenchConfig",
    "DrainSetting",
    "Echo",
    "noop",
]

#: The benchmark's task: a no-op, a plain ``def`` or an ``async def`` (HANDLERS).
NOOP = "bench_noop"
#: The handler kinds of the drain's task: ``def`` (what most users write: each run hops to
#: a thread of the instance's pool) and ``async`` (``async def``: no thread hop).
HANDLERS = ("def", "async")
#: The drain's default slots per worker process: the library's default (10), then 100.
DEFAULT_CONCURRENCY = (10, 100)
#: How the worker processes log: ``default`` as ``app.run()`` sets up a program that has
#: not configured logging (INFO lines as text to stderr: two per run), ``quiet`` WARNING
#: and above only (logging left unconfigured).
WORKER_LOGGING = ("default", "quiet")
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
    #: The drain matrix: every concurrency x handler kind x process count is measured.
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    handlers: tuple[str, ...] = HANDLERS
    processes: tuple[int, ...] = (1, 2)
    #: How the drain and lateness workers log (one of WORKER_LOGGING).
    worker_logging: str = "default"
    #: ``--compare-src``: the ``src`` folder of another soloist checkout whose code drain
    #: worker processes also run, each run in turn with one of this code's
    #: (:mod:`soloist_bench.compare`; checked by ``check_compare_src``), and its commit.
    compare_src: str | None = None
    compare_commit: str | None = None
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

    def drain_settings(self) -> list[DrainSetting]:
        """The drain matrix in the order it is measured and reported: the default
        concurrencies first (10, then 100), then the others in increasing order; at each,
        the process counts from the most, and ``def`` before ``async`` at each of those
        (the two kinds are measured one after the other, so that their ratio is read
        against the same moment of a noisy machine)."""

        def rank(concurrency: int) -> tuple[int, int]:
            if concurrency in DEFAULT_CONCURRENCY:
                return DEFAULT_CONCURRENCY.index(concurrency), 0
            return len(DEFAULT_CONCURRENCY), concurrency

        return [
            DrainSetting(concurrency, handler, processes)
            for concurrency in sorted(dict.fromkeys(self.concurrency), key=rank)
            for processes in sorted(set(self.processes), reverse=True)
            for handler in HANDLERS
            if handler in self.handlers
        ]


@dataclass(frozen=True)
class DrainSetting:
    """One cell of the drain matrix."""

    concurrency: int
    handler: str
    processes: int

    @property
    def key(self) -> str:
        """Its name in the JSON and in ratio names: ``c10_def_p2``."""
        return f"c{self.concurrency}_{self.handler}_p{self.processes}"

    @property
    def label(self) -> str:
        """Its name in the table: ``concurrency 10, def, 2 worker processes``."""
        kind = "async def" if self.handler == "async" else "def"
        plural = "process" if self.processes == 1 else "processes"
        return f"concurrency {self.concurrency}, {kind}, {self.processes} worker {plural}"


async def noop(ctx: JobContext) -> None:
    """The benchmark task where it is only enqueued, never run (the enqueue figure)."""
    return None
