"""soloist[otel]: spans for enqueue (producer) and run (consumer), the W3C trace context
carried with the occurrence from the enqueuing process to the run; nothing at all without
a tracer provider."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from soloist import Scheduler
from soloist.context import JobContext
from soloist.errors import PayloadError
from soloist.tracing import TRACE_KEY

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans finished during the test (an SDK provider set once for the process, as
    an application sets it at start-up)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


async def test_the_run_span_is_a_child_of_the_enqueue_span(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    """A task enqueued inside a span by one Scheduler and run by another (same SQLite
    store): the enqueue is a PRODUCER span under the caller's span, the run a CONSUMER
    span whose parent is the enqueue span; the handler never sees the trace context in
    its payload; a failing run's span records the error."""
    url = f"sqlite:///{tmp_path / 'traced.db'}"
    seen: dict[str, Any] = {}
    done = asyncio.Event()

    def app(instance_id: str, **settings: Any) -> Scheduler:
        """The app both processes import: the web side enqueues, the worker runs."""
        made = Scheduler(url, instance_id=instance_id, **settings)

        @made.task()
        async def send_email(ctx: JobContext, to: str) -> None:
            seen.update(to=to, payload=dict(ctx.payload), context=ctx.trace_context)
            seen["current"] = trace.get_current_span().get_span_context().span_id

        @made.task()
        def charge(ctx: JobContext, amount: int) -> None:
            done.set()
            raise ValueError(f"card declined for {amount}")

        return made

    producer, consumer = app("web"), app("worker", poll_interval="20ms")
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        first = await producer.aenqueue("send_email", {"to": "a@b.c"})
        await producer.aenqueue("charge", {"amount": 5})
    stored = await (await producer.astore()).occurrence_list()
    assert all(set(o.payload[TRACE_KEY]) >= {"traceparent"} for o in stored)
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), 10)
        for _ in range(200):
            if len([s for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER]) == 2:
                break
            await asyncio.sleep(0.02)
    finally:
        await consumer.stop()
        await producer.stop()
    by_name = {s.name: s for s in spans.get_finished_spans()}
    send, run = by_name["send send_email"], by_name["process send_email"]
    assert send.kind is SpanKind.PRODUCER and run.kind is SpanKind.CONSUMER
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert run.parent is not None and run.parent.span_id == send.context.span_id
    assert run.context.trace_id == send.context.trace_id == request.get_span_context().trace_id
    assert send.attributes is not None and send.attributes["messaging.message.id"] == first
    assert run.attributes is not None and run.attributes["messaging.message.id"] == first
    assert seen["to"] == "a@b.c" and seen["payload"] == {"to": "a@b.c"}
    assert seen["context"]["traceparent"].split("-")[2] == format(send.context.span_id, "016x")
    assert seen["current"] == run.context.span_id
    failed = by_name["process charge"]
    assert (
        failed.parent is not None
        and failed.parent.span_id == by_name["send charge"].context.span_id
    )
    assert failed.status.status_code is StatusCode.ERROR
    assert "card declined" in (failed.status.description or "")


def test_the_trace_key_is_reserved() -> None:
    """A user payload may not use the key soloist keeps the trace context in."""
    app = Scheduler("memory://")

    @app.task()
    def anything(ctx: JobContext, **kwargs: Any) -> None: ...

    with pytest.raises(PayloadError, match=r"'soloist\.trace' is reserved"):
        app.enqueue("anything", {TRACE_KEY: {"traceparent": "x"}})


def test_without_a_tracer_provider_nothing_is_traced_or_stored() -> None:
    """With opentelemetry installed but no tracer provider set, enqueue stores no trace
    context and no handler wrapper is installed; the check is made once."""
    script = textwrap.dedent(
        """
        import asyncio, json
        from soloist import Scheduler, tracing

        calls = []
        real = tracing.enabled
        tracing.enabled = lambda: calls.append(1) or real()
        app = Scheduler("memory://")

        @app.task()
        def t(ctx, n): pass

        async def main():
            for n in range(3):
                await app.aenqueue("t", {"n": n})
            rows = await (await app.astore()).occurrence_list()
            await app.start()
            await app.stop()
            return sorted((r.payload for r in rows), key=lambda p: p["n"])

        payloads = asyncio.run(main())
        print(json.dumps({"payloads": payloads, "checks": len(calls),
                          "wrapped": app._handler_wrappers != []}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"payloads": [{"n": 0}, {"n": 1}, {"n": 2}], "checks": 1, "wrapped": False}


async def test_a_batch_enqueue_is_one_span_that_parents_each_run(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    """enqueue_many makes one PRODUCER span counting the batch; the run of each payload is
    its child."""
    url = f"sqlite:///{tmp_path / 'batch.db'}"
    names: list[str] = []

    def app(instance_id: str, **settings: Any) -> Scheduler:
        made = Scheduler(url, instance_id=instance_id, **settings)

        @made.task()
        def greet(ctx: JobContext, name: str) -> None:
            names.append(name)

        return made

    producer, consumer = app("web"), app("worker", poll_interval="20ms")
    assert await producer.aenqueue_many("greet", [{"name": "a"}, {"name": "b"}]) == 2
    await consumer.start()
    try:
        for _ in range(250):
            if len([s for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER]) == 2:
                break
            await asyncio.sleep(0.02)
    finally:
        await consumer.stop()
        await producer.stop()
    (send,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.PRODUCER]
    runs = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CONSUMER]
    assert send.attributes is not None
    assert send.attributes["messaging.batch.message_count"] == 2
    assert sorted(names) == ["a", "b"] and len(runs) == 2
    assert all(r.parent is not None and r.parent.span_id == send.context.span_id for r in runs)
