"""The routes of the HTTP endpoint (see the package docstring for the contract).

Every answer is JSON except ``/`` (the dashboard) and ``/metrics`` (Prometheus text);
every error is ``{"error": "..."}`` with a status that says what went wrong: 400 bad
input, 401 missing or wrong token, 403 actions disabled, 404 unknown, 409 wrong state,
503 store unreachable.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import hmac
import ipaddress
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from soloist.control import Control, SupportsControl
from soloist.errors import (
    ConfigError,
    NotFoundError,
    SoloistError,
    StateConflictError,
    StoreError,
)
from soloist.metrics import CONTENT_TYPE_LATEST
from soloist.models import Cancelled
from soloist.stores.pages import JobQuery, check_query

__all__ = ["LOOPBACK_HOSTS", "MAX_LIMIT", "READY_TIMEOUT", "create_app", "is_loopback"]

log = logging.getLogger("soloist")

#: ``/readyz`` fails when the store does not answer within this many seconds.
READY_TIMEOUT = 2.0
#: A read (GET) that waits longer than this on the store answers 503.
READ_TIMEOUT = 10.0
#: Error messages longer than this are cut (they may echo a long name or id).
MAX_ERROR_CHARS = 500
#: The ``Host`` names a loopback-bound server answers to (any port): a DNS-rebinding page
#: reaches 127.0.0.1 under its own name, which is not one of these.
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
#: ``/api/occurrences`` and ``/api/jobs``: rows returned by default, and at most.
DEFAULT_LIMIT = 50
MAX_LIMIT = 500

READ_ONLY = "read-only: set SOLOIST_TOKEN to enable actions"
#: Headers on every answer: nothing here is to be sniffed, framed, cached or referred to.
SAFE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
}
#: The dashboard's policy: its one inline script is allowed by its hash, nothing else runs.
DASHBOARD_CSP = (
    "default-src 'self'; script-src {script}; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'none'; object-src 'none'"
)
INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)
PLACEHOLDER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>soloist</title></head>
<body><h1>soloist</h1><p>The dashboard is not installed. JSON:
<a href="status">status</a>, <a href="api/jobs">jobs</a>,
<a href="api/occurrences">occurrences</a>, <a href="metrics">metrics</a>.</p></body></html>
"""

Endpoint = Callable[[Request], Awaitable[Response]]


def json_response(
    data: Any, status: int = 200, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers={**SAFE_HEADERS, **(headers or {})})


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - 1] + "…"
    return json_response({"error": message}, status, headers)


def dashboard_csp(page: str) -> str:
    """The dashboard's Content-Security-Policy, allowing exactly the inline scripts of
    ``page`` by their SHA-256 (no ``'unsafe-inline'`` for scripts)."""
    hashes = [
        "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"
        for body in INLINE_SCRIPT.findall(page)
    ]
    return DASHBOARD_CSP.format(script=" ".join(hashes) or "'none'")


def text_param(kind: str, value: str) -> str:
    """``value`` of a name or id taken from the URL, refused (400) if it has a NUL byte
    (no store can hold one; PostgreSQL would fail the query instead of finding nothing)."""
    if "\x00" in value:
        raise ConfigError(f"invalid {kind} {value!r}: must not contain a NUL byte")
    return value


def parse_limit(text: str) -> int:
    """The ``limit`` query parameter: ASCII digits only, 1 to MAX_LIMIT."""
    digits = text.isascii() and text.isdigit() and len(text) <= len(str(MAX_LIMIT))
    if not digits or not 1 <= int(text) <= MAX_LIMIT:
        raise ConfigError(f"invalid limit {text!r}: expected an integer from 1 to {MAX_LIMIT}")
    return int(text)


def parse_paused(text: str) -> bool:
    """The ``paused`` query parameter: ``true`` or ``false``."""
    if text not in ("true", "false"):
        raise ConfigError(f"invalid paused {text!r}: expected true or false")
    return text == "true"


def jobs_query(query: Mapping[str, str]) -> JobQuery:
    """The page of ``GET /api/jobs`` its query parameters ask for: ``limit`` (1 to 500,
    default 50), ``cursor`` (the ``next_cursor`` of the page before), ``prefix`` (of the
    names), ``paused`` (``true``/``false``) and ``outcome`` (the last outcome:
    ``succeeded``, ``dead``, ``skipped`` or ``none``); a bad value is a 400 naming it."""
    return check_query(
        JobQuery(
            after=query.get("cursor") or None,
            prefix=query.get("prefix", ""),
            paused=parse_paused(query["paused"]) if query.get("paused") else None,
            outcome=query.get("outcome") or None,
            limit=parse_limit(query.get("limit", str(DEFAULT_LIMIT))),
        )
    )


