"""Fixtures of the chaos tier: stores of the test's own, libfaketime, the quick/long split.

``make test`` (plain ``pytest``) runs the scenarios marked ``quick``: one fast scenario per
fault family. ``make chaos`` (``SOLOIST_CHAOS=long pytest -m chaos tests/chaos``) runs
every scenario on every store where its fault applies, with more work each
(``SOLOIST_CHAOS=all``: every scenario at the quick sizes). Scenarios left
out of the quick run are *deselected*, not skipped, so a skip still means something is
missing (and with ``CI=true`` a missing server or libfaketime fails instead).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from glob import glob
from pathlib import Path

import pytest

import ci

from .harness import EVERY_SCENARIO, REPORT, ChaosCluster
from .servers import EtcdProcess, PostgresServer, RedisServer, Unavailable, free_port

FAKETIME_FIX = Path(__file__).parent / "faketime_fix"
#: Where Debian (package libfaketime) and other systems put the preload library.
LIBFAKETIME_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
    "/opt/homebrew/lib/faketime/libfaketime.1.dylib",
)


def missing(reason: str) -> None:
    """Skip, or fail in CI (:func:`ci.missing`): a skip in CI is a defect."""
    ci.missing(reason)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Unless ``SOLOIST_CHAOS`` is ``all`` or ``long``, deselect the chaos scenarios not
    marked ``quick``."""
    if EVERY_SCENARIO:
        return
    keep, drop = [], []
    for item in items:
        is_long = item.get_closest_marker("chaos") and not item.get_closest_marker("quick")
        (drop if is_long else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The figures of every chaos scenario run, as a table."""
    if not REPORT:
        return
    terminalreporter.section("chaos figures")
    columns = {
        "tasks_lost": "tasks lost",
        "outcomes_lost": "outcomes lost",
        "instants_missing": "inst. missing",
        "instants_doubled": "inst. doubled",
        "completions_doubled": "compl. doubled",
        "faults": "faults",
        "seconds": "seconds",
    }
    width = max(len(entry["scenario"]) for entry in REPORT) + 2
    head = "scenario".ljust(width) + " ".join(c.rjust(14) for c in columns.values())
    terminalreporter.write_line(head)
    for entry in REPORT:
        cells = " ".join(str(entry[c]).rjust(14) for c in columns)
        verdict = "ok" if entry["passed"] else "FAILED"
        terminalreporter.write_line(f"{entry['scenario'].ljust(width)}{cells}  {verdict}")


@pytest.fixture
def store_url(request: pytest.FixtureRequest) -> Callable[[str], str | None]:
    """The store URL of a scenario: ``sqlite`` -> None (the cluster's own file),
    ``postgres`` -> a fresh schema on the session's server, ``redis`` and ``etcd`` -> a
    fresh key prefix on the session's server (``make_redis_url``, ``make_etcd_url``)."""

    def make(store: str) -> str | None:
        if store == "sqlite":
            return None
        if store not in ("postgres", "redis", "etcd"):
            raise ValueError(f"no chaos store {store!r}")
        url: str = request.getfixturevalue(f"make_{store}_url")()
        return url

    return make


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., ChaosCluster]]:
    """Makes the scenario's :class:`ChaosCluster` (one per test); its instances are
    killed and their logs printed at teardown."""
    made: list[ChaosCluster] = []

    def make(url: str | None, name: str, **options: str) -> ChaosCluster:
        made.append(ChaosCluster(tmp_path, url, name=name, **options))
        return made[-1]

    yield make
    for group in made:
        group.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own (append-only, fsync always), restartable."""
    try:
        server = RedisServer(tmp_path)
    except Unavailable as exc:
        missing(f"this test starts its own Redis server: {exc}")
    server.start()
    try:
        yield server
    finally:
        server.stop(hard=True)


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    """A one-member etcd of this test's own (its data directory in ``tmp_path``, kept
    across restarts), started; killed at the end."""
    try:
        member = EtcdProcess(tmp_path / "etcd", free_port(), free_port())
    except Unavailable as exc:
        missing(f"this test starts its own etcd member: {exc}")
    try:
        member.start()
        yield member
    finally:
        member.kill()


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own (initdb + pg_ctl), restartable."""
    try:
        server = PostgresServer()
    except Unavailable as exc:
        missing(f"this test starts its own PostgreSQL server: {exc}")
    try:
        server.start()
        yield server
    finally:
        server.stop()


class Faketime:
    """Runs processes with their wall clock off by a number of seconds (libfaketime),
    their monotonic clock untouched."""

    def __init__(self, library: str, sleep_fix: bool) -> None:
        self.library = library
        #: libfaketime 0.9.10 breaks Python's time.sleep (see faketime_fix/sitecustomize.py).
        self.sleep_fix = sleep_fix

    def env(self, offset: int) -> dict[str, str]:
        env = {
            "LD_PRELOAD": self.library,
            "FAKETIME": f"{offset:+d}s",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }
        if self.sleep_fix:
            path = [str(FAKETIME_FIX), *filter(None, [os.environ.get("PYTHONPATH")])]
            env["PYTHONPATH"] = os.pathsep.join(path)
        return env

    def works(self) -> str | None:
        """None if a skewed Python process sleeps and reads a skewed clock, else why not."""
        probe = (
            "import time, threading; t = time.monotonic(); time.sleep(0.05); "
            "threading.Event().wait(0.05); assert time.monotonic() - t < 5; "
            "print(time.time())"
        )
        try:
            done = subprocess.run(
                [sys.executable, "-c", probe],
                env=os.environ | self.env(-30),
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return "a probe process hung"
        if done.returncode != 0:
            return (done.stderr.strip().splitlines() or ["exit status " + str(done.returncode)])[-1]
        skew = float(done.stdout) - time.time()
        return None if -35 < skew < -25 else f"the probe's clock was off by {skew:.1f}s, not -30s"


def _find_libfaketime() -> str | None:
    explicit = os.environ.get("SOLOIST_TEST_LIBFAKETIME")
    if explicit:
        if not Path(explicit).is_file():
            pytest.fail(f"SOLOIST_TEST_LIBFAKETIME={explicit} does not exist")
        return explicit
    for pattern in LIBFAKETIME_CANDIDATES:
        for found in sorted(glob(pattern)):
            if Path(found).is_file():
                return found
    return None


@pytest.fixture(scope="session")
def faketime() -> Faketime:
    """libfaketime (``SOLOIST_TEST_LIBFAKETIME``, else the usual places), checked on a
    probe process; with the time.sleep fix if this libfaketime needs it. Skipped if
    absent or broken, failed then with ``CI=true``."""
    library = _find_libfaketime()
    if library is None:
        hint = "apt-get install libfaketime" if shutil.which("apt-get") else "install it"
        missing(f"clock-skew scenarios need libfaketime ({hint}, or SOLOIST_TEST_LIBFAKETIME)")
        raise AssertionError("unreachable")
    plain = Faketime(library, sleep_fix=False)
    if plain.works() is None:
        return plain
    fixed = Faketime(library, sleep_fix=True)
    problem = fixed.works()
    if problem is not None:
        missing(f"libfaketime {library} does not work with this Python: {problem}")
    return fixed
