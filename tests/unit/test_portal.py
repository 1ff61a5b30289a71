"""Sync calls made while no scheduler loop runs (a Django view, a script) share one open
store on the portal, a private loop in a daemon thread."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import soloist.bridge
from soloist import JobContext, Scheduler
from soloist.stores import open_store
from soloist.stores.base import Store


def make_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Scheduler, list[Store]]:
    opened: list[Store] = []

    def counting_open(url: str, **kw: object) -> Store:
        store = open_store(url, **kw)  # type: ignore[arg-type]
        opened.append(store)
        return store

    monkeypatch.setattr(soloist.bridge, "open_store", counting_open)
    app = Scheduler(f"sqlite:///{tmp_path / 'x.db'}")

    @app.task
    def greet(ctx: JobContext, name: str) -> str:
        return name

    return app, opened


def test_sync_enqueues_from_many_threads_share_one_open_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """80 sync enqueues from 8 threads all land, and the store is opened once, not once
    per call."""
    app, opened = make_app(tmp_path, monkeypatch)
    try:
        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(lambda n: app.enqueue("greet", {"name": f"n{n}"}), range(80)))
        assert len(set(ids)) == 80
        assert len(app.history("greet", limit=1000)) == 80
        assert len(opened) == 1
    finally:
        portal = app._bridge.portal
        app.close()
    assert portal is not None and not portal.usable, "close() left the portal thread running"


def test_close_is_safe_twice_and_sync_calls_work_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``close()`` closes the portal's store; calling it again is harmless, and a later sync
    call opens a new portal and store."""
    app, opened = make_app(tmp_path, monkeypatch)
    app.enqueue("greet", {"name": "a"})
    app.close()
    app.close()
    app.enqueue("greet", {"name": "b"})
    try:
        assert len(app.history("greet")) == 2
        assert len(opened) == 2
    finally:
        app.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_gets_a_portal_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pre-forking server: the parent used sync calls before the fork; the child's sync
    calls still work (the parent's portal thread does not exist in the child)."""
    app, _ = make_app(tmp_path, monkeypatch)
    app.enqueue("greet", {"name": "parent"})
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status only
        code = 1
        try:
            app.enqueue("greet", {"name": "child"})
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    try:
        assert os.waitstatus_to_exitcode(status) == 0
        assert {o.payload["name"] for o in app.history("greet")} == {"parent", "child"}
    finally:
        app.close()
