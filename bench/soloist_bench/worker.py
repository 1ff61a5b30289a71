"""The drain worker process (``python -m soloist_bench worker URL``): one soloist instance
serving the benchmark's no-op task until SIGTERM.

``soloist bench --compare-src DIR`` starts these workers with ``DIR`` first on
``PYTHONPATH``, so that they run another checkout's soloist (an older commit, say) while
the bench itself runs this one. This module therefore takes only what it needs of soloist,
and only when it runs, so that it also works against older soloists:
``soloist.scheduler.Scheduler`` (with its options ``concurrency`` and ``grace_period``)
and, for the default logging, ``soloist.logs.configure``. Where the soloist imported lacks
one of them, the worker exits with a message naming it (:func:`missing`): nothing is put
in its place, which would measure other code than that soloist's. ``python -m
soloist_bench probe`` says the same without starting anything."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from soloist_bench.config import NOOP

if TYPE_CHECKING:
    from soloist.context import JobContext
    from soloist.scheduler import Scheduler

__all__ = [
    "RunCounter",
    "missing",
    "probe_main",
    "scheduler_options",
    "serve",
    "soloist_dir",
    "worker_main",
    "worker_problem",
]


class RunCounter:
    """Runs of the benchmark task by handler kind, counted by the handler itself: the
    drain reports them, so that a run that did not use the asked kind shows."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()  # ``def`` handlers run in the instance's threads

    def handler(self, kind: str) -> Callable[[JobContext], Any]:
        """The no-op task of ``kind`` (``def`` or ``async``), counting its runs here."""
        counts, lock = self.counts, self._lock
        if kind == "async":

            async def noop(ctx: JobContext) -> None:
                counts["async"] = counts.get("async", 0) + 1  # on the event loop only

            return noop
        if kind == "def":

            def noop_def(ctx: JobContext) -> None:
                with lock:
                    counts["def"] = counts.get("def", 0) + 1

            return noop_def
        raise ValueError(f"invalid handler kind {kind!r}: expected 'def' or 'async'")


def soloist_dir() -> str | None:
    """The folder of the ``soloist`` package this process imports (or would import), its
    real path; None if there is none."""
    try:
        spec = importlib.util.find_spec("soloist")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return os.path.dirname(os.path.realpath(spec.origin))


#: The options the worker gives the Scheduler (:func:`scheduler_options`).
_OPTIONS = ("concurrency", "grace_period")


def missing(log_mode: str) -> list[str]:
    """What a drain worker logging as ``log_mode`` uses of soloist and the soloist this
    process imports lacks: ``module.name``, or ``Scheduler(option=)`` for an option its
    constructor does not take; empty if nothing is missing."""
    gaps: list[str] = []
    try:
        from soloist.scheduler import Scheduler
    except ImportError as exc:
        gaps.append(f"soloist.scheduler.Scheduler ({type(exc).__name__}: {exc})")
    else:
        try:
            parameters = inspect.signature(Scheduler).parameters.values()
        except (TypeError, ValueError):  # Python cannot tell: let the call decide
            parameters = None
        if parameters is not None and not any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters
        ):
            names = {p.name for p in parameters}
            gaps += [f"Scheduler({option}=)" for option in _OPTIONS if option not in names]
    if log_mode == "default":
        try:
            import soloist.logs
        except ImportError as exc:
            gaps.append(f"soloist.logs ({type(exc).__name__}: {exc})")
        else:
            if not callable(getattr(soloist.logs, "configure", None)):
                gaps.append("soloist.logs.configure")
    return gaps


def worker_problem(gaps: list[str], where: str | None) -> str:
    """The message of a worker that cannot run on the soloist at ``where``."""
    text = (
        f"the soloist at {where or '(none found)'} lacks {', '.join(gaps)}, which the "
        "bench's drain worker uses"
    )
    if any(gap.startswith("soloist.logs") for gap in gaps):
        text += (
            " (soloist.logs.configure sets up the default worker logging only: "
            "--worker-logging quiet does without it)"
        )
    return text


def scheduler_options(concurrency: int | None) -> dict[str, Any]:
    options: dict[str, Any] = {"grace_period": "5s"}
    if concurrency is not None:
        options["concurrency"] = concurrency
    return options


def worker_main(
    url: str, concurrency: int | None, handler: str = "def", log_mode: str = "default"
) -> None:
    """One benchmark worker process: serve the no-op task (a plain ``def`` or an ``async
    def``, per ``handler``) until SIGTERM. Prints ``ready`` once started and, once stopped,
    one JSON line ``{"runs": {kind: count}, "soloist": folder, "cpu_s": seconds}`` (the
    runs its handler counted, the soloist package it ran, and the CPU time the process spent
    between ``ready`` and SIGTERM, all its threads: see :func:`serve`). With
    ``log_mode="default"`` logging is set up as ``app.run()`` does where the program has
    not (INFO lines as text to stderr); ``quiet`` leaves it unconfigured (WARNING and
    above reach stderr). Exits with a message naming what is missing where the soloist
    imported lacks something it uses (:func:`missing`)."""
    gaps = missing(log_mode)
    if gaps:
        raise SystemExit(f"soloist_bench worker: {worker_problem(gaps, soloist_dir())}")
    from soloist.scheduler import Scheduler

    if log_mode == "default" and not logging.getLogger().handlers:
        from soloist.logs import configure

        configure("INFO", "text")
    app = Scheduler(url, **scheduler_options(concurrency))
    counter = RunCounter()
    app.task(name=NOOP)(counter.handler(handler))
    cpu = asyncio.run(serve(app))
    print(json.dumps({"runs": counter.counts, "soloist": soloist_dir(), "cpu_s": cpu}), flush=True)


def probe_main(log_mode: str) -> None:
    """Print, as one JSON line, the folder of the soloist a worker started like this one
    would run and what it would miss of it (:func:`missing`), without starting anything:
    ``{"soloist": folder or null, "missing": [...]}``."""
    print(json.dumps({"soloist": soloist_dir(), "missing": missing(log_mode)}), flush=True)


async def serve(app: Scheduler, every_second: Callable[[], None] | None = None) -> float:
    """Start ``app``, print ``ready``, serve until SIGTERM (calling ``every_second``, if
    given, once at the start and then every second), then stop. Returns the CPU time of the
    process (every thread, user and system) from ``ready`` to SIGTERM: the work of serving,
    without start-up and shutdown. Unlike a rate, it hardly moves when other programs load
    the machine, so it shows what a change costs per execution on a noisy box."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await app.start()
    if every_second is not None:
        every_second()
    print("ready", flush=True)
    cpu = time.process_time()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 1.0 if every_second is not None else None)
        except asyncio.TimeoutError:
            assert every_second is not None
            every_second()
    cpu = time.process_time() - cpu
    await app.stop()
    return cpu
