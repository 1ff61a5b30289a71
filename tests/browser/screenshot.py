"""Take docs/img/dashboard.png: the dashboard of two real instances with some history.

Run from the repository root: ``.venv/bin/python tests/browser/screenshot.py [OUT.png]``.
It starts the browser tests' app (a succeeding job, a failing one, a triggered one, a
paused one), waits until the history has a dead occurrence, and photographs the page.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

sys.path.insert(0, str(Path(__file__).parent))
from servers import Server, find_chromium, launch_args

from soloist.testing import wait_until

TOKEN = "screenshot-token"
DEFAULT_OUT = Path(__file__).parents[2] / "docs" / "img" / "dashboard.png"


def main(out: Path) -> None:
    chromium, source = find_chromium()
    if chromium is None:
        raise SystemExit(source)
    with tempfile.TemporaryDirectory(prefix="soloist-shot-") as tmp:
        workdir = Path(tmp)
        store = f"sqlite:///{workdir / 'soloist.db'}"
        servers = [Server("web-1", store, workdir, TOKEN)]
        try:
            servers[0].wait_healthy()
            servers.append(Server("web-2", store, workdir, TOKEN))
            servers[1].wait_healthy()
            admin = servers[0]
            admin.post("api/jobs/monthly-report/trigger", TOKEN)
            wait_until(
                lambda: len(admin.get("api/occurrences?state=dead&limit=3")[1]["occurrences"]) >= 3,
                "three dead occurrences",
            )
            admin.post("api/jobs/%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E/pause", TOKEN)
            with sync_playwright() as driver:
                browser = driver.chromium.launch(
                    executable_path=chromium, headless=True, args=launch_args()
                )
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(admin.url)
                expect(page.locator("#updated")).to_contain_text("updated at", timeout=15_000)
                expect(page.locator("#instances .badge.leader")).to_have_count(1)
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out), full_page=True)
                browser.close()
        finally:
            for server in servers:
                server.stop()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
