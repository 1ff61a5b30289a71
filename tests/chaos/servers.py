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

:class:`EtcdProcess`: a one-member ``etcd`` cluster on given client and peer ports and a
given data directory, which it keeps: ``kill()`` (SIGKILL) or ``stop()`` (SIGTERM) and
``start()`` again is a restart of the member with what it had written (etcd fsyncs its WAL
before it acknowledges). It raises :class:`Unavailable` too when there is no ``etcd``
binary (Debian: package ``etcd-server``). The session's throwaway etcd (``etcd_server`` in
tests/conftest.py) is one of these.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
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


class EtcdProcess:
    """One ``etcd`` member on ``client_port`` and ``peer_port`` (127.0.0.1) with its data in
    ``data_dir`` (created by etcd if missing; never deleted here), restartable on that data.
    Its output goes to ``<data_dir>.log`` beside the data directory, read by :meth:`log`."""

    def __init__(self, data_dir: Path, client_port: int, peer_port: int) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            raise Unavailable("no etcd in PATH (Debian: apt-get install etcd-server)")
        self.binary = binary
        self.data_dir = Path(data_dir)
        self.client_port = client_port
        self.peer_port = peer_port
        self.log_path = self.data_dir.with_name(self.data_dir.name + ".log")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The store URL of the member (no prefix: add ``?prefix=...``)."""
        return f"etcd://127.0.0.1:{self.client_port}"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}/health"

    def argv(self) -> list[str]:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            self.binary, "--name", "default", "--data-dir", str(self.data_dir),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"default={peer}", "--logger", "zap", "--log-outputs", "stderr",
            # Old revisions are compacted, as an operator would: a test session writes
            # enough key versions to fill etcd's default 2 GiB quota otherwise.
            "--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1m",
            "--quota-backend-bytes", str(8 * 1024**3),
        ]  # fmt: skip

    def start(self, wait: bool = True) -> None:
        """Start the member (on the data it has, if any); unless ``wait`` is false, wait
        until it is ready (:meth:`wait_ready`, 30 s)."""
        if self.running():
            raise AssertionError(f"etcd on port {self.client_port} is already running")
        # ETCD_* variables of the caller's environment would clash with the flags (etcd
        # refuses a variable shadowed by a flag); etcd 3.4 runs on arm64 only when told.
        env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD_")}
        if platform.machine().lower() in ("aarch64", "arm64"):
            env["ETCD_UNSUPPORTED_ARCH"] = "arm64"
        log = open(self.log_path, "ab")  # noqa: SIM115 - the process keeps it
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        if wait:
            self.wait_ready(30)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def healthy(self) -> bool:
        """Whether the member answers ``GET /health`` with ``{"health": "true"}`` (it has
        a leader: itself)."""
        try:
            with urllib.request.urlopen(self.health_url, timeout=1) as response:
                return json.loads(response.read()).get("health") == "true"
        except (OSError, ValueError, http.client.HTTPException):
            return False

    def wait_ready(self, timeout: float) -> None:
        """Wait until the member is healthy; raise AssertionError (with the end of its log)
        if it exits or is not healthy within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"etcd exited with status {self.proc.returncode}:\n{self.log()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"etcd on port {self.client_port} not healthy after {timeout}s:\n"
                    f"{self.log()[-2000:]}"
                )
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the member and wait for it to be gone (its data directory stays)."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM the member and wait for it to exit (SIGKILL after 20 s); safe to call
        again. Its data directory stays."""
        self._signal(signal.SIGTERM)

    def restart(self, hard: bool = False) -> None:
        """Stop the member (SIGTERM; SIGKILL with ``hard``), start it again on the same
        data and ports, and wait until it is ready."""
        self._signal(signal.SIGKILL if hard else signal.SIGTERM)
        self.start()

    def _signal(self, signum: signal.Signals) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
