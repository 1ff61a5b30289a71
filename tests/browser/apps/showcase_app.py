"""The app behind docs/img/dashboard.png (tests/browser/screenshot.py): the jobs of a
small online shop, so that the picture shows what a user's dashboard looks like.

``sync-invoices`` succeeds every two seconds, ``import-bank-statements`` fails (a timed-out
SFTP connection, retried once), ``nightly-report`` and ``cleanup-sessions`` are triggered
by the script, ``send-weekly-digest`` is paused by it. Run it with
``soloist run tests/browser/apps/showcase_app.py:app``.
"""

from __future__ import annotations

import asyncio
import random
import time

from soloist import JobContext, Scheduler, cron, every

app = Scheduler(poll_interval="0.2s", lease_ttl="4s", heartbeat="1s", grace_period="1s")

BANK = "sftp.bank.example.com:22"


@app.job(every("2s"), name="sync-invoices", retries=3, timeout="1m")
def sync_invoices(ctx: JobContext) -> str:
    time.sleep(random.uniform(0.05, 0.25))  # the shop's accounting API answers
    return f"synced {random.randint(3, 40)} invoices"


@app.job(every("3s"), name="import-bank-statements", retries=1, backoff="fixed", backoff_base="1s")
def import_bank_statements(ctx: JobContext) -> None:
    time.sleep(0.03)
    raise ConnectionError(f"{BANK}: connection timed out after 30 s")


@app.job(cron("30 2 * * *", tz="Europe/Berlin"), name="nightly-report", timeout="10m")
async def nightly_report(ctx: JobContext) -> str:
    await asyncio.sleep(0.4)  # renders and mails the sales report
    return "report mailed to 3 recipients"


@app.job(cron("*/15 * * * *"), name="cleanup-sessions", catch_up="skip")
def cleanup_sessions(ctx: JobContext) -> str:
    time.sleep(0.08)
    return "deleted 1,204 expired sessions"


@app.job(every("1h"), name="refresh-exchange-rates", catch_up="skip")
async def refresh_exchange_rates(ctx: JobContext) -> str:
    return "EUR, USD, GBP rates updated"


@app.job(cron("0 8 * * 1", tz="America/New_York"), name="send-weekly-digest", catch_up="skip")
def send_weekly_digest(ctx: JobContext) -> str:
    return "digest sent"
