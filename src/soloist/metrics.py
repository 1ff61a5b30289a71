"""Prometheus metrics of one scheduler (served by ``GET /metrics``).

Each :class:`Metrics` has its own ``CollectorRegistry``, not prometheus_client's global
one, so that two schedulers in one process (tests, an app with two stores) do not clash.
The runtime calls a few cheap methods; the executor's per-run path looks up one dict entry
(:meth:`Metrics.job`, the labelled children of a job, made once per job) and increments.

What the store holds (occurrences by job and state, the queue depth) is not counted by the
runtime: it is read with :meth:`Store.occurrence_counts` when ``/metrics`` is scraped,
at most once per :data:`COUNTS_MAX_AGE` seconds (:meth:`Metrics.refresh_counts`), for the
labelled jobs only and every other job by state together (``jobs=``), so that the reading
does not grow with the number of dynamic schedules either.

Labels stay bounded whatever the number of jobs: a ``job`` label names a job or task
defined in this process's code (the registry's tasks), or one of the names configured in
``metrics_jobs`` (``SOLOIST_METRICS_JOBS``); every other job (dynamic schedules added at
run time, jobs only another app defines) is counted under ``job="(dynamic)"``
(:data:`AGGREGATED`), in the runtime's counters and in the store's counts alike. Scopes are
never a label. docs/reference/http.md, "Metrics", states the rule for users.

Metric names (all ``soloist_``): ``occurrences{job,state}``, ``queue_depth``,
``runs_total{job,outcome}``, ``run_duration_seconds{job}``, ``lateness_seconds{job}``,
``retries_total{job}``, ``lease_steals_total{job}``, ``is_leader``,
``leader_changes_total``, ``store_errors_total{operation}``,
``instance_info{instance_id,mode}``, ``leaked_threads`` and ``thread_leaks_total``
(sync handlers still running after a timeout, read from the worker pool at scrape time),
``store_data_lost_total`` (times this instance found that the store lost its data).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter as Tally
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from soloist.stores.core import checked

if TYPE_CHECKING:
    from soloist.models import OccurrenceCounts
    from soloist.stores.base import Store

__all__ = [
    "AGGREGATED",
    "CONTENT_TYPE_LATEST",
    "COUNTS_MAX_AGE",
    "NO_METRICS",
    "JobMetrics",
    "LeakCounts",
    "Metrics",
    "NoMetrics",
    "RuntimeMetrics",
]

log = logging.getLogger("soloist")

#: The ``job`` label of every job that keeps no label of its own: dynamic schedules (and
#: jobs only other apps define) are counted together, so that the number of series does
#: not grow with them.
AGGREGATED = "(dynamic)"

#: How long a reading of the store's counts serves scrapes before it is read again.
COUNTS_MAX_AGE = 5.0

#: Handlers run from milliseconds to an hour.
DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
    1800,
    3600,
)
#: Start - plan time: milliseconds when healthy, up to a lease TTL after a crash.
LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

#: Outcomes of attempts counted by ``soloist_runs_total``; ``fenced``: the outcome was
#: rejected because the lease had been lost; ``lease_lost``: the run stopped because its
#: lease was lost, or lost it while it waited (claimed ahead) for a slot; nothing was
#: written (it runs again once reaped); ``unrecorded``: the
#: outcome could not be written before the lease ran out (it runs again once reaped);
#: ``cancelled``: stopped because someone cancelled the occurrence (``dead`` in the store,
#: counted apart so that alerts on ``dead`` do not fire for it).
OUTCOMES = (
    "succeeded",
    "failed",
    "dead",
    "cancelled",
    "released",
    "fenced",
    "lease_lost",
    "unrecorded",
)


class JobMetrics:
    """The labelled children of one job, made once, so that a run only increments."""

    __slots__ = ("duration", "lateness", "outcomes", "retries", "steals")

    def __init__(self, metrics: Metrics, job: str) -> None:
        self.outcomes = {o: metrics.runs_total.labels(job, o) for o in OUTCOMES}
        self.duration = metrics.run_duration.labels(job)
        self.lateness = metrics.lateness.labels(job)
        self.retries = metrics.retries_total.labels(job)
        self.steals = metrics.lease_steals_total.labels(job)


class _OccurrenceCollector(Collector):
    """``soloist_occurrences`` and ``soloist_queue_depth`` from the last store reading."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return [
            GaugeMetricFamily("soloist_occurrences", "", labels=["job", "state"]),
            GaugeMetricFamily("soloist_queue_depth", ""),
        ]

    def collect(self) -> Iterable[Metric]:
        counts = self._metrics.counts
        if counts is None:
            return []  # never read (or the store failed every time): say nothing
        by_label = self._metrics.counts_by_label(counts)
        by_state = GaugeMetricFamily(
            "soloist_occurrences",
            "Occurrences in the store by job and state (read at scrape time, cached "
            f"{COUNTS_MAX_AGE:.0f}s).",
            labels=["job", "state"],
        )
        for (job, state), count in sorted(by_label.items()):
            by_state.add_metric([job, state], count)
        depth = GaugeMetricFamily(
            "soloist_queue_depth",
            "Claimable occurrences (scheduled or failed) whose due time has passed.",
            value=counts.due,
        )
        return [by_state, depth]


