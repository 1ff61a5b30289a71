"""``python -m soloist_bench worker URL [--concurrency N]``: one drain worker process;
``python -m soloist_bench leader URL INSTANCE_ID``: one failover instance."""

from __future__ import annotations

import sys

from soloist_bench.processes import leader_main, worker_main


def main(argv: list[str]) -> None:
    """``python -m soloist_bench worker URL [--concurrency N]``: one worker process;
    ``python -m soloist_bench leader URL INSTANCE_ID``: one failover instance."""
    if len(argv) == 3 and argv[0] == "leader":
        leader_main(argv[1], argv[2])
        return
    if len(argv) >= 2 and argv[0] == "worker":
        concurrency = int(argv[3]) if len(argv) >= 4 and argv[2] == "--concurrency" else None
        worker_main(argv[1], concurrency)
        return
    raise SystemExit("usage: python -m soloist_bench worker URL [--concurrency N]")


if __name__ == "__main__":
    main(sys.argv[1:])
