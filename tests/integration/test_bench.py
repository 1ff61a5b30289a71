"""`soloist bench` runs end to end and reports its figures as JSON (a small run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SOLOIST = Path(sys.executable).parent / "soloist"


def test_bench_reports_every_figure_on_the_memory_store(tmp_path: Path) -> None:
    """A tiny benchmark on memory:// writes drain, enqueue, lateness and baseline figures,
    and says why multi-process figures are skipped."""
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [
            str(SOLOIST),
            "bench",
            "--store",
            "memory://",
            "--tasks",
            "200",
            "--runs",
            "1",
            "--samples",
            "5",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    (store,) = report["stores"]
    assert store["drain"]["1"]["per_s"] > 0
    assert "skipped" in store["drain"]["2"] and "skipped" in store["failover"]
    assert store["enqueue"]["single_per_s"] > 0
    assert store["enqueue"]["insert_many_rows_per_s"] > 0
    assert store["lateness"]["timer_ms"]["p99"] >= 0
    assert "drain: executions/s" in done.stdout


def test_bench_on_redis_measures_with_processes_and_leaves_no_keys(
    tmp_path: Path, redis_url: str
) -> None:
    """A small benchmark on redis:// drains with 1 and 2 worker processes, measures a
    failover with rising epochs, and removes every key it wrote (fresh prefixes)."""
    import redis

    out = tmp_path / "bench.json"
    args = ["--tasks", "300", "--runs", "1", "--samples", "5", "--json", str(out)]
    done = subprocess.run(
        [str(SOLOIST), "bench", "--store", redis_url, *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (store,) = json.loads(out.read_text())["stores"]
    assert store["kind"] == "redis"
    assert store["drain"]["1"]["per_s"] > 0 and store["drain"]["2"]["per_s"] > 0
    assert store["failover"]["runs"][0]["epochs"] == [1, 2, 3]
    assert store["baseline"]["ping_per_s"] > 0
    client = redis.Redis.from_url(redis_url.split("?")[0])
    try:
        assert list(client.scan_iter(match="*soloist-bench-*", count=1000)) == []
    finally:
        client.close()


def test_bench_without_a_clone_says_how_to_install_it() -> None:
    """Where the benchmark package is not installed (soloist from PyPI), ``soloist bench``
    prints one error line saying how to run it from a clone and exits 2, no traceback."""
    code = (
        "import sys\n"
        "sys.modules['soloist_bench'] = None  # as if not installed: import fails\n"
        "from soloist.cli import main\n"
        "main(['bench', '--store', 'memory://'], prog_name='soloist')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "make install" in lines[0] and "pip install -e ./bench" in lines[0]
    assert done.stdout == ""


async def test_bench_baselines_on_postgres_measure_the_raw_server(postgres_dsn: str) -> None:
    """The PostgreSQL baselines (round trips, SELECT 1, raw inserts in the bench's fresh
    schema) run through the store the bench opens, whatever wraps its driver."""
    from soloist_bench.baselines import measure_baseline
    from soloist_bench.config import BenchConfig
    from soloist_bench.targets import Target

    target = Target(postgres_dsn)
    config = BenchConfig(stores=[postgres_dsn], tasks=200, batch=100)
    try:
        figures = await measure_baseline(target, config)
    finally:
        await target.cleanup()
    assert figures["raw_insert_rows_per_s"] > 0
    assert figures["select_1_per_s"] > 0 and figures["store_round_trips_per_s"] > 0


async def test_bench_baselines_on_etcd_measure_the_raw_server(etcd_server: str) -> None:
    """The etcd baselines (single-key reads, a put and a fenced transaction per item, puts
    in transactions of 128) run on the bench's fresh key prefix, and the bench's cleanup
    leaves no key of it behind; the server version comes from the member."""
    from soloist.stores.deadlines import Deadlines
    from soloist.stores.etcd.connections import Connections, prefix_end
    from soloist.stores.etcd.url import parse_url
    from soloist_bench.baselines import measure_baseline, server_version
    from soloist_bench.config import BenchConfig
    from soloist_bench.targets import Target

    target = Target(etcd_server)
    config = BenchConfig(stores=[etcd_server], tasks=300)
    try:
        figures = await measure_baseline(target, config)
        version = await server_version(target)
    finally:
        await target.cleanup()
    assert figures["range_per_s"] > 0 and figures["raw_put_and_txn_items_per_s"] > 0
    assert figures["raw_put_rows_per_s"] > 0
    assert "store_round_trips_per_s" not in figures  # store.now() makes no round trip
    assert version is not None and version[0].isdigit()
    conns = Connections(parse_url(etcd_server), Deadlines.from_ttl(None))
    try:
        left = await conns.range(
            b"/soloist_bench-", prefix_end(b"/soloist_bench-"), count_only=True
        )
    finally:
        await conns.close_all()
    assert left.count == 0


def test_bench_ratios_read_etcd_figures_against_its_baselines() -> None:
    """On etcd the drain is read against single-key reads and one-at-a-time put and
    transaction pairs, and insert_many against raw puts, of the same run."""
    from soloist_bench.report import ratios

    report = {
        "baseline": {
            "python_loops_per_s": 2e6,
            "range_per_s": 1000.0,
            "raw_put_and_txn_items_per_s": 100.0,
            "raw_put_rows_per_s": 8000.0,
        },
        "drain": {"2": {"per_s": 500.0}},
        "enqueue": {"insert_many_rows_per_s": 2000.0},
    }
    found = ratios(report)
    assert found["drain_2_over_range"] == 0.5
    assert found["drain_2_over_raw_put_and_txn"] == 5.0
    assert found["insert_many_over_raw_put"] == 0.25
    assert not any("ping" in name or "select_1" in name for name in found)


def test_bench_planning_figure_on_sqlite(tmp_path: Path) -> None:
    """``--only planning`` at a tiny size on SQLite: tick cost over a 1,000-stream index
    against its 10 due streams (3 round trips a tick either way), and 50 dynamic schedules
    every second run by one instance process: every instant of the window run once, none
    skipped or doubled, lateness and the planner's work reported."""
    out = tmp_path / "bench.json"
    args = [
        "--store",
        f"sqlite:///{tmp_path / 'bench.db'}",
        "--only",
        "planning",
        "--runs",
        "1",
        "--tick-streams",
        "1000",
        "--tick-due",
        "10",
        "--ticks",
        "3",
        "--planning-single-schedules",
        "50",
        "--planning-single-interval",
        "1",
        "--planning-schedules",
        "0",
        "--planning-warmup",
        "1",
        "--planning-window",
        "3",
        "--json",
        str(out),
    ]
    done = subprocess.run(
        [str(Path(sys.executable).with_name("soloist")), "bench", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (store,) = json.loads(out.read_text())["stores"]
    assert "drain" not in store and "failover" not in store  # only what was asked
    tick = store["planning"]["tick"]
    assert tick["large"]["streams_in_index"] == 1000
    assert tick["small"]["streams_in_index"] == 10
    for size in ("large", "small"):
        assert tick[size]["streams_per_tick"] == 10
        assert 2 <= tick[size]["round_trips_per_tick"] <= 4
        assert 0 < tick[size]["tick_ms"] < 1000
    assert tick["round_trip_ratio"] == 1
    assert 0 < tick["tick_ratio"] < 10  # O(due): 100x the streams, not 100x the cost
    single = store["planning"]["single"]
    window = single["windows"]["1 instance"]
    assert window["expected_runs"] == 150  # 50 schedules x 3 s, every second
    assert window["runs"] == 150 and window["skipped"] == 0
    assert window["skipped_in_store"] == 0 and single["doubled"] == 0
    assert 0 <= window["lateness_ms"]["p50"] <= window["lateness_ms"]["p99"] < 2000
    (work,) = single["work"]["1 instance"].values()
    assert work["partitions_held"] == 64
    assert work["planner_streams_per_s"] > 0 and work["cpu_percent"] > 0
    assert "planning, 1 instance" in done.stdout


def test_soloist_bench_offers_every_figure_of_the_benchmark() -> None:
    """``soloist bench --only`` lists the figures the benchmark package measures."""
    from soloist.cli import BENCH_FIGURES
    from soloist_bench.config import FIGURES

    assert BENCH_FIGURES == FIGURES