class LeakCounts(Protocol):
    """What the sync handlers' worker pool reports about leaked threads."""

    @property
    def leaked(self) -> int: ...

    leaked_total: int


class _LeakCollector(Collector):
    """``soloist_leaked_threads`` and ``soloist_thread_leaks_total`` from the worker pool
    of the running instance (0 before one runs)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return [
            GaugeMetricFamily("soloist_leaked_threads", ""),
            CounterMetricFamily("soloist_thread_leaks", ""),
        ]

    def collect(self) -> Iterable[Metric]:
        pool = self._metrics.pool
        now = GaugeMetricFamily(
            "soloist_leaked_threads",
            "Worker threads still running a sync handler whose run was cancelled "
            "(timeout): Python cannot stop them.",
            value=pool.leaked if pool is not None else 0,
        )
        total = CounterMetricFamily(
            "soloist_thread_leaks",
            "Sync handler calls that kept running after their run was cancelled (timeout).",
            value=pool.leaked_total if pool is not None else 0,
        )
        return [now, total]


class RuntimeMetrics(Protocol):
    """What the runtime's services report: :class:`Metrics` counts it, :data:`NO_METRICS`
    drops it (a service built without metrics, as in unit tests)."""

    def run_started(self, job: str, lateness_s: float) -> None: ...

    def run_finished(self, job: str, outcome: str, duration_s: float | None = None) -> None: ...

    def lease_stolen(self, job: str) -> None: ...

    def leadership(self, leading: bool) -> None: ...

    def store_error(self, operation: str) -> None: ...

    def store_data_lost(self) -> None: ...


class NoMetrics:
    """A :class:`RuntimeMetrics` that counts nothing, so that services never check for a
    missing one."""

    def run_started(self, job: str, lateness_s: float) -> None:
        """Counts nothing."""

    def run_finished(self, job: str, outcome: str, duration_s: float | None = None) -> None:
        """Counts nothing."""

    def lease_stolen(self, job: str) -> None:
        """Counts nothing."""

    def leadership(self, leading: bool) -> None:
        """Counts nothing."""

    def store_error(self, operation: str) -> None:
        """Counts nothing."""

    def store_data_lost(self) -> None:
        """Counts nothing."""


#: The metrics of a service built without any.
NO_METRICS: RuntimeMetrics = NoMetrics()


class Metrics:
    """The metrics of one scheduler instance, in their own registry.

    ``defined``: the names that keep their own ``job`` label, looked up at each use (the
    scheduler passes its registry's tasks, which name every job and task defined in
    code, so that jobs defined after the scheduler was made count too); ``keep``: more
    names that keep theirs (the ``metrics_jobs`` setting). Any other job is counted
    under :data:`AGGREGATED`. ``defined=None`` gives every job its label (a bare
    :class:`Metrics`, as unit tests make)."""

    def __init__(
        self,
        instance_id: str,
        mode: str,
        *,
        defined: Collection[str] | None = None,
        keep: Iterable[str] = (),
    ) -> None:
        self._defined = defined
        self._keep = frozenset(keep)
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.runs_total = Counter(
            "soloist_runs_total",
            "Attempts finished by this instance, by outcome.",
            ["job", "outcome"],
            registry=r,
        )
        self.run_duration = Histogram(
            "soloist_run_duration_seconds",
            "Handler run time of attempts finished by this instance.",
            ["job"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.lateness = Histogram(
            "soloist_lateness_seconds",
            "Start minus plan time of first attempts started by this instance.",
            ["job"],
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.retries_total = Counter(
            "soloist_retries_total",
            "Failed attempts of this instance that will be retried.",
            ["job"],
            registry=r,
        )
        self.lease_steals_total = Counter(
            "soloist_lease_steals_total",
            "Expired leases of other runners that this instance's reaper took over.",
            ["job"],
            registry=r,
        )
        self.is_leader = Gauge(
            "soloist_is_leader", "1 while this instance is the leader.", registry=r
        )
        self.leader_changes_total = Counter(
            "soloist_leader_changes_total",
            "Leadership gained or lost by this instance.",
            registry=r,
        )
        self.store_errors_total = Counter(
            "soloist_store_errors_total",
            "Store errors caught by the runtime loops, by operation.",
            ["operation"],
            registry=r,
        )
        self.instance_info = Gauge(
            "soloist_instance_info",
            "This instance (always 1).",
            ["instance_id", "mode"],
            registry=r,
        )
        self.instance_info.labels(instance_id, mode).set(1)
        self.store_data_lost_total = Counter(
            "soloist_store_data_lost_total",
            "Times this instance found that the store had lost its data (a Redis restart "
            "without persistence, a flush) and set it up again.",
            registry=r,
        )
        self.registry.register(_OccurrenceCollector(self))
        #: The worker pool of the running instance (set by the Runtime).
        self.pool: LeakCounts | None = None
        self.registry.register(_LeakCollector(self))
        self._jobs: dict[str, JobMetrics] = {}
        #: The last reading of the store's counts (by job name, as the store keeps them).
        self.counts: OccurrenceCounts | None = None
        self._by_label: tuple[OccurrenceCounts, dict[tuple[str, str], int]] | None = None
        self._counts_at = float("-inf")
        self._counts_lock: asyncio.Lock | None = None

    # -- labels -------------------------------------------------------------------------------
    def label(self, job: str) -> str:
        """The ``job`` label of ``job``: its name if it is defined in code here or kept by
        ``metrics_jobs``, else :data:`AGGREGATED`."""
        if self._defined is None or job in self._defined or job in self._keep:
            return job
        return AGGREGATED

    def labelled(self) -> frozenset[str] | None:
        """The names that have a label of their own now (None: every name)."""
        if self._defined is None:
            return None
        return frozenset(self._defined) | self._keep

    def counts_by_label(self, counts: OccurrenceCounts) -> dict[tuple[str, str], int]:
        """``counts`` by (job label, state value): the jobs without a label of their own
        (and ``others``, when the store summed them) under :data:`AGGREGATED`. Worked
        out once per reading of the store."""
        cached = self._by_label
        if cached is not None and cached[0] is counts:
            return cached[1]
        summed: Tally[tuple[str, str]] = Tally()
        for (job, state), count in counts.by_job_state.items():
            summed[(self.label(job), state.value)] += count
        for state, count in (counts.others or {}).items():
            summed[(AGGREGATED, state.value)] += count
        self._by_label = (counts, dict(summed))
        return self._by_label[1]

    # -- called by the runtime ------------------------------------------------------------------
    def job(self, job: str) -> JobMetrics:
        """The children of ``job``'s label (made on first use): the executor's per-run
        entry point. Jobs without a label of their own share the children of
        :data:`AGGREGATED`, so that this map stays as small as the label set."""
        label = self.label(job)
        children = self._jobs.get(label)
        if children is None:
            children = self._jobs[label] = JobMetrics(self, label)
        return children

    def run_started(self, job: str, lateness_s: float) -> None:
        self.job(job).lateness.observe(lateness_s)

    def run_finished(self, job: str, outcome: str, duration_s: float | None = None) -> None:
        children = self.job(job)
        children.outcomes[outcome].inc()
        if duration_s is not None:
            children.duration.observe(duration_s)
        if outcome == "failed":
            children.retries.inc()

    def lease_stolen(self, job: str) -> None:
        self.job(job).steals.inc()

    def leadership(self, leading: bool) -> None:
        """This instance became leader (True) or lost leadership (False)."""
        self.is_leader.set(1 if leading else 0)
        self.leader_changes_total.inc()

    def store_error(self, operation: str) -> None:
        self.store_errors_total.labels(operation).inc()

    def store_data_lost(self) -> None:
        self.store_data_lost_total.inc()

    # -- scraping ---------------------------------------------------------------------------------
    async def refresh_counts(self, store: Store, *, max_age: float = COUNTS_MAX_AGE) -> None:
        """Read :meth:`Store.occurrence_counts` unless the last reading is younger than
        ``max_age`` seconds: of the labelled jobs, the others by state together. Concurrent
        scrapes share one read. A failure keeps the last reading, is counted under
        ``operation="occurrence_counts"`` and logged."""
        if self._counts_lock is None:
            self._counts_lock = asyncio.Lock()
        async with self._counts_lock:
            if time.monotonic() - self._counts_at < max_age:
                return
            try:
                labelled = self.labelled()
                if labelled is None:
                    self.counts = await store.occurrence_counts()
                else:
                    self.counts = await checked(store).occurrence_counts(jobs=labelled)
            except Exception as exc:
                self.store_error("occurrence_counts")
                log.warning(
                    "could not read occurrence counts for /metrics: %s",
                    exc,
                    extra={"action": "metrics_error"},
                )
                return
            self._counts_at = time.monotonic()

    def exposition(self) -> bytes:
        """The Prometheus text format of everything in this registry."""
        return generate_latest(self.registry)
