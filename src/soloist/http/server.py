"""Serving the HTTP endpoint with uvicorn inside the scheduler's own event loop.

:class:`HttpServer` is a named service with ``start``/``stop`` (safe twice). It binds the
socket itself, so that a taken port fails ``start`` with a clear error (uvicorn would
``sys.exit``), and so that port 0 yields the port the OS chose. uvicorn's own signal
handling is off: SIGTERM stays with :meth:`soloist.Scheduler.serve`, which stops this
server first and then the workers gracefully.

Bound to a loopback address (the default), it answers only requests whose ``Host`` is
``localhost``, ``127.0.0.1`` or ``[::1]``: a web page whose name an attacker re-points at
127.0.0.1 (DNS rebinding) would otherwise read the API from the user's browser. Bound
elsewhere (``0.0.0.0`` in a pod) any ``Host`` is accepted, since probes and Prometheus
use the pod's IP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn

from soloist.control import Control
from soloist.errors import ConfigError
from soloist.http.api import LOOPBACK_HOSTS, create_app, is_loopback

__all__ = ["HttpServer", "allowed_hosts"]

log = logging.getLogger("soloist")

#: Open connections get this long to finish on stop.
SHUTDOWN_GRACE_S = 3


def allowed_hosts(host: str) -> frozenset[str] | None:
    """The ``Host`` names a server listening on ``host`` answers to; None for any."""
    return LOOPBACK_HOSTS if is_loopback(host) else None


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to the host program."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HttpServer:
    """Serves ``create_app(control)`` on ``host:port`` until stopped."""

    name = "http"

    def __init__(self, control: Control, host: str, port: int) -> None:
        self.control = control
        self.host = host
        self.port = port
        #: The bound (host, port), once started.
        self.address: tuple[str, int] | None = None
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host, port = self.address or (self.host, self.port)
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    async def start(self) -> None:
        """Bind and serve; raises ConfigError naming the address if it cannot be bound."""
        if self._task is not None:
            return
        sock = self._bind()
        self.address = (self.host, sock.getsockname()[1])
        config = uvicorn.Config(
            create_app(self.control, allowed_hosts=allowed_hosts(self.host)),
            log_config=None,  # the program's logging stays as it is
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            server_header=False,
        )
        uvicorn_log = logging.getLogger("uvicorn.error")
        if uvicorn_log.level == logging.NOTSET:
            uvicorn_log.setLevel(logging.WARNING)  # soloist says what matters below
        server = self._server = _EmbeddedServer(config)
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name="soloist-http")
        # uvicorn says it has started with a plain flag, not an event: poll it briefly.
        while not server.started and not self._task.done():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()  # raises what stopped it
            raise ConfigError(f"the HTTP server on {self.url} stopped at once")
        log.info(
            "http listening on %s",
            self.url,
            extra={"action": "http_start", "instance_id": self.control.instance_id},
        )

    def _bind(self) -> socket.socket:
        try:
            infos = socket.getaddrinfo(
                self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        except socket.gaierror as exc:
            raise ConfigError(
                f"invalid HTTP address {self.host}:{self.port}: {exc.strerror}"
            ) from None
        family, kind, proto, _, sockaddr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(sockaddr)
            sock.listen(128)
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"cannot listen on {self.host}:{self.port} (--http / SOLOIST_HTTP): "
                f"{exc.strerror or exc}"
            ) from None
        sock.setblocking(False)
        return sock

    async def stop(self) -> None:
        """Stop accepting, let open requests finish briefly, close. Safe twice."""
        task, server = self._task, self._server
        self._task = self._server = None
        if task is None or server is None:
            return
        server.should_exit = True
        try:
            await task
        except (Exception, SystemExit) as exc:
            log.warning(
                "http server stopped with %s: %s",
                type(exc).__name__,
                exc,
                extra={"action": "http_error"},
            )
        log.info("http stopped", extra={"action": "http_stop"})
