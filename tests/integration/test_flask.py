"""soloist with Flask, as docs/howto/frameworks.md shows it: ``examples/flask_app.py``
served by Flask's own server (a real OS process) queues a task from a view, and a
``soloist run flask_app:app`` worker process runs it once."""

from __future__ import annotations

import ast
import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from soloist.models import State
from soloist.stores import open_store
from soloist.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "flask_app.py"
DOC = ROOT / "docs" / "howto" / "frameworks.md"
SOLOIST = Path(sys.executable).parent / "soloist"
DEADLINE_S = 30.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[list[tuple[str, subprocess.Popen[bytes], Path]]]:
    """Processes started by the test, killed at its end (their logs printed)."""
    started: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    yield started
    for name, proc, log in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        print(f"----- {name} (exit {proc.returncode}) -----\n{log.read_text()}")


def test_the_how_to_shows_the_example_as_it_is() -> None:
    """The Flask section's code block is examples/flask_app.py (less its docstring)."""
    source = EXAMPLE.read_text()
    body = "\n".join(source.splitlines()[ast.parse(source).body[1].lineno - 1 :]).strip()
    section = DOC.read_text().split("## Flask", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert [b.strip() for b in blocks] == [body]


def test_a_flask_view_queues_a_task_that_a_worker_runs_once(
    tmp_path: Path, procs: list[tuple[str, subprocess.Popen[bytes], Path]]
) -> None:
    """``flask --app flask_app:web run`` and ``soloist run flask_app:app``, as the how-to
    says: POST /signup queues send_welcome, the worker runs it once with the payload; a
    bad email is a 400 and queues nothing; SIGTERM stops the worker (exit 0)."""
    url = f"sqlite:///{tmp_path / 'soloist.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOLOIST_", "FLASK_"))}
    env |= {"PYTHONUNBUFFERED": "1", "SOLOIST_STORE_URL": url}
    store = open_store(url)
    asyncio.run(store.migrate())
    port = _free_port()

    def start(name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = tmp_path / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv, cwd=EXAMPLE.parent, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        procs.append((name, proc, log))
        return proc

    site = start("flask", [sys.executable, "-m", "flask", "--app", "flask_app:web", "run",
                           "--port", str(port)])  # fmt: skip
    worker = start("worker", [str(SOLOIST), "run", "flask_app:app", "--instance-id", "flask-w1"])

    def signup(email: str) -> httpx.Response | None:
        assert site.poll() is None, "the Flask server exited"
        try:
            return httpx.post(f"http://127.0.0.1:{port}/signup", json={"email": email}, timeout=10)
        except httpx.TransportError:
            return None

    response = wait_until(lambda: signup("ada@example.com"), "the Flask server", DEADLINE_S)
    assert response is not None and response.status_code == 200, response
    occurrence_id = response.json()["occurrence"]
    bad = signup("nobody")
    assert bad is not None and bad.status_code == 400 and "nobody" in bad.text

    def succeeded() -> list[object]:
        rows = asyncio.run(store.occurrence_list(job="send_welcome"))
        return [o for o in rows if o.state is State.SUCCEEDED]

    try:
        done = wait_until(succeeded, "the worker to run the task", DEADLINE_S)
        rows = asyncio.run(store.occurrence_list(job="send_welcome"))
    finally:
        asyncio.run(store.close())
    assert [(o.id, o.instance_id, o.payload, o.result) for o in rows] == [
        (occurrence_id, "flask-w1", {"to": "ada@example.com"}, {"to": "ada@example.com"})
    ]
    assert len(done) == 1
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 0
