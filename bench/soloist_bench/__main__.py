"""The processes the benchmark starts (``soloist bench`` runs the benchmark itself):
``python -m soloist_bench worker URL [--concurrency N]``: one drain worker process;
``python -m soloist_bench leader URL INSTANCE_ID``: one failover instance;
``python -m soloist_bench scheduled URL INSTANCE_ID LOGDIR``: one planning instance."""

from __future__ import annotations

import sys

from soloist_bench.processes import leader_main, scheduled_main, worker_main

USAGE = (
    "usage: python -m soloist_bench worker URL [--concurrency N] | "
    "leader URL INSTANCE_ID | scheduled URL INSTANCE_ID LOGDIR"
)


def main(argv: list[str]) -> None:
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
