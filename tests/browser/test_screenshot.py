"""docs/img/dashboard.png can be made again: screenshot.py photographs the shop app of
apps/showcase_app.py, whose jobs and errors look like a user's, not the tests'."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Browser

from .screenshot import FAILING, PAUSED, TRIGGERED, take

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_the_screenshot_shows_the_shop_app(browser: Browser, tmp_path: Path) -> None:
    """The picture is taken of a page with the shop's jobs: triggered runs succeeded, the
    bank import dead with its connection error, the digest paused; no test job names."""
    out = tmp_path / "dashboard.png"
    seen: list[str] = []
    take(browser, out, dead=1, inspect=lambda page: seen.append(page.inner_text("body")))
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    (text,) = seen
    for name in (*TRIGGERED, PAUSED, FAILING, "sync-invoices"):
        assert name in text
    assert "ConnectionError: sftp.bank.example.com:22: connection timed out" in text
    assert "paused" in text
    for leftover in ("always-fails", "tick", "monthly-report", "alert(", "<img"):
        assert leftover not in text, leftover
