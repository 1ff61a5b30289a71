"""The routes of the HTTP endpoint (see the package docstring for the contract).

Every answer is JSON except ``/`` (the dashboard) and ``/metrics`` (Prometheus text);
every error is ``{"error": "..."}`` with a status that says what went wrong: 400 bad
input, 401 missing or wrong token, 403 actions disabled, 404 unknown, 409 wrong state,
503 store unreachable.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from soloist.errors import (
    ConfigError,
    SoloistError,
    StateConflictError,
    StoreError,
    UnknownTaskError,
)
from soloist.metrics import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from soloist.scheduler import Scheduler

__all__ = ["MAX_LIMIT", "READY_TIMEOUT", "create_app"]

log = logging.getLogger("soloist")

#: ``/readyz`` fails when the store does not answer within this many seconds.
READY_TIMEOUT = 2.0
#: ``/api/occurrences``: rows returned by default, and at most.
DEFAULT_LIMIT = 50
MAX_LIMIT = 500

READ_ONLY = "read-only: set SOLOIST_TOKEN to enable actions"
#: Headers on every answer: nothing here is to be sniffed, framed or cached.
SAFE_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
DASHBOARD_HEADERS = {
    **SAFE_HEADERS,
    "Content-Security-Policy": "default-src 'self'; script-src 'self' 'unsafe-inline'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "Referrer-Policy": "no-referrer",
}
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
    return json_response({"error": message}, status, headers)


def guarded(endpoint: Endpoint) -> Endpoint:
    """Turn soloist's errors into JSON answers with the status they mean."""

    @functools.wraps(endpoint)
    async def run(request: Request) -> Response:
        try:
            return await endpoint(request)
        except UnknownTaskError as exc:
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
    """The endpoints, bound to one scheduler and its (optional) action token."""

    def __init__(self, scheduler: Scheduler, token: str | None) -> None:
        self.app = scheduler
        self._token = token.encode() if token else None

    # -- auth ---------------------------------------------------------------------------------
    def refusal(self, request: Request) -> Response | None:
        """None if ``request`` may act, else the 403 or 401 answer."""
        if self._token is None:
            return error(403, READ_ONLY)
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self._token
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
        return HTMLResponse(page, headers=DASHBOARD_HEADERS)

    async def healthz(self, request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        async def ping() -> None:
            store = await self.app.astore()
            await store.now()

        try:
            await asyncio.wait_for(ping(), READY_TIMEOUT)
        except asyncio.TimeoutError:
            message = f"the store did not answer within {READY_TIMEOUT:g}s"
            return json_response({"status": "unavailable", "error": message}, 503)
        except Exception as exc:
            return json_response({"status": "unavailable", "error": str(exc)}, 503)
        return json_response({"status": "ready"})

    async def status(self, request: Request) -> Response:
        report = await self.app.astatus()
        report["actions_enabled"] = self._token is not None
        return json_response(report)

    async def metrics(self, request: Request) -> Response:
        metrics = self.app.metrics
        try:
            await metrics.refresh_counts(await self.app.astore())
        except StoreError:
            metrics.store_error("occurrence_counts")  # the rest is still worth serving
        return Response(metrics.exposition(), headers=SAFE_HEADERS, media_type=CONTENT_TYPE_LATEST)

    # -- reads --------------------------------------------------------------------------------
    async def jobs(self, request: Request) -> Response:
        return json_response({"jobs": await self.app.ops.job_summaries()})

    async def occurrences(self, request: Request) -> Response:
        query = request.query_params
        text = query.get("limit", str(DEFAULT_LIMIT))
        if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
            raise ConfigError(f"invalid limit {text!r}: expected an integer from 1 to {MAX_LIMIT}")
        found = await self.app.ahistory(
            job=query.get("job") or None, state=query.get("state") or None, limit=int(text)
        )
        return json_response({"occurrences": [occ.to_json() for occ in found]})

    async def occurrence(self, request: Request) -> Response:
        occ, attempts = await self.app.aattempts(request.path_params["id"])
        return json_response({**occ.to_json(), "attempts": [a.to_json() for a in attempts]})

    # -- actions ------------------------------------------------------------------------------
    async def trigger(self, request: Request) -> Response:
        if (refused := self.refusal(request)) is not None:
            return refused
        name = request.path_params["name"]
        return json_response({"occurrence_id": await self.app.atrigger(name), "job": name}, 202)

    async def pause(self, request: Request) -> Response:
        if (refused := self.refusal(request)) is not None:
            return refused
        name = request.path_params["name"]
        await self.app.apause(name)
        return json_response({"job": name, "paused": True})

    async def resume(self, request: Request) -> Response:
        if (refused := self.refusal(request)) is not None:
            return refused
        name = request.path_params["name"]
        await self.app.aresume(name)
        return json_response({"job": name, "paused": False})

    async def retry(self, request: Request) -> Response:
        if (refused := self.refusal(request)) is not None:
            return refused
        new_id = await self.app.aretry(request.path_params["id"])
        return json_response({"occurrence_id": new_id}, 202)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths (404) and wrong methods (405) answer in JSON like everything else."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return error(404, f"no such endpoint: {request.method} {request.url.path}")
    return error(exc.status_code, str(exc.detail), dict(exc.headers or {}))


def create_app(scheduler: Scheduler, *, token: str | None = None) -> Starlette:
    """The ASGI app of ``scheduler``'s HTTP endpoint. ``token`` enables the actions
    (default: the scheduler's ``token`` setting, ``SOLOIST_TOKEN``); without one the API
    is read-only. Mountable under any prefix."""
    api = Api(scheduler, token if token is not None else scheduler.config.token)
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
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
