"""Browser tier: the web dashboard driven in a real headless chromium (Playwright)."""
