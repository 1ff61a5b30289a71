"""Store servers of a chaos test's own, which the test may restart.

:class:`PostgresServer`: ``initdb`` into a temporary directory and ``pg_ctl start`` on a
free port (the Unix socket in that directory too); as root, both run as the ``postgres``
user (initdb refuses root). ``restart()`` is ``pg_ctl restart -m fast``: every connection
is closed by the server, which comes back on the same port with the same data.

:class:`RedisServer`: ``redis-server`` on a free port with the append-only file on and an
fsync per write (``--appendonly yes --appendfsync always``), so that what it acknowledged
survives a restart; ``restart()`` stops it (SIGTERM, or SIGKILL with ``hard=True``) and
starts it again on the same port and data directory.

Both raise :class:`Unavailable` with the reason when the binaries are missing, so that the
fixture can skip (or, with ``CI=true``, fail).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from glob import glob
from pathlib import Path


class Unavailable(Exception):
    """The server cannot be started here (the message says why)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def find_pg_bin() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``: on PATH, else Debian's newest."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = glob("/usr/lib/postgresql/*/bin/initdb")

    def version(path: str) -> int:
        match = re.search(r"/postgresql/(\d+)/", path)
        return int(match.group(1)) if match else 0

    candidates.sort(key=version, reverse=True)
    return Path(candidates[0]).parent if candidates else None


class PostgresServer:
    """A throwaway PostgreSQL cluster in a temporary directory (see the module docstring);
    :meth:`stop` deletes it."""

    def __init__(self) -> None:
        bindir = find_pg_bin()
        if bindir is None:
            raise Unavailable("no initdb found (PATH, /usr/lib/postgresql/*/bin)")
        self.pg_ctl = str(bindir / "pg_ctl")
        self.initdb = str(bindir / "initdb")
        # Not under pytest's tmp_path: its parents are private to root, and the server
        # runs as the postgres user.
        self.dir = Path(tempfile.mkdtemp(prefix="soloist-chaos-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            runuser = shutil.which("runuser")
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                owner = None
            if runuser is None or owner is None:
                raise Unavailable("running as root, with no 'postgres' user or no runuser")
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
            self.as_user = [runuser, "-u", "postgres", "--"]
        self.started = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str, timeout: float = 120) -> None:
        done = subprocess.run(
            [*self.as_user, *argv], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise AssertionError(
                f"{Path(argv[0]).name} {argv[1:3]} failed: {(done.stderr or done.stdout)[-2000:]}"
            )

    def _options(self) -> str:
        return f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"

    def start(self) -> None:
        if not self.data.exists():
            self._run(
                self.initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                "--no-sync",
            )  # fmt: skip
        self._run(
            self.pg_ctl, "-D", str(self.data), "-l", str(self.dir / "log"), "-o", self._options(),
            "-w", "start",
        )  # fmt: skip
        self.started = True

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: the server closes every connection and comes back."""
        self._run(
            self.pg_ctl, "-D", str(self.data), "-l", str(self.dir / "log"), "-o", self._options(),
            "-m", "fast", "-w", "restart",
        )  # fmt: skip

    def stop(self) -> None:
        if self.started:
            self.started = False
            subprocess.run(
                [*self.as_user, self.pg_ctl, "-D", str(self.data), "-m", "immediate", "stop"],
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        path = self.dir / "log"
        return path.read_text(errors="replace") if path.exists() else ""


class RedisServer:
    """A throwaway ``redis-server`` with an append-only file (see the module docstring)."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise Unavailable("no redis-server in PATH")
        self.binary = binary
        self.dir = workdir / "redis"
        self.dir.mkdir()
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.dir)]
        log = open(self.dir / "server.log", "ab")  # noqa: SIM115 - the process keeps it
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        _wait(self.answers, 20, "redis-server to answer PING")

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, hard: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def restart(self, hard: bool = False) -> None:
        """Stop the server (SIGTERM; SIGKILL with ``hard``) and start it again."""
        self.stop(hard)
        self.start()

    def log(self) -> str:
        path = self.dir / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""
