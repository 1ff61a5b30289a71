"""Real ``soloist run --http`` processes and a real chromium for the dashboard tests.

Used by conftest.py and by screenshot.py. Each server is its own OS process (the installed
``soloist`` command) logging to a file; it is ready when ``GET healthz`` answers 200.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from soloist.testing import wait_until

APPS = Path(__file__).parent / "apps"
APP = str(APPS / "dashboard_app.py") + ":app"
SOLOIST = str(Path(sys.executable).with_name("soloist"))
if not Path(SOLOIST).exists():  # pragma: no cover - depends on the install
    SOLOIST = shutil.which("soloist") or SOLOIST


def find_chromium() -> tuple[str | None, str]:
    """The chromium to drive and where it came from, or None and what was tried:
    ``SOLOIST_TEST_CHROMIUM``, then /usr/bin/chromium, then ``chromium`` on PATH."""
    explicit = os.environ.get("SOLOIST_TEST_CHROMIUM")
    if explicit:
        # Given explicitly: used as given, so a wrong path fails instead of skipping.
        return explicit, "SOLOIST_TEST_CHROMIUM"
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium", "/usr/bin/chromium"
    found = shutil.which("chromium")
    if found:
        return found, "PATH"
    return None, "no chromium: SOLOIST_TEST_CHROMIUM unset, no /usr/bin/chromium, none on PATH"


def launch_args() -> list[str]:
    """Chromium's sandbox cannot start as root (containers, CI)."""
    return ["--no-sandbox"] if os.geteuid() == 0 else []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """One ``soloist run APP --http 127.0.0.1:PORT`` process."""

    def __init__(
        self,
        instance_id: str,
        store_url: str,
        workdir: Path,
        token: str | None,
        *,
        mounted: bool = False,
        app: str = APP,
    ):
        """``mounted``: serve ``apps/mounted.py`` with uvicorn (the dashboard under
        ``/ops/``) instead of ``soloist run --http``. ``app``: what ``soloist run`` runs
        (the browser tests' app by default)."""
        self.instance_id = instance_id
        self.store_url = store_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/" + ("ops/" if mounted else "")
        self.log_path = workdir / f"{instance_id}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SOLOIST_")}
        env |= {"SOLOIST_STORE_URL": store_url, "SOLOIST_INSTANCE_ID": instance_id}
        if token is not None:
            env["SOLOIST_TOKEN"] = token
        if mounted:
            command = [sys.executable, "-m", "uvicorn", "mounted:web", "--app-dir", str(APPS)]
            command += ["--host", "127.0.0.1", "--port", str(self.port)]
        else:
            command = [SOLOIST, "run", app, "--http", f"127.0.0.1:{self.port}"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir
            )

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def get(self, path: str) -> tuple[int, Any]:
        """GET ``path`` (relative to the server's root): status and decoded JSON body."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def post(self, path: str, token: str | None = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(self.url + path, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def wait_healthy(self, timeout: float = 30.0) -> None:
        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.instance_id} exited with {self.proc.returncode}; log:\n{self.log()}"
                )
            try:
                with urllib.request.urlopen(self.url + "healthz", timeout=2) as response:
                    return bool(response.status == 200)
            except OSError:
                return False

        try:
            wait_until(healthy, f"GET {self.url}healthz", timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nlog of {self.instance_id}:\n{self.log()}") from None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 10 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
