"""`soloist bench` runs end to end and reports its figures as JSON (a small run)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

SOLOIST = Path(sys.executable).parent / "soloist"


def test_bench_reports_every_figure_on_the_memory_store(tmp_path: Path) -> None:
    """A tiny benchmark on memory:// at the default drain matrix writes drain (concurrency
    10 and 100, a def and an async def handler, each run by the handler of its kind, with
    the workers' default logging), enqueue, lateness and baseline figures, and says why
    multi-process figures are skipped."""
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
    assert report["settings"]["concurrency"] == [10, 100]
    assert report["settings"]["handlers"] == ["def", "async"]
    assert report["settings"]["worker_logging"] == "default"
    (store,) = report["stores"]
    measured = {key: figures for key, figures in store["drain"].items() if "per_s" in figures}
    assert list(measured) == ["c10_def_p1", "c10_async_p1", "c100_def_p1", "c100_async_p1"]
    for figures in measured.values():
        assert figures["per_s"] > 0
        # The handlers count their runs: each drain ran the kind it names, every task.
        assert figures["handler_runs"] == {figures["handler"]: 200}
        # app.run()'s default logging: a "claimed" and a "succeeded" line per run.
        assert figures["worker_log_lines"] >= 400
    assert "skipped" in store["drain"]["c10_def_p2"] and "skipped" in store["failover"]
    assert store["enqueue"]["single_per_s"] > 0
    assert store["enqueue"]["insert_many_rows_per_s"] > 0
    assert store["lateness"]["timer_ms"]["p99"] >= 0
    assert store["ratios"]["drain_c10_p1_def_over_async"] > 0
    rows = [line for line in done.stdout.splitlines() if line.startswith("| drain")]
    assert [row.split("|")[1].strip() for row in rows] == [
        "drain, 2 worker processes",
        "drain: executions/s, concurrency 10, def, 1 worker process",
        "drain: executions/s, concurrency 10, async def, 1 worker process",
        "drain: executions/s, concurrency 100, def, 1 worker process",
        "drain: executions/s, concurrency 100, async def, 1 worker process",
    ]


def test_bench_drain_options_pick_the_matrix_and_the_logging(tmp_path: Path) -> None:
    """``--concurrency`` (repeatable), ``--handler`` and ``--worker-logging quiet`` choose
    what the drain measures: only def handlers, at the concurrencies given (10 first, the
    others after it), their instances logging nothing below WARNING."""
    out = tmp_path / "bench.json"
    args = ["--store", "memory://", "--only", "drain", "--tasks", "100", "--runs", "1"]
    args += ["--concurrency", "3", "--concurrency", "10", "--handler", "def"]
    args += ["--worker-logging", "quiet", "--json", str(out)]
    done = subprocess.run(
        [str(SOLOIST), "bench", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["settings"]["handlers"] == ["def"]
    assert report["settings"]["worker_logging"] == "quiet"
    (store,) = report["stores"]
    assert list(store["drain"]) == ["c10_def_p2", "c10_def_p1", "c3_def_p2", "c3_def_p1"]
    for key in ("c10_def_p1", "c3_def_p1"):
        figures = store["drain"][key]
        assert figures["handler_runs"] == {"def": 100}
        assert figures["worker_log_lines"] == 0
    assert store["drain"]["c3_def_p1"]["concurrency"] == 3
    assert "enqueue" not in store and "lateness" not in store
    assert "concurrency 3, def, 1 worker process" in done.stdout


def assert_no_bench_keys_left(redis_url: str) -> None:
    """No key under any bench prefix is left on the server. Another bench test may be
    running at the same time (the tiers run on several workers) and hold keys of its own
    until it ends: keys still there after 150 s (longer than any bench test runs) are
    left behind for good."""
    import redis

    client = redis.Redis.from_url(redis_url.split("?")[0])
    try:
        deadline = time.monotonic() + 150
        while True:
            left = list(client.scan_iter(match="*soloist-bench-*", count=1000))
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert left == [], f"{len(left)} bench key(s) left, e.g. {left[:3]}"
    finally:
        client.close()


def test_bench_on_redis_measures_with_processes_and_leaves_no_keys(
    tmp_path: Path, redis_url: str
) -> None:
    """A small benchmark on redis:// drains with 1 and 2 worker processes that run a plain
    def handler and log as app.run() does, measures a failover with rising epochs and the
    raw script baseline, and removes every key it wrote (fresh prefixes)."""

    out = tmp_path / "bench.json"
    args = ["--tasks", "300", "--runs", "1", "--samples", "5", "--json", str(out)]
    args += ["--concurrency", "10", "--handler", "def"]
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
    assert list(store["drain"]) == ["c10_def_p2", "c10_def_p1"]
    for figures in store["drain"].values():
        assert figures["per_s"] > 0
        # Counted by the handlers in the worker processes, reported when they stop.
        assert figures["handler_runs"] == {"def": 300}
        assert figures["worker_log_lines"] >= 600
        # The workers' CPU from ready to stop, all processes, and per execution.
        assert figures["worker_cpu_s"] > 0
        assert figures["cpu_us_per_run"] == figures["worker_cpu_s"] / 300 * 1e6
    assert "| drain: worker CPU µs per execution, concurrency 10, def, 1 worker process |" in (
        done.stdout
    )
    assert store["drain"]["c10_def_p2"]["instances_used"] in (1, 2)
    assert store["failover"]["runs"][0]["epochs"] == [1, 2, 3]
    assert store["baseline"]["ping_per_s"] > 0 and store["baseline"]["raw_script_per_s"] > 0
    assert store["ratios"]["enqueue_single_over_raw_script"] > 0
    assert store["ratios"]["drain_c10_def_p2_over_ping"] > 0
    assert "aenqueue rate / raw EVALSHA (HSET + ZADD) rate" in done.stdout
    assert_no_bench_keys_left(redis_url)


def test_bench_compare_src_measures_each_drain_for_both_codes_in_turn(tmp_path: Path) -> None:
    """``--compare-src`` (here this checkout's own src folder) measures every drain
    setting for this code and for workers running the soloist of DIR, run by run in turn,
    and reports both medians and their ratio, in the table and in the JSON, with DIR and
    its commit in the settings."""
    import soloist

    src = Path(soloist.__file__).resolve().parents[1]
    out = tmp_path / "bench.json"
    args = ["--store", f"sqlite:///{tmp_path / 'bench.db'}", "--only", "drain"]
    args += ["--tasks", "50", "--runs", "2", "--concurrency", "10", "--handler", "async"]
    args += ["--compare-src", str(src), "--json", str(out)]
    done = subprocess.run(
        [str(SOLOIST), "bench", *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["settings"]["compare_src"] == str(src)
    head = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    assert report["settings"]["compare_commit"] == (head or None)
    (store,) = report["stores"]
    assert list(store["drain"]) == ["c10_async_p2", "c10_async_p1"]
    for key, figures in store["drain"].items():
        baseline = figures["baseline"]
        assert figures["per_s"] > 0 and baseline["per_s"] > 0
        assert len(figures["runs"]) == len(baseline["runs"]) == 2
        assert baseline["handler_runs"] == figures["handler_runs"] == {"async": 50}
        ratio = store["ratios"][f"drain_{key}_over_baseline"]
        assert ratio == figures["per_s"] / baseline["per_s"]
        assert len(figures["over_baseline_runs"]) == 2
    # In turn: this code, then the baseline, at each run of each setting.
    progress = [line.strip() for line in done.stdout.splitlines() if " run " in line]
    assert [line.split(":")[0] for line in progress if line.startswith("drain")] == [
        f"drain, concurrency 10, async def, {p}{base} run {i}/2"
        for p in ("2 worker processes", "1 worker process")
        for i in (1, 2)
        for base in ("", ", baseline")
    ]
    rows = [line.split("|")[1].strip() for line in done.stdout.splitlines() if "| drain" in line]
    assert rows[:2] == [
        "drain: executions/s, concurrency 10, async def, 2 worker processes",
        "drain, baseline soloist: executions/s, concurrency 10, async def, 2 worker processes",
    ]
    assert "| ratio: drain this code / baseline soloist, concurrency 10, async def, 1 " in (
        done.stdout
    )
    assert f"baseline soloist: {src}" in done.stdout


def test_bench_compare_src_refuses_what_it_cannot_compare(tmp_path: Path) -> None:
    """``--compare-src`` is refused with a usage error (exit 2) naming the value, before
    anything is measured: with memory:// (no worker processes), without the drain among
    the figures, for a missing folder, a folder without soloist/__init__.py, and a soloist
    that lacks what the drain worker uses (a worker is started on it to ask)."""
    old = tmp_path / "old" / "soloist"
    old.mkdir(parents=True)
    (old / "__init__.py").write_text("")
    (old / "scheduler.py").write_text(
        "class Scheduler:\n    def __init__(self, url, concurrency=10):\n        pass\n"
    )
    sqlite = f"sqlite:///{tmp_path / 'bench.db'}"
    old_src, missing, no_soloist = str(old.parent), str(tmp_path / "none"), str(tmp_path)
    # (options, what the error says: the value and the reason)
    cases = [
        (["--store", "memory://", "--only", "drain"], old_src, ["'memory://'"]),
        (["--store", sqlite, "--only", "enqueue"], old_src, ["drain only"]),
        (["--store", sqlite, "--only", "drain"], missing, [missing, "no such directory"]),
        (["--store", sqlite], no_soloist, [no_soloist, "no soloist/__init__.py"]),
        (
            ["--store", sqlite],
            old_src,
            [old_src, f"{old} lacks", "Scheduler(grace_period=)", "soloist.logs"],
        ),
    ]
    for args, src, said in cases:
        done = subprocess.run(
            [str(SOLOIST), "bench", *args, "--compare-src", src],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, (args, done.stderr)
        error = done.stderr.strip().splitlines()[-1]
        assert error.startswith("error: --compare-src"), error
        for part in said:
            assert part in error, (part, error)
        assert done.stdout == ""  # nothing measured


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
    """The PostgreSQL baselines (round trips, SELECT 1, raw inserts in batches and one at a
    time, in the bench's fresh schema) run through the store the bench opens, whatever
    wraps its driver."""
    from soloist_bench.baselines import measure_baseline
    from soloist_bench.config import BenchConfig
    from soloist_bench.targets import Target

    target = Target(postgres_dsn)
    config = BenchConfig(stores=[postgres_dsn], tasks=200, batch=100)
    try:
        figures = await measure_baseline(target, config)
    finally:
        await target.cleanup()
    assert figures["raw_insert_rows_per_s"] > 0 and figures["raw_insert_one_per_s"] > 0
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


def _drain(concurrency: int, handler: str, processes: int, per_s: float) -> dict[str, object]:
    return {
        "concurrency": concurrency,
        "handler": handler,
        "processes": processes,
        "per_s": per_s,
    }


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
        "drain": {"c10_def_p2": _drain(10, "def", 2, 500.0)},
        "enqueue": {"single_per_s": 50.0, "insert_many_rows_per_s": 2000.0},
    }
    found = ratios(report)
    assert found["drain_c10_def_p2_over_range"] == 0.5
    assert found["drain_c10_def_p2_over_raw_put_and_txn"] == 5.0
    assert found["insert_many_over_raw_put"] == 0.25
    assert found["enqueue_single_over_range"] == 0.05
    assert not any("ping" in name or "select_1" in name for name in found)


def test_bench_table_leads_with_the_default_settings_and_reads_them_as_ratios() -> None:
    """The table shows the drain at concurrency 10 (def, then async def; 2 processes, then
    1) before 100 and before any other concurrency, then enqueue with aenqueue's ratios
    to SELECT 1 and to a raw single INSERT; the ratios read each drain setting against
    SELECT 1 and def against async def at the same setting."""
    from soloist_bench.config import BenchConfig
    from soloist_bench.report import ratios, table

    config = BenchConfig(stores=["postgresql://x"], concurrency=(1000, 100, 10))
    drain = {
        s.key: _drain(
            s.concurrency, s.handler, s.processes, 1000.0 if s.handler == "def" else 2000.0
        )
        for s in config.drain_settings()
    }
    store = {
        "store": "postgresql://x",
        "kind": "postgresql",
        "server_version": "15",
        "baseline": {
            "python_loops_per_s": 2e6,
            "store_round_trips_per_s": 3000.0,
            "select_1_per_s": 4000.0,
            "raw_insert_rows_per_s": 100_000.0,
            "raw_insert_one_per_s": 1600.0,
        },
        "drain": drain,
        "enqueue": {
            "single_per_s": 800.0,
            "insert_many_rows_per_s": 20_000.0,
            "enqueue_many_per_s": 30_000.0,
        },
    }
    store["ratios"] = ratios(store)
    assert store["ratios"]["drain_c10_p2_def_over_async"] == 0.5
    assert store["ratios"]["drain_c1000_async_p1_over_select_1"] == 0.5
    assert store["ratios"]["enqueue_single_over_select_1"] == 0.2
    assert store["ratios"]["enqueue_single_over_raw_insert_one"] == 0.5
    result = {
        "date": "today",
        "nproc": 2,
        "python": "3",
        "settings": {"tasks": 10, "runs": 1, "worker_logging": "default"},
        "stores": [store],
    }
    labels = [line.split("|")[1].strip() for line in table(result) if line.startswith("| ")]
    assert labels[:9] == [
        "figure",
        "drain: executions/s, concurrency 10, def, 2 worker processes",
        "drain: executions/s, concurrency 10, async def, 2 worker processes",
        "drain: executions/s, concurrency 10, def, 1 worker process",
        "drain: executions/s, concurrency 10, async def, 1 worker process",
        "drain: executions/s, concurrency 100, def, 2 worker processes",
        "drain: executions/s, concurrency 100, async def, 2 worker processes",
        "drain: executions/s, concurrency 100, def, 1 worker process",
        "drain: executions/s, concurrency 100, async def, 1 worker process",
    ]
    assert labels[9] == "drain: executions/s, concurrency 1000, def, 2 worker processes"
    assert labels[13:16] == [
        "enqueue: aenqueue calls/s (sequential)",
        "enqueue: aenqueue rate / SELECT 1 rate",
        "enqueue: aenqueue rate / raw single INSERT rate",
    ]
    assert "ratio: drain / SELECT 1, concurrency 10, def, 2 worker processes" in labels
    assert "ratio: drain def / async def, concurrency 100, 1 worker process" in labels


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
    """``soloist bench --only``, ``--handler`` and ``--worker-logging`` list the figures,
    handler kinds and logging modes the benchmark package knows."""
    from soloist.cli import BENCH_FIGURES, BENCH_HANDLERS, BENCH_WORKER_LOGGING
    from soloist_bench.config import FIGURES, HANDLERS, WORKER_LOGGING

    assert BENCH_FIGURES == FIGURES
    assert BENCH_HANDLERS == HANDLERS
    assert BENCH_WORKER_LOGGING == WORKER_LOGGING


def test_bench_operator_times_the_views_of_an_instance_running_dynamic_schedules(
    tmp_path: Path, redis_url: str
) -> None:
    """``soloist bench operator`` (a small N) creates the dynamic schedules, starts one
    ``soloist run --http`` instance that runs them (each one once before the views are
    timed), times every view and reports /metrics' size against the 200 KB bar, in the
    JSON and the table, and removes every key it wrote."""

    out = tmp_path / "operator.json"
    args = ["--store", redis_url, "--jobs", "50", "--requests", "1", "--json", str(out)]
    done = subprocess.run(
        [str(SOLOIST), "bench", "operator", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["settings"]["sizes"] == [50] and report["settings"]["requests"] == 1
    (store,) = report["stores"]
    assert store["kind"] == "redis"
    (size,) = store["sizes"]
    assert size["jobs"] == 50 and size["drain_s"] >= 0 and size["add_s"] > 0
    endpoints = size["endpoints"]
    for name in ("healthz", "readyz", "status", "jobs_page", "metrics"):
        assert endpoints[name]["statuses"] == [200], (name, endpoints[name])
        assert endpoints[name]["median_ms"] > 0 and endpoints[name]["bytes"] > 0
    # 50 schedules and the job defined in code: one page of 50 with a cursor to the next
    # (paginated), or all 51 jobs (an endpoint that does not page).
    page = size["jobs_page"]
    assert (page["rows"], page["next_cursor"]) in ((50, True), (51, False))
    assert ("jobs_next_page" in endpoints) is page["next_cursor"]
    assert endpoints["metrics"]["bytes"] < 200_000 and size["bars"]["metrics_under_200kb"]
    assert set(size["bars"]) == {
        "status_under_200ms",
        "jobs_page_under_100ms",
        "metrics_under_200kb",
    }
    assert "| redis | 50 |" in done.stdout
    assert_no_bench_keys_left(redis_url)


def test_bench_operator_refuses_bad_sizes_and_skips_the_memory_store(tmp_path: Path) -> None:
    """A --jobs list that is not whole numbers is one 'error:' line and exit 2; memory://
    is reported as not measured (the instance is another process)."""
    bad = subprocess.run(
        [str(SOLOIST), "bench", "operator", "--store", "memory://", "--jobs", "100,0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: invalid --jobs '100,0': '0'"), lines
    out = tmp_path / "operator.json"
    args = ["--store", "memory://", "--jobs", "5", "--json", str(out)]
    done = subprocess.run(
        [str(SOLOIST), "bench", "operator", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (store,) = json.loads(out.read_text())["stores"]
    assert store["kind"] == "memory" and "one process" in store["skipped"]
