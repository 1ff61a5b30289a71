"""``soloist bench``: throughput and latency of one store, measured the same way each time.

The benchmark lives beside the library, not in it: it is installed from a clone (``make
install``, or ``pip install -e ./bench``) as the package ``soloist_bench``, which the
``soloist bench`` command imports when it runs.

Every figure is the median of ``runs`` repetitions, each on fresh data (a new PostgreSQL
schema, a new SQLite file, a new memory store), and comes with baselines measured in the
same invocation (store round trips, raw SQL on PostgreSQL, raw ``PING`` on Redis, raw
reads and writes on etcd, a pure-Python loop) so that figures taken on a noisy machine can
be compared as ratios. docs/benchmarks.md explains
the method and the results; bench/README.md says how to rerun.

* **drain**: ``tasks`` no-op tasks are drained by 1 and by 2 worker *processes*
  (``python -m soloist_bench worker``, each one soloist instance), for each concurrency
  (slots per process; default 10, the library's default, and 100) and each handler kind
  (a plain ``def``, run on a thread of the instance's pool, and an ``async def``). The
  workers log as ``app.run()`` sets up a program that configured nothing (INFO lines as
  text to stderr: two per run, kept in a temporary file), unless ``worker_logging`` is
  ``quiet``. The workers start first and sit idle; then all tasks are inserted, due at
  once, in one ``occurrence_insert_many``, and the clock starts. The figure is ``tasks /
  (last finished_at - first started_at)``, both read from the store (the database clock):
  process start-up and the insert are outside the window. The handlers count their runs
  by kind, and each drain reports those counts (``handler_runs``) and the lines the
  workers logged.
* **enqueue**: sequential ``aenqueue`` calls per second, and sequential sync ``enqueue``
  calls per second from a thread with no event loop, through a scheduler of its own (as a
  Django view or a script calls it: ``sync_single_per_s``) (one statement each; read against
  the raw round trip and the raw single durable write of the same server: a one-row
  ``INSERT`` in its own commit on PostgreSQL, an ``EVALSHA`` of an ``HSET`` and a ``ZADD``
  on Redis), and rows per second through ``occurrence_insert_many`` in batches of 1000,
  including building and validating the rows as ``enqueue`` does.
* **lateness** on an idle instance (one worker process, default settings, an ``async
  def`` handler): ``samples``
  tasks due at known instants ``spacing`` apart, inserted in advance (``started_at -
  due_at``: how precisely the executor's timer fires), and the same number enqueued "now"
  by this process while the worker idles (``started_at - created_at``: how fast a wake-up
  crosses processes; LISTEN/NOTIFY on PostgreSQL, the poll interval elsewhere).
* **failover**: three leader-mode instances (real processes) with the default lease TTL;
  the seconds from a ``kill -9``, then a SIGTERM, of the leader to the first occurrence
  started by the next one (:mod:`soloist_bench.failover`).

The modules, by concern: :mod:`~soloist_bench.config` (options and constants),
:mod:`~soloist_bench.targets` (fresh storage per measurement, from
:class:`soloist.testing.isolated.IsolatedStores`, and raw connections for the baselines),
:mod:`~soloist_bench.processes` and :mod:`~soloist_bench.worker` (the instances under
measurement), :mod:`~soloist_bench.compare` (``--compare-src``: the drain of another
soloist checkout's code beside this one's),
:mod:`~soloist_bench.workloads` and :mod:`~soloist_bench.failover` (the measurements),
:mod:`~soloist_bench.baselines`, :mod:`~soloist_bench.report` (medians, ratios, the table)
and :mod:`~soloist_bench.run` (the whole run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from soloist_bench.config import BenchConfig
    from soloist_bench.run import bench_main, default_store_url, run_bench

__all__ = ["BenchConfig", "bench_main", "default_store_url", "run_bench"]


def __getattr__(name: str) -> Any:
    # Imported when first asked for, not with the package: ``python -m soloist_bench
    # worker`` imports this package too, and its worker may run another checkout's
    # soloist (--compare-src), which need not have what the rest of the bench imports.
    if name == "BenchConfig":
        from soloist_bench.config import BenchConfig

        return BenchConfig
    if name in __all__:
        from soloist_bench import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
