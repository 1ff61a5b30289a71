"""``POST /api/occurrences/{id}/cancel``: token-protected like every action; 200 for a
scheduled occurrence (it will not run), 202 for a running one (its runner is asked),
409 for a finished one, 404 for an unknown id."""

from __future__ import annotations

from datetime import timedelta

import httpx

from soloist import Scheduler
from soloist.http import create_app
from soloist.models import State

TOKEN = "cancel-token"


async def test_cancel_over_http() -> None:
    """Each answer of the cancel action, and the token it needs."""
    app = Scheduler("memory://", instance_id="http-cancel")

    @app.task
    async def later(ctx) -> None:  # type: ignore[no-untyped-def]
        pass

    scheduled = await app.aenqueue(later, delay="1h")
    busy = await app.aenqueue(later)
    store = await app.astore()
    (running,) = await store.occurrence_claim("other", ["later"], 1, timedelta(minutes=1))
    assert running.id == busy
    transport = httpx.ASGITransport(app=create_app(app, token=TOKEN))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        refused = await client.post(f"/api/occurrences/{scheduled}/cancel")
        assert refused.status_code == 401
        assert (await app.aattempts(scheduled))[0].state is State.SCHEDULED

        done = await client.post(f"/api/occurrences/{scheduled}/cancel", headers=auth)
        assert done.status_code == 200
        body = done.json()
        assert body["outcome"] == "cancelled"
        assert (body["occurrence"]["state"], body["occurrence"]["error_code"]) == (
            "dead",
            "cancelled",
        )

        asked = await client.post(f"/api/occurrences/{busy}/cancel", headers=auth)
        assert asked.status_code == 202 and asked.json()["outcome"] == "requested"
        again = await client.post(f"/api/occurrences/{busy}/cancel", headers=auth)
        assert again.status_code == 202 and again.json()["outcome"] == "already_requested"

        finished = await client.post(f"/api/occurrences/{scheduled}/cancel", headers=auth)
        assert finished.status_code == 409 and "finished" in finished.json()["error"]
        unknown = await client.post("/api/occurrences/nope/cancel", headers=auth)
        assert unknown.status_code == 404 and "nope" in unknown.json()["error"]
        wrong = await client.get(f"/api/occurrences/{busy}/cancel", headers=auth)
        assert wrong.status_code == 405
    await app.aclose()
