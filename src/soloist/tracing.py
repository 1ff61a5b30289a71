"""OpenTelemetry spans for enqueue and run, with the trace context carried from the
enqueuing process to the run (``pip install 'soloist[otel]'``: the API only; the SDK and
its exporters are the application's).

**Where the context travels.** An occurrence row has no metadata of its own; its payload
is the one field every store persists as given. ``enqueue`` therefore stores the W3C trace
context (``traceparent``, ``tracestate``) under the reserved payload key
:data:`TRACE_KEY`, which is not a Python identifier, so no handler can name it, and which
no user payload may use. The runner takes it out before the handler sees the payload
(:meth:`soloist.context.JobContext.for_occurrence`: ``ctx.payload`` and the keyword
arguments never show it; ``ctx.trace_context`` does) and parents the run's span on it.
An occurrence read from the store keeps it in its payload, which ties an audit record
to its trace.

**Cost.** Whether to trace is decided once per Scheduler, when it first enqueues or starts
its workers: with opentelemetry not installed, or no tracer provider set (the API's
default proxy or no-op provider), nothing is imported again, no key is stored and no
wrapper is installed, so an enqueue and a run cost what they did.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from soloist.models import JSONDict

Handler = Callable[..., Any]

#: The payload key holding the trace context of the enqueue (``traceparent``,
#: ``tracestate``); reserved: a user payload may not use it.
TRACE_KEY = "soloist.trace"
#: The instrumentation scope of soloist's spans.
TRACER_NAME = "soloist"


def enabled() -> bool:
    """Whether spans would be recorded: opentelemetry is installed and the application has
    set a tracer provider (not the API's default proxy or no-op one)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


@contextmanager
def enqueue_span(task: str) -> Iterator[tuple[Any, JSONDict]]:
    """A PRODUCER span around one enqueue of ``task``, current while it lasts, and the
    trace context to store with the occurrence (call only when :func:`enabled`)."""
    from opentelemetry import propagate, trace

    tracer = trace.get_tracer(TRACER_NAME)
    attributes = {
        "messaging.system": "soloist",
        "messaging.operation.type": "send",
        "messaging.destination.name": task,
    }
    with tracer.start_as_current_span(
        f"send {task}", kind=trace.SpanKind.PRODUCER, attributes=attributes
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield span, dict(carrier)


def traced_handler(fn: Handler) -> Handler:
    """A handler wrapper (for :meth:`soloist.Scheduler.wrap_handlers`) that runs each call
    in a CONSUMER span, child of the enqueue's span when the occurrence carries one."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def traced_async(ctx: Any, /, *args: Any, **kwargs: Any) -> Any:
            with _run_span(ctx):
                return await fn(ctx, *args, **kwargs)

        return traced_async

    @functools.wraps(fn)
    def traced(ctx: Any, /, *args: Any, **kwargs: Any) -> Any:
        with _run_span(ctx):
            return fn(ctx, *args, **kwargs)

    return traced


@contextmanager
def _run_span(ctx: Any) -> Iterator[None]:
    from opentelemetry import propagate, trace

    carrier = ctx.trace_context
    parent = propagate.extract(carrier) if carrier else None
    attributes = {
        "messaging.system": "soloist",
        "messaging.operation.type": "process",
        "messaging.destination.name": ctx.task,
        "messaging.message.id": ctx.occurrence_id,
        "soloist.job": ctx.job,
        "soloist.scope": ctx.scope,
        "soloist.plan_time": ctx.plan_time.isoformat(),
        "soloist.attempt": ctx.attempt,
        "soloist.instance_id": ctx.instance_id,
    }
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"process {ctx.task}", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes
    ):
        yield
