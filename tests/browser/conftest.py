"""Fixtures of the browser tier: two real soloist servers and a real headless chromium.

``servers`` starts two ``soloist run --http`` processes of ``apps/dashboard_app.py`` on one
temporary SQLite store: ``admin`` with ``SOLOIST_TOKEN`` set (actions enabled) and
``viewer`` without it (read-only); ``mounted`` serves the app under ``/ops`` in a host
ASGI app. ``page`` opens a fresh browser context (empty
sessionStorage) in which every request leaving 127.0.0.1 is refused and recorded, and fails
the test if the page raised a JavaScript error or opened a dialog (an ``alert`` injected
through a job name would).

Chromium is found by :func:`servers.find_chromium`; without one the tests are skipped,
except with ``CI=true``, where they fail: a skip in CI is a defect.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Dialog, Page, Playwright, Route, sync_playwright

from ci import missing

from .servers import Server, find_chromium, launch_args

TOKEN = "s3cret-token-for-tests"


@dataclass
class Servers:
    admin: Server
    viewer: Server


@dataclass
class PageWatch:
    """What a page did that it must not: dialogs, JavaScript errors, outside requests."""

    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path, source = find_chromium()
    if path is None:
        missing(f"BROWSER TESTS NOT RUN: no chromium: {source}")
    return path


@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    # Package scope, not session: Playwright's sync API keeps an event loop marked as
    # running in the main thread while it is open, which would break every asyncio test
    # that pytest runs after this package.
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="package")
def browser(playwright: Playwright, chromium_path: str) -> Iterator[Browser]:
    browser = playwright.chromium.launch(
        executable_path=chromium_path, headless=True, args=launch_args()
    )
    yield browser
    browser.close()


@pytest.fixture(scope="package")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    workdir: Path = tmp_path_factory.mktemp("dashboard")
    store = f"sqlite:///{workdir / 'soloist.db'}"
    started: list[Server] = []
    try:
        admin = Server("dash-admin", store, workdir, token=TOKEN)
        started.append(admin)
        admin.wait_healthy()
        viewer = Server("dash-viewer", store, workdir, token=None)
        started.append(viewer)
        viewer.wait_healthy()
        yield Servers(admin, viewer)
    finally:
        for server in started:
            server.stop()


@pytest.fixture(scope="package")
def mounted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The same app served by uvicorn with soloist's HTTP app mounted under ``/ops``."""
    workdir: Path = tmp_path_factory.mktemp("mounted")
    server = Server(
        "dash-mounted", f"sqlite:///{workdir / 'soloist.db'}", workdir, TOKEN, mounted=True
    )
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


@pytest.fixture
def watch() -> PageWatch:
    return PageWatch()


@pytest.fixture
def page(browser: Browser, watch: PageWatch) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})

    def only_local(route: Route) -> None:
        if route.request.url.startswith("http://127.0.0.1:"):
            route.continue_()
        else:
            watch.outside.append(route.request.url)
            route.abort()

    def on_dialog(dialog: Dialog) -> None:
        watch.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    context.route("**/*", only_local)
    page = context.new_page()
    page.on("dialog", on_dialog)
    page.on("pageerror", lambda error: watch.errors.append(str(error)))
    yield page
    context.close()
    assert not watch.dialogs, f"the page opened dialogs: {watch.dialogs}"
    assert not watch.errors, f"the page raised JavaScript errors: {watch.errors}"
    assert not watch.outside, f"the page requested outside resources: {watch.outside}"