def guarded(endpoint: Endpoint) -> Endpoint:
    """Turn soloist's errors into JSON answers with the status they mean."""

    @functools.wraps(endpoint)
    async def run(request: Request) -> Response:
        try:
            if request.method != "GET":
                return await endpoint(request)
            # A read that hangs on the store is a 503, not a connection held open forever.
            # (Actions are not cut short: the answer would not say whether they happened.)
            return await asyncio.wait_for(endpoint(request), READ_TIMEOUT)
        except asyncio.TimeoutError:
            return error(503, f"the store did not answer within {READ_TIMEOUT:g}s")
        except NotFoundError as exc:
            return error(404, str(exc))
        except StateConflictError as exc:
            return error(409, str(exc))
        except ConfigError as exc:
            return error(400, str(exc))
        except StoreError as exc:
            return error(503, str(exc))
        except SoloistError as exc:
            return error(400, str(exc))
        except Exception as exc:
            log.exception(
                "HTTP %s %s failed",
                request.method,
                request.url.path,
                extra={"action": "http_error"},
            )
            return error(500, f"internal error ({type(exc).__name__})")

    return run


class Api:
    """The endpoints, bound to one instance's :class:`Control` and an (optional) action
    token."""

    def __init__(self, control: Control, token: str | None) -> None:
        self.control = control
        self._token = token.encode() if token else None

    # -- auth ---------------------------------------------------------------------------------
    def refusal(self, request: Request) -> Response | None:
        """None if ``request`` may act, else the 403 or 401 answer."""
        if self._token is None:
            return error(403, READ_ONLY)
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        # Starlette decodes header bytes as latin-1: encoding back gives the bytes sent, so
        # a non-ASCII token sent as UTF-8 matches, and no header can raise here.
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode("latin-1"), self._token
        ):
            return error(
                401, "missing or wrong bearer token", {"WWW-Authenticate": 'Bearer realm="soloist"'}
            )
        return None

    # -- pages and probes ---------------------------------------------------------------------
    async def dashboard(self, request: Request) -> Response:
        try:
            page = resources.files("soloist.http").joinpath("dashboard.html").read_text("utf-8")
        except (FileNotFoundError, OSError):
            page = PLACEHOLDER
        headers = {**SAFE_HEADERS, "Content-Security-Policy": dashboard_csp(page)}
        return HTMLResponse(page, headers=headers)

    async def healthz(self, request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        try:
            await asyncio.wait_for(self.control.ping(), READY_TIMEOUT)
        except asyncio.TimeoutError:
            message = f"the store did not answer within {READY_TIMEOUT:g}s"
            return json_response({"status": "unavailable", "error": message}, 503)
        except Exception as exc:
            return json_response({"status": "unavailable", "error": str(exc)}, 503)
        # The store answers; the instance may still be unable to work (leaked threads at
        # their bound, a store that lost its data and is not set up again yet).
        health = self.control.health()
        extra = {"warnings": list(health.warnings)} if health.warnings else {}
        if not health.ready:
            reason = "; ".join(health.problems)
            return json_response({"status": "unavailable", "error": reason, **extra}, 503)
        return json_response({"status": "ready", **extra})

    async def status(self, request: Request) -> Response:
        report = await self.control.status()
        report["actions_enabled"] = self._token is not None
        return json_response(report)

    async def metrics(self, request: Request) -> Response:
        # The counts are refreshed within READY_TIMEOUT; the rest is served either way.
        exposition = await self.control.metrics(READY_TIMEOUT)
        return Response(exposition, headers=SAFE_HEADERS, media_type=CONTENT_TYPE_LATEST)

    # -- reads --------------------------------------------------------------------------------
    async def jobs(self, request: Request) -> Response:
        return json_response(await self.control.jobs(jobs_query(request.query_params)))

    async def occurrences(self, request: Request) -> Response:
        query = request.query_params
        limit = parse_limit(query.get("limit", str(DEFAULT_LIMIT)))
        found = await self.control.history(
            job=text_param("job", query.get("job", "")) or None,
            state=query.get("state") or None,
            limit=limit,
        )
        return json_response({"occurrences": [occ.to_json() for occ in found]})

    async def occurrence(self, request: Request) -> Response:
        occ, attempts = await self.control.attempts(text_param("id", request.path_params["id"]))
        return json_response({**occ.to_json(), "attempts": [a.to_json() for a in attempts]})

    # -- actions ------------------------------------------------------------------------------
    async def trigger(self, request: Request) -> Response:
        if (refused := self.refusal(request)) is not None:
            return refused
        name = text_param("job", request.path_params["name"])
        return json_response({"occurrence_id": await self.control.trigger(name), "job": name}, 202)

    async def pause(self, request: Request) -> Response:
        if (refused := self.refusal(request)) is not None:
            return refused
        name = text_param("job", request.path_params["name"])
        await self.control.pause(name)
        return json_response({"job": name, "paused": True})

    async def resume(self, request: Request) -> Response:
        if (refused := self.refusal(request)) is not None:
            return refused
        name = text_param("job", request.path_params["name"])
        await self.control.resume(name)
        return json_response({"job": name, "paused": False})

    async def retry(self, request: Request) -> Response:
        if (refused := self.refusal(request)) is not None:
            return refused
        new_id = await self.control.retry(text_param("id", request.path_params["id"]))
        return json_response({"occurrence_id": new_id}, 202)

    async def cancel(self, request: Request) -> Response:
        """200 ``cancelled`` (it will not run), 202 ``requested`` / ``already_requested``
        (its runner stops it at its next lease renewal), 409 finished, 404 unknown."""
        if (refused := self.refusal(request)) is not None:
            return refused
        answer = await self.control.cancel(text_param("id", request.path_params["id"]))
        done = answer.outcome is Cancelled.CANCELLED
        return json_response(answer.to_json(), 200 if done else 202)


def is_loopback(host: str) -> bool:
    """Whether the listening address ``host`` only accepts connections from this machine."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without the port, lower case (``[::1]`` keeps its
    brackets)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header.partition("]")[0] + "]"
    return header.rpartition(":")[0] if ":" in header else header


class HostCheck:
    """Answers 421 to requests whose ``Host`` is not one of ``allowed`` (any port): the
    defence against DNS rebinding of a server that listens on a loopback address."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = next((v for k, v in scope["headers"] if k == b"host"), b"")
            host = raw.decode("latin-1")
            if host_name(host) not in self.allowed:
                allowed = ", ".join(sorted(self.allowed))
                answer = error(
                    421, f"invalid Host header {host[:100]!r}: expected one of {allowed}"
                )
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths (404) and wrong methods (405) answer in JSON like everything else."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return error(404, f"no such endpoint: {request.method} {request.url.path}")
    return error(exc.status_code, str(exc.detail), dict(exc.headers or {}))


def create_app(
    scheduler: SupportsControl | Control,
    *,
    token: str | None = None,
    allowed_hosts: Iterable[str] | None = None,
) -> Starlette:
    """The ASGI app of ``scheduler``'s HTTP endpoint: a :class:`soloist.Scheduler`, or
    any :class:`soloist.control.Control` (what the endpoint reads and does). ``token``
    enables the actions (default: the scheduler's ``token`` setting, ``SOLOIST_TOKEN``);
    without one the API is read-only. ``allowed_hosts``: if given, requests whose ``Host``
    header names another host (any port) are refused with 421. Mountable under any
    prefix."""
    control = scheduler.control if isinstance(scheduler, SupportsControl) else scheduler
    api = Api(control, token if token is not None else control.token)
    get, post = ["GET"], ["POST"]
    routes = [
        Route("/", guarded(api.dashboard), methods=get),
        Route("/healthz", guarded(api.healthz), methods=get),
        Route("/readyz", guarded(api.readyz), methods=get),
        Route("/status", guarded(api.status), methods=get),
        Route("/metrics", guarded(api.metrics), methods=get),
        Route("/api/jobs", guarded(api.jobs), methods=get),
        # Job names may contain "/": the name is everything between the prefix and the verb.
        Route("/api/jobs/{name:path}/trigger", guarded(api.trigger), methods=post),
        Route("/api/jobs/{name:path}/pause", guarded(api.pause), methods=post),
        Route("/api/jobs/{name:path}/resume", guarded(api.resume), methods=post),
        Route("/api/occurrences", guarded(api.occurrences), methods=get),
        Route("/api/occurrences/{id}", guarded(api.occurrence), methods=get),
        Route("/api/occurrences/{id}/retry", guarded(api.retry), methods=post),
        Route("/api/occurrences/{id}/cancel", guarded(api.cancel), methods=post),
    ]
    middleware = []
    if allowed_hosts is not None:
        hosts = frozenset(host_name(h) for h in allowed_hosts)
        middleware.append(Middleware(HostCheck, allowed=hosts))
    return Starlette(
        routes=routes, middleware=middleware, exception_handlers={HTTPException: _http_error}
    )
