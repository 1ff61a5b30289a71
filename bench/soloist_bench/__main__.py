"""``python -m soloist_bench bench [options]``: the benchmark, with the options ``soloist
bench`` does not have yet (``--only``, the planning figure's sizes);
``python -m soloist_bench worker URL [--concurrency N]``: one drain worker process;
``python -m soloist_bench leader URL INSTANCE_ID``: one failover instance;
``python -m soloist_bench scheduled URL INSTANCE_ID LOGDIR``: one planning instance."""

from __future__ import annotations

import argparse
import sys

from soloist_bench.config import FIGURES, BenchConfig
from soloist_bench.processes import leader_main, scheduled_main, worker_main
from soloist_bench.run import bench_main, default_store_url

USAGE = (
    "usage: python -m soloist_bench bench [--help] | worker URL [--concurrency N] | "
    "leader URL INSTANCE_ID | scheduled URL INSTANCE_ID LOGDIR"
)


def bench_cli(argv: list[str]) -> BenchConfig:
    """The options of ``python -m soloist_bench bench`` as a :class:`BenchConfig`."""
    default = BenchConfig(stores=[])
    parser = argparse.ArgumentParser(prog="python -m soloist_bench bench")
    add = parser.add_argument
    add("--store", action="append", default=[], help="store URL (repeatable)")
    add("--only", action="append", default=[], choices=FIGURES, help="figure (repeatable)")
    add("--json", dest="json_path", default=None, help="write every figure here")
    add("--tasks", type=int, default=default.tasks)
    add("--runs", type=int, default=default.runs)
    add("--concurrency", type=int, default=default.concurrency)
    add("--samples", type=int, default=default.samples)
    add("--tick-streams", type=int, default=default.tick_streams, help="planning index size")
    add("--tick-due", type=int, default=default.tick_due, help="due streams per tick")
    add("--ticks", type=int, default=default.ticks, help="ticks measured (median)")
    add(
        "--planning-single-schedules",
        type=int,
        default=default.single_schedules,
        help="schedules run by one instance (0: skip)",
    )
    add("--planning-single-interval", type=float, default=default.single_interval)
    add(
        "--planning-schedules",
        type=int,
        default=default.cluster_schedules,
        help="schedules run by several instances (0: skip)",
    )
    add("--planning-interval", type=float, default=default.cluster_interval)
    add("--planning-instances", type=int, default=default.cluster_instances)
    add("--planning-warmup", type=float, default=default.warmup, help="seconds")
    add("--planning-window", type=float, default=default.window, help="seconds")
    args = parser.parse_args(argv)
    return BenchConfig(
        stores=args.store or [default_store_url()],
        tasks=args.tasks,
        runs=args.runs,
        concurrency=args.concurrency,
        samples=args.samples,
        json_path=args.json_path,
        only=tuple(dict.fromkeys(args.only)),
        tick_streams=args.tick_streams,
        tick_due=args.tick_due,
        ticks=args.ticks,
        single_schedules=args.planning_single_schedules,
        single_interval=args.planning_single_interval,
        cluster_schedules=args.planning_schedules,
        cluster_interval=args.planning_interval,
        cluster_instances=args.planning_instances,
        warmup=args.planning_warmup,
        window=args.planning_window,
    )


def main(argv: list[str]) -> None:
    if argv and argv[0] == "bench":
        bench_main(bench_cli(argv[1:]))
        return
    if len(argv) == 3 and argv[0] == "leader":
        leader_main(argv[1], argv[2])
        return
    if len(argv) == 4 and argv[0] == "scheduled":
        scheduled_main(argv[1], argv[2], argv[3])
        return
    if len(argv) >= 2 and argv[0] == "worker":
        concurrency = int(argv[3]) if len(argv) >= 4 and argv[2] == "--concurrency" else None
        worker_main(argv[1], concurrency)
        return
    raise SystemExit(USAGE)


if __name__ == "__main__":
    main(sys.argv[1:])
