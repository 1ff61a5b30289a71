"""The processes the benchmark starts (``soloist bench`` runs the benchmark itself):
``python -m soloist_bench worker URL [--concurrency N] [--handler def|async] [--logging
default|quiet]``: one drain worker process (defaults: the library's concurrency, a plain
``def`` handler, logging as ``app.run()`` sets it up; :mod:`soloist_bench.worker`);
``python -m soloist_bench probe [--logging default|quiet]``: which soloist such a worker
would run and what it would miss there, as one JSON line (``--compare-src``);
``python -m soloist_bench leader URL INSTANCE_ID``: one failover instance;
``python -m soloist_bench scheduled URL INSTANCE_ID LOGDIR``: one planning instance;
``python -m soloist_bench feed URL TASKS``: the store side of a baseline drain of
``--compare-src`` on that checkout's soloist (:mod:`soloist_bench.feed`).

The worker, the probe and the feed import only :mod:`soloist_bench.worker` or
:mod:`soloist_bench.feed` (little of soloist, when they run): with ``--compare-src`` they
run another checkout's soloist."""

from __future__ import annotations

import argparse
import sys

from soloist_bench.config import HANDLERS, WORKER_LOGGING

USAGE = (
    "usage: python -m soloist_bench worker URL [--concurrency N] [--handler def|async] "
    "[--logging default|quiet] | probe [--logging default|quiet] | leader URL INSTANCE_ID "
    "| scheduled URL INSTANCE_ID LOGDIR | feed URL TASKS"
)


def main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[0] == "leader":
        from soloist_bench.processes import leader_main

        leader_main(argv[1], argv[2])
        return
    if len(argv) == 4 and argv[0] == "scheduled":
        from soloist_bench.processes import scheduled_main

        scheduled_main(argv[1], argv[2], argv[3])
        return
    if len(argv) == 3 and argv[0] == "feed" and argv[2].isdigit():
        from soloist_bench.feed import feed_main

        feed_main(argv[1], int(argv[2]))
        return
    if len(argv) >= 2 and argv[0] == "worker":
        from soloist_bench.worker import worker_main

        parser = argparse.ArgumentParser(prog="python -m soloist_bench worker")
        parser.add_argument("url")
        parser.add_argument("--concurrency", type=int, default=None)
        parser.add_argument("--handler", choices=HANDLERS, default="def")
        parser.add_argument("--logging", choices=WORKER_LOGGING, default="default")
        args = parser.parse_args(argv[1:])
        worker_main(args.url, args.concurrency, args.handler, args.logging)
        return
    if argv and argv[0] == "probe":
        from soloist_bench.worker import probe_main

        parser = argparse.ArgumentParser(prog="python -m soloist_bench probe")
        parser.add_argument("--logging", choices=WORKER_LOGGING, default="default")
        probe_main(parser.parse_args(argv[1:]).logging)
        return
    raise SystemExit(USAGE)


if __name__ == "__main__":
    main(sys.argv[1:])
