"""docs/howto/observability.md runs as written: its Sentry wrapper, with the real
sentry_sdk and a transport that keeps the events instead of sending them, reports each
failed attempt of a handler tagged with its run; the logging example defines its task."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any, ClassVar

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from soloist import Scheduler, State

DOC = Path(__file__).resolve().parents[2] / "docs" / "howto" / "observability.md"


class KeptEvents(Transport):
    """A Sentry transport that keeps the events it is given."""

    events: ClassVar[list[dict[str, Any]]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        event = envelope.get_event()
        if event is not None:
            self.events.append(dict(event))


async def test_the_sentry_example_reports_each_failed_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's code, run: charge fails twice (retries=1), each attempt reaches Sentry
    with the exception, the job and attempt tags and the occurrence context; the run is
    recorded dead as usual; the page's logging example registers its task too."""
    monkeypatch.setenv("SOLOIST_STORE_URL", f"sqlite:///{tmp_path / 'soloist.db'}")
    monkeypatch.setenv("SOLOIST_POLL_INTERVAL", "50ms")  # the retry is due 100 ms later
    monkeypatch.delenv("SENTRY_DSN", raising=False)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 2
    namespace: dict[str, Any] = {}
    # The page's sentry_sdk.init() (no DSN here) is made below with a transport, and
    # without the 1.4 s of auto-enabled integrations a bare init() looks for.
    inits: list[object] = []
    with monkeypatch.context() as patched:
        patched.setattr(sentry_sdk, "init", lambda *a, **kw: inits.append((a, kw)))
        exec(compile(blocks[0] + blocks[1], str(DOC), "exec"), namespace)
    assert inits == [((), {})]
    app: Scheduler = namespace["app"]
    assert {"charge", "ship"} <= set(app.registry.tasks)
    KeptEvents.events.clear()
    sentry_sdk.init(
        dsn="https://key@sentry.invalid/1", transport=KeptEvents, auto_enabling_integrations=False
    )
    try:
        occurrence = await app.aenqueue("charge", {"order": 7})
        await app.start()
        try:
            for _ in range(300):
                (row,) = await app.ahistory(job="charge")
                if row.state is State.DEAD:
                    break
                await asyncio.sleep(0.02)
        finally:
            await app.stop()
        sentry_sdk.flush()
    finally:
        sentry_sdk.init(auto_enabling_integrations=False)  # no DSN: nothing is sent
    assert row.id == occurrence and row.state is State.DEAD and row.attempt == 2
    assert [e["tags"]["soloist.attempt"] for e in KeptEvents.events] == [1, 2]
    for event in KeptEvents.events:
        (exception,) = event["exception"]["values"]
        assert exception["type"] == "RuntimeError"
        assert exception["value"] == "card declined for order 7"
        assert event["tags"]["soloist.job"] == "charge"
        assert event["contexts"]["soloist"]["occurrence"] == occurrence
