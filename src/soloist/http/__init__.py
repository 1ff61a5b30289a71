"""The opt-in HTTP endpoint: health, status, metrics, a JSON API and the dashboard.

An ASGI app (Starlette) that ``soloist run APP --http HOST:PORT`` serves with uvicorn in
the scheduler's own event loop, or that an existing ASGI app mounts::

    fastapi_app.mount("/soloist", create_app(app))

Every URL the dashboard uses is relative, so it works under such a prefix. Reads need no
credentials; actions (``POST``) need ``Authorization: Bearer <SOLOIST_TOKEN>`` and are
refused (403) when no token is configured. Needs the extra ``soloist[http]``.
"""

from __future__ import annotations

from soloist.errors import ConfigError

try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ConfigError(
        f"the HTTP endpoint needs starlette and uvicorn ({exc}): pip install 'soloist[http]'"
    ) from None

from soloist.http.api import create_app

__all__ = ["create_app"]
