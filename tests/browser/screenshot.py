"""Take docs/img/dashboard.png: the dashboard of two real instances with some history.

Run from the repository root: ``.venv/bin/python tests/browser/screenshot.py [OUT.png]``.
It starts the shop app ``apps/showcase_app.py`` twice (``web-1``, ``web-2``) on one SQLite
store, triggers the nightly report and the session clean-up, pauses the weekly digest,
waits until the bank import has failed for good a few times, and photographs the page.
test_screenshot.py runs :func:`take` so that the picture can always be made again.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from playwright.sync_api import Browser, Page, expect, sync_playwright

sys.path.insert(0, str(Path(__file__).parent))
from servers import APPS, Server, find_chromium, launch_args

from soloist.testing import wait_until

TOKEN = "screenshot-token"
DEFAULT_OUT = Path(__file__).parents[2] / "docs" / "img" / "dashboard.png"
SHOWCASE = str(APPS / "showcase_app.py") + ":app"
#: What the picture shows, the dashboard's names for it.
TRIGGERED = ("nightly-report", "cleanup-sessions")
PAUSED = "send-weekly-digest"
FAILING = "import-bank-statements"


def take(
    browser: Browser,
    out: Path,
    *,
    dead: int = 3,
    inspect: Callable[[Page], object] | None = None,
) -> None:
    """Write the screenshot to ``out`` once ``dead`` runs of the bank import are dead;
    ``inspect`` sees the page as it is photographed."""
    with tempfile.TemporaryDirectory(prefix="soloist-shot-") as tmp:
        workdir = Path(tmp)
        # Relative to the servers' working directory: the header shows a plain path.
        store = "sqlite:///soloist.db"
        servers: list[Server] = []
        try:
            for name in ("web-1", "web-2"):
                servers.append(Server(name, store, workdir, TOKEN, app=SHOWCASE))
                servers[-1].wait_healthy()
            admin = servers[0]
            assert admin.post(f"api/jobs/{PAUSED}/pause", TOKEN)[0] == 200
            for job in TRIGGERED:
                assert admin.post(f"api/jobs/{job}/trigger", TOKEN)[0] == 202

            def ready() -> bool:
                failed = admin.get(f"api/occurrences?job={FAILING}&state=dead&limit=10")[1]
                done = admin.get("api/occurrences?state=succeeded&limit=100")[1]
                ran = {o["job"] for o in done["occurrences"]}
                return len(failed["occurrences"]) >= dead and set(TRIGGERED) <= ran

            wait_until(ready, f"{dead} dead imports and the triggered jobs to succeed", 60)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            try:
                page.goto(admin.url)
                expect(page.locator("#updated")).to_contain_text("updated at", timeout=15_000)
                expect(page.locator("#instances .badge.leader")).to_have_count(1)
                expect(page.locator("#instances tbody tr")).to_have_count(2)
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out), full_page=True)
                if inspect is not None:
                    inspect(page)
            finally:
                page.close()
        finally:
            for server in servers:
                server.stop()


def main(out: Path) -> None:
    chromium, source = find_chromium()
    if chromium is None:
        raise SystemExit(source)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=chromium, headless=True, args=launch_args()
        )
        try:
            take(browser, out)
        finally:
            browser.close()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
