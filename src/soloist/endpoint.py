"""The HTTP endpoint as one more service of a running instance.

``Scheduler(http=...)`` and ``soloist run --http`` serve the endpoint while the workers
run. The scheduler starts it as a service over its :class:`soloist.control.Control`, like
the runtime, and knows nothing of the web layer: :mod:`soloist.http` (the extra
``soloist[http]``: Starlette and uvicorn) is imported by :meth:`HttpEndpoint.start` only,
so that a scheduler without an HTTP address never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from soloist.control import Control

if TYPE_CHECKING:
    from soloist.http.server import HttpServer

__all__ = ["HttpEndpoint"]


class HttpEndpoint:
    """Serves the HTTP endpoint of ``control`` on ``host:port`` from :meth:`start` to
    :meth:`stop` (safe twice)."""

    name = "http"

    def __init__(self, control: Control, host: str, port: int) -> None:
        self.control = control
        self.host = host
        self.port = port
        self._server: HttpServer | None = None

    @property
    def address(self) -> tuple[str, int] | None:
        """Where it listens (the bound port if 0 was asked), once started."""
        return self._server.address if self._server is not None else None

    async def start(self) -> None:
        """Bind and serve; raises ConfigError naming the address if it cannot be bound,
        or if soloist[http] is not installed."""
        if self._server is not None:
            return
        from soloist.http.server import HttpServer  # the optional extra soloist[http]

        server = HttpServer(self.control, self.host, self.port)
        await server.start()
        self._server = server  # only once it serves: a failed start can be tried again

    async def stop(self) -> None:
        """Stop accepting, let open requests finish briefly, close. Safe twice."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop()
