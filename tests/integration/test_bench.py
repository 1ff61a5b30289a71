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
