"""Browser-test app: soloist's HTTP app mounted under ``/ops`` in a host ASGI app.

``uvicorn mounted:web --app-dir tests/browser/apps``: the scheduler runs in the host's
lifespan and the dashboard is served at ``/ops/``, to prove it works under a prefix.
"""

from __future__ import annotations

from dashboard_app import app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from soloist.contrib.asgi import lifespan
from soloist.http import create_app


async def home(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the host app's own page")


web = Starlette(
    routes=[Route("/", home), Mount("/ops", create_app(app))],
    lifespan=lifespan(app),
)
