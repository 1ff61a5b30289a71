"""What an instance says about its own readiness beyond "the store answers": leaked
sync-handler threads (:mod:`soloist.runtime.pool`) and a store that lost its data
(:mod:`soloist.runtime.recovery`). ``GET /readyz`` fails on a problem and lists warnings;
``GET /status`` shows the figures behind them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from soloist.runtime.pool import DaemonThreadPool

__all__ = ["Health", "pool_report", "pool_state"]


@dataclass(frozen=True)
class Health:
    """``problems``: why the instance is not ready (``/readyz`` answers 503);
    ``warnings``: what an operator should know although it is ready."""

    problems: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def ready(self) -> bool:
        return not self.problems


def pool_state(pool: DaemonThreadPool) -> tuple[str | None, str | None]:
    """(problem, warning) of the sync handlers' pool: a problem at the bound of leaked
    threads, a warning below it."""
    if pool.leaked == 0:
        return None, None
    text = (
        f"{pool.leaked} worker thread(s) still run sync handlers whose run timed out "
        f"(bound max_leaked_threads={pool.max_leaked})"
    )
    if pool.saturated:
        return text + ": no more are replaced, sync runs may wait for a free thread", None
    return None, text + ": replaced"


def pool_report(pool: DaemonThreadPool) -> dict[str, Any]:
    """The ``workers`` field of ``/status``."""
    return {
        "concurrency": pool.workers,
        "threads": pool.threads,
        "leaked_threads": pool.leaked,
        "thread_leaks_total": pool.leaked_total,
        "max_leaked_threads": pool.max_leaked,
        "saturated": pool.saturated,
    }
